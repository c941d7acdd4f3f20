"""vLLM's several-values flag on `turbospec serve`: `--served-model-name a b` (argparse's nargs
'+'). Click takes one value per flag, so the values that follow the flag are rewritten into
repeated flags before click parses the line; the repeated form (`--served-model-name a
--served-model-name b`) keeps working.

MODEL is the one positional argument. When it is given before the flag, or anywhere apart from
the flag's values, every bare word after the flag is a name. When it is not (`--served-model-name
a MODEL`, as before, or `--served-model-name a b MODEL`), the last bare word after the flag is
MODEL.
"""
from __future__ import annotations

from typer.core import TyperCommand

MULTI_VALUE_OPTIONS = frozenset({"--served-model-name"})


def expand_multi_value_options(command, args: list[str]) -> list[str]:
    """`args` with `--served-model-name a b c` written as one flag per value. `command`: the
    click command (typer's), whose options say which flags take a value."""
    takes_value = {name for p in command.params
                   if p.param_type_name == "option" and not p.is_flag and not getattr(p, "count", False)
                   for name in (*p.opts, *p.secondary_opts)}
    out: list[str] = []
    runs: list[tuple[int, str, list[str]]] = []   # (where in `out` the extra values go, flag, the values)
    num_positional, i = 0, 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            num_positional += len(args) - i - 1
            out += args[i:]
            break
        if not arg.startswith("-") or arg == "-":
            num_positional += 1
            out.append(arg)
            i += 1
            continue
        out.append(arg)
        i += 1
        if "=" in arg or arg not in takes_value or i >= len(args):
            continue
        out.append(args[i])                        # the flag's own (first) value
        i += 1
        if arg in MULTI_VALUE_OPTIONS:
            extra = []
            while i < len(args) and not args[i].startswith("-"):
                extra.append(args[i])
                i += 1
            runs.append((len(out), arg, extra))
    model_among_values = num_positional == 0 and any(extra for _, _, extra in runs)
    for k, (at, flag, extra) in reversed(list(enumerate(runs))):
        names = extra[:-1] if model_among_values and k == _last_run_with_values(runs) else extra
        tail = extra[len(names):]                  # MODEL, when it came last after the flag
        out[at:at] = [x for name in names for x in (flag, name)] + tail
    return out


def _last_run_with_values(runs: list[tuple[int, str, list[str]]]) -> int:
    return max(k for k, (_, _, extra) in enumerate(runs) if extra)


class ServeCommand(TyperCommand):
    """`turbospec serve`, whose command line takes vLLM's `--served-model-name a b`."""

    def parse_args(self, ctx, args: list[str]) -> list[str]:
        return super().parse_args(ctx, expand_multi_value_options(self, list(args)))
