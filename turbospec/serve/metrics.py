"""Prometheus metrics under vLLM's names, so Grafana dashboards and `vllm bench serve` built for
vLLM read turbospec unchanged.

Names: prometheus-client exposes a Counter named `X` as `X_total` (plus `X_created`), exactly as
vLLM's own counters appear on its /metrics (vLLM declares `vllm:spec_decode_num_drafts` and
dashboards query `vllm:spec_decode_num_drafts_total`). So counters are declared here under vLLM's
declared names and the exposed names match vLLM's byte for byte. Every series carries vLLM's
`model_name` label.

Speculation counters (`vllm:spec_decode_*`) exist only when the engine has a drafter, as in vLLM
(`SpecDecodingProm` registers none without a speculative config): a scrape that shows them says the
server speculates, even when its drafter made no drafts in the window (an n-gram drafter that found
no match, an automatic draft length of 0). The per-position series show at 0 from the start for the
drafter's k positions, as vLLM's do.

Thread use: the engine thread calls the `on_*` / `observe_*` methods; the event loop renders.
prometheus-client metrics are thread-safe.
"""
from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

# vLLM's buckets (seconds / tokens), so that histogram_quantile over them compares like for like
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
               10.0, 20.0, 40.0, 80.0)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
               120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
TOKEN_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000)

CONTENT_TYPE = CONTENT_TYPE_LATEST

# engine.get_metrics() key -> our counter attribute (cumulative there, diffed into counters here)
_ENGINE_COUNTERS = {
    "num_preemptions": "preemptions",
    "num_burst_tokens": "burst_tokens",
}
_SPEC_COUNTERS = {                              # only with a drafter (declare_speculation)
    "spec_decode_num_drafts": "spec_drafts",
    "spec_decode_num_draft_tokens": "spec_draft_tokens",
    "spec_decode_num_accepted_tokens": "spec_accepted",
}
_PER_POS = "spec_decode_num_accepted_tokens_per_pos"


