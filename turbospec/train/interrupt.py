"""Ctrl-C / SIGTERM during training: finish the step, save the training state, export, exit.

The first SIGINT or SIGTERM (Ctrl-C, `timeout`, a scheduler's preemption, torchrun stopping its
workers) only sets a flag; the loop checks it between steps (all ranks together) and leaves the
way a time budget does, so the work is kept and `--resume` continues it. A second signal stops at
once (KeyboardInterrupt): saves are atomic (temporary file + rename), so that loses at most the
steps since the last save, never a checkpoint.
"""
from __future__ import annotations

import signal
import threading

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopRequest:
    """Context manager; `.requested` names the signal once one arrived (None before)."""

    def __init__(self) -> None:
        self.requested: str | None = None
        self._previous: dict = {}

    def _handle(self, signum, frame) -> None:
        if self.requested is not None:                     # second signal: stop now
            raise KeyboardInterrupt
        self.requested = signal.Signals(signum).name
        print(f"\n{self.requested} received: stopping after this step, then saving the training state and "
              "exporting (send it again to stop at once)", flush=True)

    def __enter__(self) -> "StopRequest":
        if threading.current_thread() is threading.main_thread():   # handlers only install there
            for s in _SIGNALS:
                self._previous[s] = signal.signal(s, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for s, h in self._previous.items():
            signal.signal(s, h)
        self._previous.clear()
