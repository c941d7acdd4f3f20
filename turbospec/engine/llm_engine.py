"""LLMEngine: requests in, tokens out. One `step()` = schedule → propose → forward → accept.

Without a drafter the same loop runs with an empty proposal (plain decoding).
"""
from __future__ import annotations

import logging
import time
import warnings
from dataclasses import dataclass
from typing import Any

import torch

from turbospec.config import EngineConfig, ModelConfig
from turbospec.engine.block_manager import BlockManager
from turbospec.engine.burst_step import try_burst
from turbospec.engine.decode_kernels import prepare_decode_gemvs
from turbospec.engine.detokenizer import IncrementalDetokenizer
from turbospec.engine.draft_length import exact_k_cap
# MAX_GRAPH_BATCH stays importable from here, where it lived before engine/fast_paths.py
from turbospec.engine.fast_paths import MAX_GRAPH_BATCH, setup_fast_paths  # noqa: F401
from turbospec.engine.grammar import GrammarCompiler
from turbospec.engine.kv_sizing import capped_len_message, choose_num_blocks
from turbospec.engine.model_runner import ModelRunner
from turbospec.engine.request_input import BatchRefused, NewRequest, build_sequence, check_priority
from turbospec.engine.scheduler import Scheduler, split_mixed
from turbospec.engine.sequence import Sequence, SequenceStatus
from turbospec.engine.spec_step import SpecDecodeStats, accept_step
from turbospec.layers.linear import INVARIANT_GEMMS, INVARIANT_MAX_M
from turbospec.layers.norm_epilogue import check_norm_fold
from turbospec.outputs import CompletionOutput, RequestOutput
from turbospec.sampling_params import SamplingParams
from turbospec.structured_outputs import grammar_failure
from turbospec.env_switch import flag

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class EngineStats:
    num_running: int
    num_waiting: int
    num_free_blocks: int
    num_total_blocks: int

    @property
    def kv_cache_usage(self) -> float:
        return 1.0 - self.num_free_blocks / max(self.num_total_blocks, 1)


