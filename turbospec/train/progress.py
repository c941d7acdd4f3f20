"""Training progress: a tqdm bar on a terminal, plain lines otherwise (logs, CI), rank 0 only.

Without a terminal a line is printed every `--log-every` steps, and also after the first step and
whenever `LOG_SECONDS` passed since the last line: on a CPU a step can take many seconds, and a log
silent for minutes after "setup ..." looked like a hang.
"""
from __future__ import annotations

import sys

LOG_SECONDS = 60.0          # without a terminal: a line at least this often (seconds)


class Log:

    def __init__(self, rank: int, total: int | None, prefix: str):
        self.on = rank == 0
        self.tty = sys.stderr.isatty()
        self.bar = None
        if self.on and self.tty:
            try:
                from tqdm import tqdm
                self.bar = tqdm(total=total, desc=prefix, dynamic_ncols=True)
            except ImportError:
                pass

    def print(self, msg: str) -> None:
        if self.on:
            (self.bar.write if self.bar else print)(msg, **({} if self.bar else {"flush": True}))

    def step(self, n: int, postfix: dict, line: str | None) -> None:
        if self.bar is not None:
            self.bar.update(n)
            self.bar.set_postfix(postfix, refresh=False)
        elif line is not None:
            self.print(line)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def fmt(m: dict) -> str:
    if not m:
        return "-"
    acc = " ".join(f"{a:.2f}" for a in m["acc"])
    return f"loss {m['loss']:.3f} | acc/draft {acc} | {al_text(m)}"


def al_text(m: dict) -> str:
    """The acceptance length decoding would measure; DFlash's training steps score random anchors
    only, so they show the mean over those starts (higher: metrics.py says why)."""
    if m["accept_len"] == m["accept_len"]:
        return f"accept_len {m['accept_len']:.2f}"
    return f"accept_len per start {m['accept_len_per_start']:.2f}"


def line_due(log: Log, step: int, first_step: int, total_steps: int | None, log_every: int,
             seconds_since_line: float) -> bool:
    """Whether step `step` prints a progress line (see the module)."""
    return (step % log_every == 0 or step == total_steps or step == first_step + 1
            or (log.bar is None and seconds_since_line >= LOG_SECONDS))
