"""The report's Notes: what a reader must know before trusting a level's figures (interruptions,
token counts not from usage, hidden tokens, cancellations, a server gone, held-back arrivals, lost or
shared /metrics, a drafter that made no drafts, failed warm-ups)."""
from __future__ import annotations

from turbospec.audit.report_types import Section
from turbospec.audit.runner import GONE_AFTER


def notes_section(res: dict) -> Section | None:
    notes = []
    if res["interrupted"]:
        notes.append("Interrupted (Ctrl-C or SIGTERM): these are the requests measured before the stop.")
    if res["prompts_repeated"]:
        notes.append("--num-prompts exceeds the prompt set: prompts repeat, so prefix caches flatter TTFT.")
    for r in res["runs"]:
        other = {k: v for k, v in r["token_count_source"].items() if k != "usage"}
        if other:
            notes.append(f"{r['endpoint']} · {r['label']}: token counts not from the server's usage for "
                         f"{sum(other.values())} requests ({', '.join(f'{k}: {v}' for k, v in other.items())})."
                         + (" Counted one token per streamed chunk: tok/s, TPOT, ITL and cost are per chunk, and "
                            "wrong for a server that streams several tokens a chunk; pass --tokenizer (the "
                            "model's tokenizer.json or directory) to count tokens." if other.get("chunks") else ""))
        if r["hidden_tokens"]["total"]:
            notes.append(f"{r['endpoint']} · {r['label']}: the server's usage counted {r['hidden_tokens']['total']:,} "
                         f"tokens in {r['hidden_tokens']['requests']} requests that the stream never carried (hidden "
                         "reasoning): every speed, TPOT, ITL, tokens-per-chunk and cost figure counts streamed tokens "
                         "only (hidden_tokens in results.json); the hidden ones are generated inside TTFT.")
        if r["num_cancelled"]:
            notes.append(f"{r['endpoint']} · {r['label']}: {r['num_cancelled']} requests cancelled unfinished "
                         "(--max-duration or Ctrl-C); not counted as failures.")
        if r.get("num_not_sent"):
            how = _GONE.get(r.get("not_sent_reason") or "connection refused", _GONE["connection refused"])
            notes.append(f"{r['endpoint']} · {r['label']}: {how.format(GONE_AFTER)}, so the level stopped sending to "
                         f"it: {r['num_not_sent']} requests not sent (not counted as failures).")
        if r.get("num_ended_at_once"):
            notes.append(f"{r['endpoint']} · {r['label']}: {r['num_ended_at_once']} of {r['num_ok']} successful "
                         "requests ended at once (finish_reason stop before any text: the model's first token was its "
                         "end-of-sequence token). They count as successes and in throughput, and in no latency "
                         "figure (TTFT, TPOT, ITL, e2e); pass --ignore-eos (vLLM, SGLang, turbospec) to measure "
                         "full-length answers.")
        if r.get("delayed_arrivals"):
            notes.append(f"{r['endpoint']} · {r['label']}: {r['delayed_arrivals']} arrivals waited for a free slot "
                         f"(--max-inflight {res['settings'].get('max_inflight', '')} requests already in flight), so "
                         f"this rate was not offered as scheduled; it kept {r['effective_concurrency']:,.1f} requests in "
                         "flight on average. Raise --max-inflight to offer it.")
        if r["speculation"].get("metrics_lost"):
            notes.append(f"{r['endpoint']} · {r['label']}: /metrics stopped answering with speculation counters "
                         "during this level (read at its start, not at its end): the acceptance figures for this "
                         f"level are estimates (source: {r['speculation']['source']}), not measured from the "
                         "counters. Check that the server's /metrics stays up, then audit again.")
        if r["speculation"].get("no_drafts"):
            notes.append(f"{r['endpoint']} · {r['label']}: the endpoint speculates (its /metrics exports the "
                         "spec_decode counters) but its drafter made no drafts in this level: 1.0 token per decode "
                         "step, no gain over plain decoding on these prompts (an n-gram drafter that found no match, "
                         "or an automatic draft length of 0).")
        if r["speculation"].get("other_traffic"):
            notes.append(f"{r['endpoint']} · {r['label']}: the server finished "
                         f"{r['speculation']['server_finished_requests']:.0f} requests during this level, more than "
                         "the audit sent: other traffic shares its /metrics counters, so the acceptance figures "
                         "include it (turbospec's per-request figures do not).")
        if r.get("warmup_failures"):
            notes.append(f"{r['endpoint']} · {r['label']}: {r['warmup_failures']} warm-up requests failed (not "
                         "counted); the first measured requests may have paid for a cold server.")
    return Section("Notes", [("list", notes)]) if notes else None


_GONE = {"connection refused": "the server refused connections {} times in a row (gone?)",
         "no http response": "nothing answered HTTP {} times in a row (gone, or not the server's port?)",
         "timeout": "{} requests in a row timed out (--timeout; hung, or too slow for it?)"}
