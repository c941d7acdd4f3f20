"""Metric definitions and their summaries over a run. The definitions are printed in every report.

Distributions are {p50, p90, p99, mean, count} in the unit of their name (values null when
nothing was measured). Percentiles of per-request and
per-chunk values use linear interpolation (numpy's default); ITL is a per-token distribution
(each chunk gap weighted by the tokens it carried) and uses the weighted lower percentile.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from turbospec.audit.client import RequestRecord

DEFINITIONS: dict[str, str] = {
    "ttft_ms": "time to first token: from sending the request to the first streamed chunk that carries "
               "generated text (reasoning text included)",
    "tpot_ms": "time per output token after the first chunk, per request: (last token chunk - first text chunk) / "
               "tokens after the first chunk (exact with per-chunk usage, else output tokens - 1). Token chunks are "
               "the text chunks and, when the model stopped itself, the text-less last chunk of its end-of-sequence "
               "token, which usage counts",
    "itl_ms": "inter-token latency, per token: each gap between token chunks divided over the tokens that "
              "chunk carried (exact counts when the server streams usage on every chunk: --continuous-usage; "
              "else spread evenly)",
    "inter_chunk_ms": "inter-chunk latency, per chunk: the gap between consecutive token chunks",
    "e2e_ms": "end-to-end latency: from sending the request to the end of its stream",
    "ended_at_once": "successful requests whose answer ended at once (finish_reason stop before any text: the "
                     "model's first token was its end-of-sequence token): counted as successes and in throughput, "
                     "kept out of every latency distribution (TTFT, TPOT, ITL, inter-chunk, e2e)",
    "output_tokens_per_s": "per-request output speed after the first chunk: 1 / TPOT",
    "aggregate_output_tokens_per_s": "output tokens of all successful requests / wall time of the run "
                                     "(first send to last end); per GPU = that / number of GPUs",
    "tokens_per_chunk": "tokens after the first chunk / (token chunks - 1), exact with per-chunk usage; the report "
                        "and the acceptance estimate use `overall` (summed over the run's requests), `mean` etc. "
                        "are per request. With speculation and one chunk per engine step this is tokens per decode "
                        "step. Not given for requests whose tokens were counted one per chunk (no usage, no "
                        "tokenizer)",
    "goodput": "successful requests that meet every SLO (TTFT, TPOT, e2e where set), per second of the run; "
               "also their output tokens per second and their share of all requests",
    "output_tokens": "streamed tokens: the server's `usage` less any reasoning tokens it counted but never "
                     "streamed (hidden_tokens); else a local tokenizer; else one per chunk (see token_count_source)",
    "hidden_tokens": "tokens the server's usage counts but the stream never carried (hosted reasoning models' "
                     "hidden reasoning, `completion_tokens_details.reasoning_tokens`, or usage above one token "
                     "per streamed byte): generated before the first visible token, so they are in TTFT and "
                     "in no speed, TPOT, ITL or tokens-per-chunk figure",
    "server_reported_speculation": "turbospec servers send each request's drafts and accepted tokens "
                                   "(`speculative_decoding`); summed over the successful requests, also per domain",
}


@dataclass(frozen=True)
class SLO:
    ttft_ms: float | None = 2000.0
    tpot_ms: float | None = 100.0
    e2e_ms: float | None = None

    def met_by(self, r: RequestRecord) -> bool:
        if not r.ok:
            return False
        if not r.chunk_times_s:                   # ended at once: its whole answer is its first token
            return all(slo is None or e2e_s(r) * 1e3 <= slo for slo in (self.ttft_ms, self.e2e_ms))
        if self.ttft_ms is not None and ttft_s(r) * 1e3 > self.ttft_ms:
            return False
        tpot = tpot_s(r)
        if self.tpot_ms is not None and tpot is not None and tpot * 1e3 > self.tpot_ms:
            return False
        return self.e2e_ms is None or e2e_s(r) * 1e3 <= self.e2e_ms


# ---- per-request quantities (seconds) -------------------------------------------------------

def ttft_s(r: RequestRecord) -> float:
    return r.chunk_times_s[0]


def e2e_s(r: RequestRecord) -> float:
    return r.end_s - r.start_s


def token_chunks_s(r: RequestRecord) -> list[float]:
    """When each chunk that carried tokens arrived: the text chunks, then the end-of-sequence token's
    text-less chunk when the model stopped itself (client.py: eos_s)."""
    return r.chunk_times_s + [r.eos_s] if r.eos_s is not None else r.chunk_times_s


def decode_tokens(r: RequestRecord) -> int:
    """Tokens streamed after the first text chunk: exact with per-chunk usage, else all but one (the
    first chunk is taken to carry one token)."""
    if r.chunk_tokens is not None:
        return sum(r.chunk_tokens[1:])
    return r.output_tokens - 1


def tpot_s(r: RequestRecord) -> float | None:
    """From the first text chunk to the last one, per token streamed after the first chunk (the usage
    chunk and [DONE] that may follow the last token are not decode time)."""
    n, times = decode_tokens(r), token_chunks_s(r)
    if len(times) < 2 or n < 1:
        return None
    return (times[-1] - times[0]) / n


def decode_tokens_per_s(r: RequestRecord) -> float | None:
    t = tpot_s(r)
    return 1.0 / t if t else None


def tokens_per_chunk(r: RequestRecord) -> float | None:
    """decode tokens / (text chunks - 1); the run's `overall` (the table's figure and the acceptance
    estimate) is the same ratio summed over requests."""
    chunks = len(token_chunks_s(r))
    if chunks < 2 or r.token_source == "chunks":      # counted one token a chunk: 1.0 by construction
        return None
    return decode_tokens(r) / (chunks - 1)


def chunk_gaps_s(r: RequestRecord) -> list[float]:
    times = token_chunks_s(r)
    return list(np.diff(times)) if len(times) > 1 else []


def itl_values_s(r: RequestRecord) -> tuple[list[float], list[float]]:
    """(per-token latency of each chunk after the first, tokens it carried) — value and weight."""
    gaps = chunk_gaps_s(r)
    if not gaps:
        return [], []
    if r.chunk_tokens is not None:
        weights = [float(t) for t in r.chunk_tokens[1:]]
    else:
        weights = [(r.output_tokens - 1) / len(gaps)] * len(gaps)
    pairs = [(g / w, w) for g, w in zip(gaps, weights) if w > 0]
    return [p[0] for p in pairs], [p[1] for p in pairs]


# ---- distributions --------------------------------------------------------------------------

EMPTY = {"p50": None, "p90": None, "p99": None, "mean": None, "count": 0}


def dist(values: list[float], scale: float = 1.0) -> dict:
    if not values:
        return dict(EMPTY)
    a = np.asarray(values, dtype=np.float64) * scale
    p50, p90, p99 = np.percentile(a, [50, 90, 99])
    return {"p50": float(p50), "p90": float(p90), "p99": float(p99), "mean": float(a.mean()), "count": int(a.size)}


def weighted_dist(values: list[float], weights: list[float], scale: float = 1.0) -> dict:
    if not values:
        return dict(EMPTY)
    v = np.asarray(values, dtype=np.float64) * scale
    w = np.asarray(weights, dtype=np.float64)
    order = np.argsort(v)
    v, w = v[order], w[order]
    cum = np.cumsum(w) / w.sum()

    def q(p: float) -> float:
        return float(v[min(int(np.searchsorted(cum, p - 1e-12)), v.size - 1)])

    return {"p50": q(0.5), "p90": q(0.9), "p99": q(0.99), "mean": float((v * w).sum() / w.sum()),
            "count": float(w.sum())}


# ---- a run --------------------------------------------------------------------------------

def summarize(records: list[RequestRecord], slo: SLO) -> dict:
    """The per-run metrics of results.json (see schema.md) from the measured requests."""
    ok = [r for r in records if r.ok]
    timed = [r for r in ok if r.chunk_times_s]           # not the answers that ended at once: no latency
    failed = [r for r in records if not r.ok]
    ends = [r.end_s for r in records if r.end_s is not None]
    window = (max(ends) - min(r.start_s for r in records)) if ends else 0.0
    itl_v, itl_w = [], []
    for r in timed:
        v, w = itl_values_s(r)
        itl_v += v
        itl_w += w
    out_tokens = sum(r.output_tokens for r in ok)
    good = [r for r in ok if slo.met_by(r)]
    tpc = [t for t in (tokens_per_chunk(r) for r in ok) if t is not None]
    counted = [r for r in ok if len(token_chunks_s(r)) > 1 and r.token_source != "chunks"]
    n_decode = sum(decode_tokens(r) for r in counted)
    decode_chunks = sum(len(token_chunks_s(r)) - 1 for r in counted)
    return {
        "duration_s": window,
        "num_ok": len(ok),
        "num_failed": len(failed),
        "num_ended_at_once": len(ok) - len(timed),
        "failures": dict(Counter(r.error for r in failed)),
        "failure_examples": _failure_examples(failed),
        "ttft_ms": dist([ttft_s(r) for r in timed], 1e3),
        "tpot_ms": dist([t for t in (tpot_s(r) for r in timed) if t is not None], 1e3),
        "itl_ms": weighted_dist(itl_v, itl_w, 1e3),
        "inter_chunk_ms": dist([g for r in timed for g in chunk_gaps_s(r)], 1e3),
        "e2e_ms": dist([e2e_s(r) for r in timed], 1e3),
        "output_tokens_per_s": dist([s for s in (decode_tokens_per_s(r) for r in timed) if s is not None]),
        "aggregate_output_tokens_per_s": out_tokens / window if window > 0 else 0.0,
        "request_throughput_per_s": len(ok) / window if window > 0 else 0.0,
        "tokens_per_chunk": {**dist(tpc), "overall": n_decode / decode_chunks if decode_chunks else None},
        "goodput": {"slo": {"ttft_ms": slo.ttft_ms, "tpot_ms": slo.tpot_ms, "e2e_ms": slo.e2e_ms},
                    "requests_per_s": len(good) / window if window > 0 else 0.0,
                    "output_tokens_per_s": sum(r.output_tokens for r in good) / window if window > 0 else 0.0,
                    "fraction": len(good) / len(records) if records else 0.0},
        "output_tokens": {"total": out_tokens, "mean": out_tokens / len(ok) if ok else 0.0},
        "hidden_tokens": {"total": sum(r.hidden_tokens for r in ok), "requests": sum(1 for r in ok if r.hidden_tokens)},
        "input_tokens": _input_tokens(ok),
        "token_count_source": dict(Counter(r.token_source for r in ok)),
        "server_reported_speculation": server_speculation(ok),
    }


def summarize_by_domain(records: list[RequestRecord], slo: SLO) -> dict[str, dict]:
    """A compact per-domain view: speculation pays differently on code and on prose."""
    out = {}
    for domain in sorted({r.domain for r in records}):
        s = summarize([r for r in records if r.domain == domain], slo)
        out[domain] = {k: s[k] for k in ("num_ok", "num_failed", "num_ended_at_once", "ttft_ms", "tpot_ms", "output_tokens_per_s",
                                         "tokens_per_chunk", "output_tokens", "server_reported_speculation")}
    return out


def server_speculation(ok: list[RequestRecord]) -> dict | None:
    """The server's per-request speculation figures summed (None when the server sends none)."""
    figs = [r.server_speculation for r in ok if r.server_speculation]
    if not figs:
        return None
    tot = {k: sum(int(f.get(k) or 0) for f in figs) for k in ("num_drafts", "num_draft_tokens", "num_accepted_tokens")}
    return {"num_requests": len(figs), **tot,
            "acceptance_length": 1 + tot["num_accepted_tokens"] / tot["num_drafts"] if tot["num_drafts"] else None,
            "acceptance_rate": tot["num_accepted_tokens"] / tot["num_draft_tokens"] if tot["num_draft_tokens"] else None}


