"""`bench spec`'s self-checks: the lines it prints when a result cannot be right — greedy speculative
output that left plain decoding's where the engine keeps them bit-identical (a bug), or timings that
contradict each other (a disturbed machine)."""
from __future__ import annotations

import typer

# a verify (k >= 1 drafts) reads every weight a decode step (k = 0) reads: below this ratio the timings are off
MIN_VERIFY_RATIO = 0.9


def lossless_warning(same: int, total: int, exact: bool, where: str) -> str | None:
    """The line to print when greedy speculative output left plain decoding's although the engine
    keeps them bit-identical (`exact`: bitwise_exact on a GPU with the row-invariant kernels, chain
    drafts): a losslessness bug, not noise."""
    if same >= total or not exact:
        return None
    return (f"WARNING ({where}): {total - same} of {total} greedy outputs differ from plain decoding although "
            "bitwise_exact holds: speculation must not change a token here. This is a bug; please report it "
            "with this output (bench/exact_diag.py finds the first differing token)")


def _check_lossless(same: int, total: int, exact: bool, where: str) -> None:
    line = lossless_warning(same, total, exact, where)
    if line:
        typer.echo(line, err=True)


def timing_warning(speedup: float, acceptance_length: float | None, where: str,
                   plain_ms: float | None = None, decode_ms: float | None = None) -> str | None:
    """The line to print when the timings cannot both be right: a speedup above the acceptance
    length (a verify reads every weight a decode step reads, so it costs at least one step), or
    the plain run's time per step off by more than 1.5x from the verify-cost table's k = 0 step
    measured in the same run. Both point at a disturbed measurement (a busy CPU, another job on
    the GPU), which one timed run cannot tell from a real result."""
    why = []
    if acceptance_length and speedup > 1.1 * acceptance_length:
        why.append(f"speedup {speedup:.2f}x above the acceptance length {acceptance_length:.2f}, which "
                   "no verify can give (it costs at least one decode step)")
    if plain_ms and decode_ms and not 1 / 1.5 <= plain_ms / decode_ms <= 1.5:
        why.append(f"plain decoding took {plain_ms:.3f} ms per step but the verify-cost table's k=0 step "
                   f"{decode_ms:.3f} ms")
    if not why:
        return None
    return (f"WARNING ({where}): the timings disagree: {'; '.join(why)}. The machine was probably busy "
            "during one of the runs; rerun on an idle machine before reading these numbers")


def _warn_timing(line: str | None) -> None:
    if line:
        typer.echo(line, err=True)


def verify_cost_warning(costs: dict[int, float], where: str) -> str | None:
    """The line to print when the verify-cost table has a verify cheaper than its decode step (a
    busy CPU once gave k=1 at 0.28x k=0): the table was timed on a disturbed machine."""
    base = costs.get(0)
    low = [(kk, ms) for kk, ms in sorted(costs.items()) if kk >= 1 and base and ms / base < MIN_VERIFY_RATIO]
    if not low:
        return None
    return (f"WARNING ({where}): the timings disagree: the verify-cost table's "
            + ", ".join(f"k={kk} {ms:.3f} ms ({ms / base:.2f})" for kk, ms in low)
            + f" below its k=0 decode step {base:.3f} ms, although a verify reads every weight a decode step "
            "reads. The machine was probably busy; rerun on an idle machine before reading these numbers")
