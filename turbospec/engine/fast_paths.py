"""What LLMEngine sets up at start-up to run faster than one eager step at a time: CUDA graphs
(decode and verify), decode bursts, the warm-up, and the automatic draft length's cost table.
Each only where it applies (engine/cuda_graph.py, multistep.py, warmup.py, draft_length.py)."""
from __future__ import annotations

import time
import warnings

from turbospec.engine.burst_sampling import default_variants
from turbospec.engine.draft_length import AdaptiveDraftLength, candidate_ks
from turbospec.engine.step_cost import measure_cost_table
from turbospec.engine.warmup import warm_up_engine
from turbospec.generation_defaults import read_sampling_defaults

# the largest running batch the engine captures CUDA graphs and decode bursts for; a step with more
# running sequences runs eagerly (and a small model is then bound by the host)
MAX_GRAPH_BATCH = 256


def setup_fast_paths(engine, k: int, auto_draft_length: bool, graph_query_lens: list[int] | None) -> None:
    """Sets engine.burst, engine.adaptive and the start-up timings in engine.startup. Called from
    LLMEngine.__init__ (its warning's stacklevel names the engine's caller)."""
    ec, runner = engine.engine_config, engine.runner
    tree = getattr(engine.proposer, "tree", None)            # EAGLE-3 trees: k is the node budget
    ks = candidate_ks(k, tree=tree is not None) if auto_draft_length and k else sorted({0, k})
    max_batch = min(ec.max_num_seqs, MAX_GRAPH_BATCH)
    capture_s = 0.0
    if not ec.enforce_eager:                 # a tree verify (tree mask) runs eagerly: decode graphs only
        query_lens = graph_query_lens or ([1] if tree else [kk + 1 for kk in ks])
        capture_s = runner.capture_graphs(max_batch, query_lens, engine.max_model_len)
    if runner.graphs is not None and ec.max_num_seqs > MAX_GRAPH_BATCH:
        warnings.warn(f"max_num_seqs={ec.max_num_seqs}: CUDA graphs and decode bursts cover at most "
                      f"{MAX_GRAPH_BATCH} running sequences, so steps with more run eagerly (several times "
                      f"slower on small models); max_num_seqs <= {MAX_GRAPH_BATCH} keeps every step graphed",
                      stacklevel=3)
    steps = ec.num_scheduler_steps or (8 if runner.graphs is not None else 1)
    engine.burst = None
    if steps > 1:
        t0 = time.perf_counter()
        # the variants requests left to the model's sampling defaults decode in, captured now
        defaults = read_sampling_defaults(engine.model_dir, ec.generation_config) if engine.model_dir else {}
        extra = default_variants(defaults)
        engine.burst = runner.make_burst(steps, max_batch, engine.max_model_len, capture=runner.graphs is not None,
                                         extra=extra)
        capture_s += time.perf_counter() - t0
    engine.startup["graph_capture_seconds"] = capture_s
    engine.startup["decode_burst_steps"] = engine.burst.n if engine.burst is not None else 1
    engine.startup["warmup_seconds"] = warm_up_engine(engine)
    engine.startup["num_cuda_graphs"] = (runner.graphs.num_graphs if runner.graphs else 0) + \
        (len(engine.burst.graphs) if engine.burst is not None else 0)
    engine.adaptive = (AdaptiveDraftLength(measure_cost_table(engine, ks, tree=tree is not None), k,
                                           tree_depth=tree["depth"] if tree else None)
                       if auto_draft_length and k else None)