def request_rows(records: list[RequestRecord]) -> list[dict]:
    """Per-request raw values (milliseconds), for plots and for anyone re-analysing the run."""
    rows = []
    t0 = min((r.start_s for r in records), default=0.0)
    for r in records:
        times = token_chunks_s(r)
        row = {"prompt_id": r.prompt_id, "domain": r.domain, "ok": r.ok, "error": r.error,
               "output_tokens": r.output_tokens, "hidden_tokens": r.hidden_tokens, "input_tokens": r.input_tokens,
               "chunks": len(times), "token_source": r.token_source, "finish_reason": r.finish_reason,
               "ended_at_once": r.ended_at_once, "speculative_decoding": r.server_speculation,
               # when it was sent, ms after the level's first send: with e2e_ms, enough to re-derive the run's
               # window (duration_s), hence throughput, request rate, goodput and effective concurrency
               "sent_ms": round((r.start_s - t0) * 1e3, 3),
               # when each token chunk arrived (ms after sending, 0.1 ms; the last is the text-less chunk of the
               # end-of-sequence token when eos_chunk) and, with per-chunk usage, its tokens: enough to
               # re-derive TPOT, ITL and inter-chunk latency from results.json
               "chunk_ms": [round(t * 1e3, 1) for t in times], "eos_chunk": r.eos_s is not None,
               "chunk_tokens": r.chunk_tokens,
               "ttft_ms": ttft_s(r) * 1e3 if r.chunk_times_s else None,
               "e2e_ms": e2e_s(r) * 1e3 if r.end_s is not None else None}
        rows.append(row)
    return rows


def _input_tokens(ok: list[RequestRecord]) -> dict:
    known = [r.input_tokens for r in ok if r.input_tokens is not None]
    return {"mean": float(np.mean(known)) if known else None, "known_for": len(known)}


def _failure_examples(failed: list[RequestRecord], per_reason: int = 3) -> list[dict]:
    seen: Counter = Counter()
    examples = []
    for r in failed:
        if seen[r.error] < per_reason:
            seen[r.error] += 1
            examples.append({"reason": r.error, "detail": r.error_detail, "prompt_id": r.prompt_id})
    return examples
