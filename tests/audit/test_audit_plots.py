"""The audit's concurrency axis: ticks at the measured levels (whole numbers), log2 when they span
8x or more, untouched for request-rate runs (fractional concurrency)."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from turbospec.audit.plots import _concurrency_axis  # noqa: E402


def _axis(xs):
    fig, ax = plt.subplots()
    ax.plot(xs, [1] * len(xs))
    _concurrency_axis(ax, xs)
    out = ax.get_xscale(), [float(t) for t in ax.get_xticks()]
    plt.close(fig)
    return out


def test_concurrency_levels_are_the_ticks():
    assert _axis([1, 4, 16, 64]) == ("log", [1.0, 4.0, 16.0, 64.0])
    assert _axis([1, 4]) == ("linear", [1.0, 4.0])
    scale, ticks = _axis([0.7, 2.3])                   # request-rate runs: matplotlib's own ticks
    assert scale == "linear" and ticks != [0.7, 2.3]
