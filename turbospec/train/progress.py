"""Training progress: a tqdm bar on a terminal, plain lines otherwise (logs, CI), rank 0 only.

Without a terminal a line is printed every `--log-every` steps, and also after the first step and
whenever `LOG_SECONDS` passed since the last line: on a CPU a step can take many seconds, and a log
silent for minutes after "setup ..." looked like a hang. Held-out results are printed in both
modes (above the bar on a terminal). Under torchrun a line's statistics and tok/s are those of all
processes (the loop sums them), and the line says how many.
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

    def step(self, n: int, postfix: dict | None) -> None:
        """Advance the bar; `postfix` None keeps the last one (it is rebuilt on line steps only)."""
        if self.bar is not None:
            self.bar.update(n)
            if postfix is not None:
                self.bar.set_postfix(postfix, refresh=False)

    def line(self, line: str) -> None:
        """A progress line: printed without a terminal (a bar shows it as its postfix)."""
        if self.bar is None:
            self.print(line)

    def note(self, msg: str) -> None:
        """A result printed in both modes (above the bar on a terminal): held-out evaluations."""
        self.print(msg)

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


def line_due(has_bar: bool, step: int, first_step: int, total_steps: int | None, log_every: int,
             seconds_since_line: float) -> bool:
    """Whether step `step` prints a progress line (see the module). Under torchrun every rank must
    decide alike: pass has_bar=False there and the shared clock's seconds."""
    return (step % log_every == 0 or step == total_steps or step == first_step + 1
            or (not has_bar and seconds_since_line >= LOG_SECONDS))


def train_line(m: dict, heldout: dict, rate: float, head: str, lr: float, elapsed: float, world: int
               ) -> tuple[dict, str]:
    """(the bar's postfix, the log line) for training statistics `m` (summarize) over the steps since
    the last line; `rate`: their tokens per second of training (evaluations and saves excluded)."""
    held = f"{heldout['accept_len']:.2f}" if "accept_len" in heldout else "-"      # none yet
    postfix = {"loss": f"{m['loss']:.3f}", "acc0": f"{m['acc'][0]:.2f}",
               ("AL" if m["accept_len"] == m["accept_len"] else "AL/start"): al_text(m).split()[-1],
               "heldout_AL": held, "tok/s": f"{rate:.0f}"}
    who = f" (all {world} processes)" if world > 1 else ""
    line = (f"{head} | train{who} {fmt(m)} | heldout AL {held} | lr {lr:.2e} | {rate:.0f} tok/s{who} | "
            f"{elapsed:.0f} s")
    return postfix, line
