"""The `TURBOSPEC_*` environment switches' parsing: each takes a fixed set of values, and any other
value is refused with `SwitchError` (a ValueError) naming the values it takes, never read as a
default. The `turbospec` command prints that error as one line, `turbospec: error: ...`, and exits 2,
where any other exception keeps its traceback (cli.py). docs/internals.md lists the switches."""
from __future__ import annotations

import os


class SwitchError(ValueError):
    pass


def choice(name: str, values: tuple[str, ...], default: str, what: str = "") -> str:
    """The switch's value, one of `values` (`default` when unset or empty)."""
    value = os.environ.get(name) or default
    if value not in values:
        raise SwitchError(f"{name}={value!r}: use {', '.join(values[:-1])} or {values[-1]}"
                          f"{f' ({what})' if what else ''}; unset, it is {default}")
    return value


def flag(name: str, default: str = "1") -> bool:
    """An on/off switch: "1" on, "0" off."""
    return choice(name, ("0", "1"), default, "0 off, 1 on") == "1"


def count(name: str, default: int, what: str = "") -> int:
    """A non-negative integer switch."""
    value = os.environ.get(name) or str(default)
    if not value.isdigit():
        raise SwitchError(f"{name}={value!r}: give a whole number >= 0{f' ({what})' if what else ''}; "
                          f"unset, it is {default}")
    return int(value)