class LLMEngine:
    def __init__(self, model_dir: str, model: torch.nn.Module, config: ModelConfig, tokenizer,
                 device: torch.device, dtype: torch.dtype, engine_config: EngineConfig,
                 proposer=None, load_seconds: float = 0.0, graph_query_lens: list[int] | None = None,
                 auto_draft_length: bool = False, bitwise_exact: bool = True):
        self.model_dir, self.model, self.model_config = model_dir, model, config
        self.tokenizer, self.device, self.dtype = tokenizer, device, dtype
        config.add_eos_token_id(getattr(tokenizer, "eos_token_id", None))     # vLLM stops on it too
        self.engine_config = engine_config
        self.proposer = proposer
        k = proposer.k if proposer is not None else 0
        # bitwise_exact: cap each step's k so that its verify rows fit the row-invariant kernels
        # (draft_length.exact_k_cap). Only CUDA's invariant kernels need it; with TURBOSPEC_GEMM=cublas
        # nothing is invariant, so the cap would cost speed and buy nothing.
        self.bitwise_exact = bitwise_exact and device.type == "cuda" and INVARIANT_GEMMS
        # the CUDA GEMVs serving the linears (TURBOSPEC_*_GEMV, auto: engines of max_num_seqs 1; bench headers
        # name them) and the row bound of the model's batch invariance (64, or 16 with a GEMV)
        self.exact_rows, self.decode_gemvs = prepare_decode_gemvs(model, device, dtype, engine_config.max_num_seqs,
                                                                  proposer, self.bitwise_exact)
        # decode rows of a step that also prefills run as a forward of their own (scheduler.split_mixed),
        # so that a greedy or seeded request's tokens do not depend on the prompts that arrive beside it
        self.split_mixed_steps = flag("TURBOSPEC_SPLIT_MIXED") and self.bitwise_exact      # (the switch checked always)
        num_blocks = choose_num_blocks(config, engine_config, device, dtype)
        self.runner = ModelRunner(model, config, device, dtype, num_blocks, engine_config.block_size)
        self.block_manager = BlockManager(num_blocks, engine_config.block_size)
        pool_tokens = self.block_manager.num_usable_blocks * engine_config.block_size
        model_len = engine_config.max_model_len or config.max_position_embeddings
        self.max_model_len = min(model_len, config.max_position_embeddings, pool_tokens - k - 1)
        if self.max_model_len < 2:
            raise ValueError(f"the KV cache holds {pool_tokens} tokens, too few for a context of 2 with "
                             f"{k} draft tokens per step: give it more memory (num_kv_blocks / "
                             "gpu_memory_utilization) or a smaller num_speculative_tokens")
        if engine_config.max_model_len and self.max_model_len < engine_config.max_model_len:
            warnings.warn(capped_len_message(engine_config, config, self.max_model_len, pool_tokens, k),
                          stacklevel=2)
        config.max_model_len = self.max_model_len          # vLLM's llm.llm_engine.model_config.max_model_len
        self.scheduler = Scheduler(self.block_manager, engine_config.max_num_seqs,
                                   max(engine_config.max_num_batched_tokens, self.max_model_len),
                                   on_preempt=self._on_preempt, policy=engine_config.scheduling_policy)
        self.seqs: dict[str, Sequence] = {}
        self.detok: dict[str, IncrementalDetokenizer] = {}
        self.grammars = GrammarCompiler(tokenizer, config.vocab_size, config.eos_token_ids)   # structured outputs
        self.spec_stats = SpecDecodeStats(k)
        # num_burst_tokens: generated tokens that came out of decode bursts (the rest took single steps)
        self.counters = {"num_prompt_tokens": 0, "num_generation_tokens": 0, "num_burst_tokens": 0}
        self.startup = {"weights_seconds": load_seconds, "kv_blocks": num_blocks,
                        "kv_tokens": pool_tokens,
                        "weights_gb": sum(p.numel() * p.element_size() for p in model.parameters()) / 1e9}
        if proposer is not None and proposer.aux_hidden_state_layers:
            check_norm_fold(model, device, type(proposer).__name__)
            model.aux_hidden_state_layers = tuple(proposer.aux_hidden_state_layers)
        self._flight = None                    # the next decode burst, launched, tokens not read yet
        self._step_k = None                    # the draft length chosen in this step, once
        setup_fast_paths(self, k, auto_draft_length, graph_query_lens)     # graphs, bursts, auto k

    @classmethod
    def from_config(cls, model: str, device: str | torch.device | None = None, dtype: str | None = None,
                    speculative_config: dict[str, Any] | None = None,
                    engine_config: EngineConfig | None = None, quantization: str | None = None,
                    tokenizer: str | None = None, revision: str | None = None,
                    tokenizer_revision: str | None = None, download_dir: str | None = None) -> "LLMEngine":
        """`model`, `tokenizer` and speculative_config's `model`: local directories or Hugging Face
        ids (turbospec/hub.py; `revision` / `tokenizer_revision` / `download_dir` as vLLM's)."""
        from turbospec.engine.engine_factory import build_engine
        return build_engine(cls, model, device, dtype, speculative_config, engine_config, quantization, tokenizer,
                            revision, tokenizer_revision, download_dir)

    # ---- requests -------------------------------------------------------------------------
    def add_request(self, request_id: str, prompt, params: SamplingParams | None = None,
                    add_special_tokens: bool = True, cap_to_context: bool = False, priority: int = 0) -> None:
        """`add_special_tokens`: a text prompt gets the tokenizer's BOS (as transformers and vLLM's
        generate / completions do); False for text a chat template rendered, which holds its own.
        `cap_to_context`: max_tokens past the context stops there (request_input.build_sequence).
        `priority`: under scheduling_policy "priority", lower values are scheduled first (vLLM's).
        A refused request is a ValueError that says how to fix it."""
        self._take([self._sequence(NewRequest(request_id, prompt, params, add_special_tokens, cap_to_context,
                                              priority))])

    def add_requests(self, requests: list[NewRequest]) -> None:
        """Several requests, all or none: each is validated before any is taken, so a refused one
        leaves the engine as it was (no sequence, no KV block, no counter moved). The refusal is a
        BatchRefused (a ValueError) giving the refused request's index in `requests`."""
        seqs: dict[str, Sequence] = {}
        for i, r in enumerate(requests):
            try:
                if r.request_id in seqs:
                    raise ValueError(f"request_id {r.request_id!r} is given twice: pass a unique id")
                seqs[r.request_id] = self._sequence(r)
            except ValueError as e:
                raise BatchRefused(i, e) from e
        self._take(list(seqs.values()))

    def _sequence(self, r: NewRequest) -> Sequence:
        """r's validated Sequence (its grammar state too); the engine is not changed."""
        if r.request_id in self.seqs:
            raise ValueError(f"request_id {r.request_id!r} is already in use: pass a unique id")
        priority = check_priority(r.priority, self.scheduler.policy)
        seq = build_sequence(r.request_id, r.prompt, r.params or SamplingParams(), self.tokenizer, self.model_config,
                             self.device, self.max_model_len, r.add_special_tokens, r.cap_to_context)
        if seq.params.structured_outputs is not None:
            seq.grammar = self.grammars.state(seq.params.structured_outputs, seq.prompt_token_ids)
        seq.priority = priority
        return seq

    def _take(self, seqs: list[Sequence]) -> None:
        """Validated sequences in, their prompt tokens counted (detokenizers built first: none half-taken)."""
        detoks = [IncrementalDetokenizer(self.tokenizer if s.params.detokenize else None,    # None: no text
                                         s.params.skip_special_tokens, s.params.stop) for s in seqs]
        for seq, detok in zip(seqs, detoks):
            self.seqs[seq.request_id], self.detok[seq.request_id] = seq, detok
            self.counters["num_prompt_tokens"] += seq.num_prompt_tokens
            self.scheduler.add(seq)

    def abort_request(self, request_id: str) -> None:
        seq = self.seqs.get(request_id)
        if seq is None or seq.is_finished:
            return
        seq.finish_reason = "abort"
        self._finish(seq)
        self.seqs.pop(request_id, None)
        self.detok.pop(request_id, None)

    def has_unfinished_requests(self) -> bool:
        return self.scheduler.has_unfinished()

    # ---- the step ------------------------------------------------------------------------
    def step(self) -> list[RequestOutput]:
        self._step_k = None                    # the draft length chosen in this step, once
        burst = try_burst(self)
        if burst is not None:
            return self._outputs(burst)
        k = self._step_draft_length()
        sched = self.scheduler.schedule(
            draft_slots=(lambda s: max(0, min(k, s.max_total_tokens - len(s) - 1))) if k else (lambda s: 0))
        if sched.is_empty:
            return []
        now = time.time()
        for s in sched.scheduled:
            if s.seq.metrics.first_scheduled_time is None:
                s.seq.metrics.first_scheduled_time = now
        parts = split_mixed(sched.scheduled, INVARIANT_MAX_M) if self.split_mixed_steps else [sched.scheduled]
        return self._outputs([seq for part in parts for seq in accept_step(self, part)])

    def draft_length(self, num_seqs: int, steps: int = 1) -> int:
        """Draft tokens per sequence for a step of `num_seqs` running sequences: the proposer's k,
        or the automatic choice, capped by `exact_k_cap` when bitwise_exact holds (0: plain). Under
        bitwise_exact a step that prefills drafts nothing: its decode rows share a call of more
        than 64 rows with the prompt's, so they round like plain decoding's mixed step only if
        that step is the same. Only greedy and seeded sequences are compared token for token, so a
        batch without one (unseeded sampling: exact in distribution either way) is not capped.
        `steps`: the steps a plain choice covers (a chained decode burst's n, counted towards the
        next probe)."""
        p = self.proposer
        if p is None:
            return 0
        run = self.scheduler.running
        exact = self.bitwise_exact and (not run or any(s.params.reproducible for s in run))
        if exact and self.scheduler.will_prefill():
            return 0
        num_seqs = max(num_seqs, 1)
        graphs = self.runner.graphs
        cap = (exact_k_cap(num_seqs, graphs and graphs.bucket(num_seqs), graphs and graphs.query_lens,
                           self.exact_rows) if exact else None)
        if self.adaptive is not None:
            return self.adaptive.choose(num_seqs, cap, steps)
        return p.k if cap is None else min(p.k, cap)

    def _step_draft_length(self) -> int:
        """`draft_length` for this step's running set, asked once per step (the automatic draft
        length counts its choices: plain steps before a probe, the step before a draft)."""
        if self._step_k is None:
            self._step_k = self.draft_length(len(self.scheduler.running))
        return self._step_k

    def _plain_decoding(self) -> bool:
        """No speculation this step: no proposer, or the draft length is 0 for this batch size
        and the drafter needs no target features (so skipping it loses nothing)."""
        p = self.proposer
        return p is None or (not p.needs_target_features and self._step_draft_length() == 0)

    def _outputs(self, advanced: list[Sequence]) -> list[RequestOutput]:
        outputs = []
        for seq in advanced:
            outputs.append(self._make_output(seq))
            if seq.is_finished:
                self.seqs.pop(seq.request_id, None)
                self.detok.pop(seq.request_id, None)
        return outputs

    # ---- per-token bookkeeping, called by accept_step ------------------------------------
    def append_token(self, seq: Sequence, token_id: int, logprobs: dict | None) -> bool:
        """Append one generated token and apply the stop rules. Returns True if seq finished."""
        seq.token_ids.append(token_id)
        if logprobs is not None:
            seq.output_logprobs.append(logprobs)
        self.counters["num_generation_tokens"] += 1
        if seq.metrics.first_token_time is None:
            seq.metrics.first_token_time = time.time()
        p = seq.params
        error = seq.grammar.step(token_id) if seq.grammar is not None else None
        if error is not None:                # vLLM's finish reason "error", and why
            logger.error("request %s: its grammar failed at token %d: %s", seq.request_id, token_id,
                         error.split("<grammar>", 1)[0][:1500])      # llguidance's reason and state
            seq.finish_reason, seq.stop_reason = "error", grammar_failure(p.structured_outputs, error,
                                                                          seq.num_output_tokens)
            self._finish(seq)
            return True
        detok = self.detok[seq.request_id]
        shown = len(detok.text)
        # stop strings end only in text after the min_tokens-th token (vLLM V1's rule: as EOS and stop_token_ids,
        # which the sampler bans until then, the earliest output a stop string can end is min_tokens + 1 tokens)
        stop_str = detok.update(seq.token_ids, seq.num_prompt_tokens, check_stop=seq.num_output_tokens > p.min_tokens)
        if stop_str is not None:
            seq.finish_reason, seq.stop_reason = "stop", stop_str
        elif seq.num_output_tokens >= p.min_tokens and not p.ignore_eos \
                and token_id in self.model_config.eos_token_ids:
            seq.finish_reason, seq.stop_reason = "stop", None
        elif seq.num_output_tokens >= p.min_tokens and token_id in p.stop_token_ids:
            seq.finish_reason, seq.stop_reason = "stop", token_id
        elif seq.grammar is not None and seq.grammar.is_stopped() and token_id not in self.model_config.eos_token_ids:
            seq.finish_reason, seq.stop_reason = "stop", None      # the grammar is complete (this token is output)
        elif len(seq) >= seq.max_total_tokens:
            seq.finish_reason = "length"
        elif seq.grammar is not None and seq.grammar.is_stopped():      # an EOS that ignore_eos kept
            seq.finish_reason, seq.stop_reason = "stop", None
        if seq.finish_reason == "stop" and stop_str is None and not p.include_stop_str_in_output and \
                (seq.grammar is None or token_id in self.model_config.eos_token_ids or token_id in p.stop_token_ids):
            detok.text = detok.text[:shown]           # the stopping token's text (skip_special_tokens=False)
        if seq.finish_reason is not None:
            self._finish(seq)
            return True
        return False

    def _finish(self, seq: Sequence) -> None:
        seq.status = SequenceStatus.FINISHED
        seq.metrics.finished_time = time.time()
        self.scheduler.remove(seq)
        if self.proposer is not None:
            self.proposer.free(seq)

    def _on_preempt(self, seq: Sequence) -> None:
        if self.proposer is not None:
            self.proposer.free(seq)

    def _make_output(self, seq: Sequence) -> RequestOutput:
        detok = self.detok.get(seq.request_id)
        text = detok.visible_text(seq.is_finished) if detok is not None else ""
        comp = CompletionOutput(0, text, seq.output_token_ids,                 # a new list (a slice)
                                list(seq.output_logprobs) if seq.params.logprobs is not None else None,
                                seq.finish_reason, seq.stop_reason)
        return RequestOutput(seq.request_id, seq.prompt, seq.prompt_token_ids,
                             [comp], seq.is_finished, seq.metrics,
                             list(seq.prompt_logprobs) if seq.params.prompt_logprobs is not None else None)

    # ---- introspection ---------------------------------------------------------------------
    def get_stats(self) -> EngineStats:
        bm = self.block_manager
        return EngineStats(len(self.scheduler.running), len(self.scheduler.waiting),
                           bm.num_free_blocks, bm.num_usable_blocks)

    def get_metrics(self) -> dict[str, Any]:
        return {**self.spec_stats.as_dict(), **self.counters,
                "num_preemptions": self.scheduler.num_preemptions}