class ServerMetrics:
    def __init__(self, model_name: str, registry: CollectorRegistry | None = None, num_speculative_tokens: int = 0):
        """num_speculative_tokens: the drafter's k; 0 (no drafter) exports no speculation counters."""
        self.registry = registry or CollectorRegistry()
        self.model_name = model_name
        r, labels = self.registry, ["model_name"]

        def gauge(name, doc):
            return Gauge(name, doc, labels, registry=r).labels(model_name)

        def counter(name, doc):
            return Counter(name, doc, labels, registry=r).labels(model_name)

        def hist(name, doc, buckets):
            return Histogram(name, doc, labels, buckets=buckets, registry=r).labels(model_name)

        self.num_running = gauge("vllm:num_requests_running", "Number of requests in model execution batches.")
        self.num_waiting = gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.")
        self.kv_usage = gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.")
        self.prompt_tokens = counter("vllm:prompt_tokens", "Number of prefill tokens processed.")
        self.generation_tokens = counter("vllm:generation_tokens", "Number of generation tokens processed.")
        self.preemptions = counter("vllm:num_preemptions", "Cumulative number of preemptions.")
        # turbospec's own (no vLLM name): how much of the decoding ran in decode bursts; against
        # vllm:generation_tokens_total it shows what single steps cost (penalties, logit bias, min_tokens,
        # more than 8 rows with logprobs)
        self.burst_tokens = counter("turbospec:decode_burst_tokens",
                                    "Generated tokens decoded inside decode bursts (the rest took single steps).")
        self._success = Counter("vllm:request_success", "Count of successfully processed requests.",
                                ["model_name", "finished_reason"], registry=r)
        self._spec_per_pos: Counter | None = None            # set by declare_speculation
        self.ttft = hist("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                         TTFT_BUCKETS)
        self.itl = hist("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                        ITL_BUCKETS)
        self.tpot = hist("vllm:time_per_output_token_seconds",
                         "Histogram of time per output token in seconds (alias of inter_token_latency).",
                         ITL_BUCKETS)
        self.e2e = hist("vllm:e2e_request_latency_seconds", "Histogram of end-to-end request latency in seconds.",
                        E2E_BUCKETS)
        self.req_prompt = hist("vllm:request_prompt_tokens", "Number of prefill tokens processed.", TOKEN_BUCKETS)
        self.req_generation = hist("vllm:request_generation_tokens", "Number of generation tokens processed.",
                                   TOKEN_BUCKETS)
        self._last_engine: dict[str, Any] = {}
        for reason in ("stop", "length", "abort", "error"):      # vLLM's reasons, at zero from the start
            self._success.labels(model_name, reason)
        self.declare_speculation(num_speculative_tokens)

    @property
    def speculative(self) -> bool:
        """Whether the speculation counters are exported (the engine has a drafter)."""
        return self._spec_per_pos is not None

    def declare_speculation(self, k: int) -> None:
        """Export the speculation counters, with per-position series (at 0) for a drafter proposing k
        tokens; k <= 0 (no drafter) exports none. Called again (the engine's start), it adds positions."""
        k = int(k or 0)
        if k <= 0:
            return
        if self._spec_per_pos is None:
            r, name = self.registry, self.model_name
            self.spec_drafts = Counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.",
                                       ["model_name"], registry=r).labels(name)
            self.spec_draft_tokens = Counter("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.",
                                             ["model_name"], registry=r).labels(name)
            self.spec_accepted = Counter("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.",
                                         ["model_name"], registry=r).labels(name)
            self._spec_per_pos = Counter("vllm:spec_decode_num_accepted_tokens_per_pos",
                                         "Accepted tokens per draft position.", ["model_name", "position"],
                                         registry=r)
        for pos in range(k):
            self._spec_per_pos.labels(self.model_name, str(pos))

    # ---- called from the engine thread -------------------------------------------------------
    def set_engine_stats(self, stats) -> None:
        self.num_running.set(stats.num_running)
        self.num_waiting.set(stats.num_waiting)
        self.kv_usage.set(max(0.0, float(stats.kv_cache_usage)))

    def set_engine_baseline(self, now: dict[str, Any]) -> None:
        """Counts already in the engine (warm-up) are not served traffic: start diffing from here."""
        self._last_engine = dict(now)

    def on_engine_metrics(self, now: dict[str, Any]) -> None:
        """Fold the engine's cumulative counters in as increments since the previous call."""
        last = self._last_engine
        counters = {**_ENGINE_COUNTERS, **(_SPEC_COUNTERS if self.speculative else {})}
        for key, attr in counters.items():
            delta = float(now.get(key, 0) or 0) - float(last.get(key, 0) or 0)
            if delta > 0:
                getattr(self, attr).inc(delta)
        per_pos = list(now.get(_PER_POS) or [])
        old = list(last.get(_PER_POS) or [])
        for pos, value in enumerate(per_pos if self.speculative else ()):
            delta = float(value) - float(old[pos] if pos < len(old) else 0)
            if delta > 0:
                self._spec_per_pos.labels(self.model_name, str(pos)).inc(delta)
        self._last_engine = {**now, _PER_POS: per_pos}

    def on_new_tokens(self, n: int) -> None:
        if n > 0:
            self.generation_tokens.inc(n)

    def on_first_token(self, ttft_s: float, num_prompt_tokens: int) -> None:
        self.ttft.observe(max(ttft_s, 0.0))
        self.prompt_tokens.inc(num_prompt_tokens)

    def on_inter_token(self, seconds: float) -> None:
        self.itl.observe(max(seconds, 0.0))
        self.tpot.observe(max(seconds, 0.0))

    def on_finished(self, reason: str | None, e2e_s: float | None, num_prompt_tokens: int,
                    num_output_tokens: int) -> None:
        self._success.labels(self.model_name, reason or "abort").inc()
        if reason in ("abort", "error") or e2e_s is None:       # latencies of the requests that completed
            return
        self.e2e.observe(max(e2e_s, 0.0))
        self.req_prompt.observe(num_prompt_tokens)
        self.req_generation.observe(num_output_tokens)

    # ---- called from the event loop ----------------------------------------------------------
    def render(self) -> bytes:
        return generate_latest(self.registry)


# The exact names a scrape shows (counters get `_total`), for docs and tests.
EXPOSED_COUNTERS = (
    "vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:num_preemptions_total",
    "vllm:request_success_total", "turbospec:decode_burst_tokens_total",
)
EXPOSED_SPEC_COUNTERS = (                       # only when the engine has a drafter
    "vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_draft_tokens_total",
    "vllm:spec_decode_num_accepted_tokens_total", "vllm:spec_decode_num_accepted_tokens_per_pos_total",
)
EXPOSED_GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc")
EXPOSED_HISTOGRAMS = (
    "vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
    "vllm:time_per_output_token_seconds", "vllm:e2e_request_latency_seconds",
    "vllm:request_prompt_tokens", "vllm:request_generation_tokens",
)
