"""One audit at a time per --out: an OS lock (flock) on <out>/.turbospec-audit.lock, which holds the
holder's pid, host and start time.

Two audits into one --out would each write results.json after every level and the reports at the
end, over the other's. The kernel drops a flock when its process ends, however it ends, so a killed
audit never blocks the next one, which says that it took over (the file still holds the dead
holder's pid: a normal release removes it). The file is removed while still locked, so an audit
that opened it just before locks a file no longer at that path: it sees that and locks the new one.
"""
from __future__ import annotations

import json
import os
import socket
import time

try:
    import fcntl
except ImportError:                    # no flock (Windows): audits are not kept apart
    fcntl = None

LOCK_FILE = ".turbospec-audit.lock"


class OutDirLock:
    def __init__(self, path: str) -> None:
        self.path = path
        self.lock_path = os.path.join(path, LOCK_FILE)
        self.created = False           # --out did not exist: removed again on release if left empty
        self.note: str | None = None   # a stale lock taken over, to tell the user
        self._fd: int | None = None

    def acquire(self) -> None:
        """Creates --out when missing; ValueError (naming the holder, and what to do) when another audit
        holds it. A filesystem without locks leaves this audit unguarded rather than refused."""
        if fcntl is None:
            return
        self.created = not os.path.isdir(self.path)
        for _ in range(20):
            try:
                os.makedirs(self.path, exist_ok=True)
            except OSError as e:       # e.g. under /proc, a read-only parent, a file in the way
                raise ValueError(f"--out {self.path!r}: cannot create this directory ({e.strerror or e}): pass an "
                                 "--out this user can create and write to") from None
            try:
                fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
            except FileNotFoundError:  # --out removed by an audit releasing it as we opened
                continue
            except OSError as e:       # e.g. another user's lock file, a read-only --out, a file at --out
                raise ValueError(f"--out {self.path!r}: cannot open {self.lock_path} ({e.strerror or e}): pass an "
                                 "--out this user can write to") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read(fd)
                os.close(fd)
                raise ValueError(f"--out {self.path!r} is in use by another audit ({describe_holder(holder)}), which "
                                 "writes its results there: pass another --out, or wait until it ends") from None
            except OSError:
                os.close(fd)
                return
            if _same_file(fd, self.lock_path):
                self._fd = fd
                break
            os.close(fd)               # removed by its holder releasing it: lock the file now at the path
        else:
            raise ValueError(f"--out {self.path!r}: could not lock {self.lock_path} (it kept being replaced): "
                             "pass another --out")
        previous = _read(fd)
        if previous:                   # its holder ended without releasing it: killed, or the machine went down
            gone = "no longer holding it" if _alive(previous) else "no longer running"
            self.note = (f"{self.lock_path} was left by an audit that stopped without releasing it "
                         f"({describe_holder(previous)}; {gone})")
        record = {"pid": os.getpid(), "host": socket.gethostname(), "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(record).encode(), 0)

    def release(self) -> None:
        """Remove the lock file (still locked), unlock, and remove --out if this audit created it and left
        it empty (it stopped before measuring)."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            os.remove(self.lock_path)
        except OSError:
            pass
        os.close(fd)
        if self.created:
            try:
                os.rmdir(self.path)
            except OSError:            # holds what the audit wrote, or another audit's lock
                pass


def describe_holder(holder: dict) -> str:
    if not holder.get("pid"):
        return "pid not written yet: it is starting"
    where = f" on {holder['host']}" if holder.get("host") and holder["host"] != socket.gethostname() else ""
    return f"pid {holder['pid']}{where}, started {holder.get('started_at', '?')}"


def _read(fd: int) -> dict:
    try:
        data = json.loads(os.pread(fd, 4096, 0).decode() or "{}")
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _alive(holder: dict) -> bool:
    """Whether the holder's pid runs on this host (then a reused pid: flock, not the pid, decides)."""
    pid = holder.get("pid")
    if not isinstance(pid, int) or pid <= 0 or holder.get("host") != socket.gethostname():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:                    # exists, another user's
        return True
    return True


def _same_file(fd: int, path: str) -> bool:
    try:
        return os.path.samestat(os.fstat(fd), os.stat(path))
    except FileNotFoundError:
        return False
