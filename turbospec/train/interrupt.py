"""Ctrl-C / SIGTERM during training: finish the step, save the training state, export, exit.

The first SIGINT or SIGTERM (Ctrl-C, `timeout`, a scheduler's preemption, torchrun stopping its
workers) only sets a flag; the loop checks it between steps (all ranks together) and leaves the
way a time budget does, so the work is kept and `--resume` continues it. A second signal stops at
once (KeyboardInterrupt): saves are atomic (temporary file + rename), so that loses at most the
steps since the last save, never a checkpoint.

`stopped_message` says what such a stop left behind: only a state that exists and that this run
saved (or, for --resume, the one it resumed from, still in place) is offered for --resume.
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
        print(f"\n{self.requested} received: stopping after this step (or this evaluation), then saving the "
              "training state and exporting (send it again to stop at once)", flush=True)

    def __enter__(self) -> "StopRequest":
        if threading.current_thread() is threading.main_thread():   # handlers only install there
            for s in _SIGNALS:
                self._previous[s] = signal.signal(s, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for s, h in self._previous.items():
            signal.signal(s, h)
        self._previous.clear()


def stopped_message(cfg, progress: dict) -> str:
    """The line for a run stopped at once (a second signal, or Ctrl-C before the handlers were in
    place). cfg: the TrainConfig (None when it was not built yet); progress: what train() recorded
    ("saved_step": the last state this run saved, "resumed_step": the step it resumed from,
    "exported_step": the finished run's final export is written, --eval-prompts was running)."""
    if cfg is None:
        return "interrupted before the run started: nothing was written"
    if "exported_step" in progress:     # the run was complete: only --eval-prompts was left
        return (f"interrupted during --eval-prompts: training finished ({progress['exported_step']} steps) and the "
                f"drafter is exported to {cfg.out}; only its true-acceptance measurement was skipped (`turbospec "
                "bench spec` with the drafter measures it; nothing to --resume)")
    if "saved_step" in progress:
        again = "the same command" if cfg.resume else "the same command plus --resume"
        return (f"interrupted: the training state this run saved at step {progress['saved_step']} is in "
                f"{cfg.state_dir}; {again} continues from it")
    if cfg.resume:                      # validated: the state it resumes from exists and was not replaced
        at = f" (step {progress['resumed_step']})" if "resumed_step" in progress else ""
        return (f"interrupted: this run saved no training state; the one it resumed from{at} is still in "
                f"{cfg.state_dir}: the same command continues from it")
    return ("interrupted: no training state was saved by this run (nothing to --resume); run the same command "
            "again to start over")
