"""The `turbospec` command. Each subcommand family lives beside its code and registers itself
through a `register(app)` function, so this file stays a table of contents (plus how `--help`
names the values of every subcommand's flags: `ReadableHelpGroup`)."""
from __future__ import annotations

import importlib
import os
import sys

import typer
from typer.core import TyperArgument, TyperGroup

_SUBCOMMAND_MODULES = (
    "turbospec.generate_cli",      # turbospec generate
    "turbospec.serve.cli",         # turbospec serve
    "turbospec.benchmarks.cli",    # turbospec bench decode|spec
    "turbospec.audit.cli",         # turbospec audit
    "turbospec.train.cli",         # turbospec train eagle3|dflash
    "turbospec.recipes.cli",       # turbospec recipe list|show|check|run
)
# --help's name for a value of each Python type (typer printed `<int>`, `<list[str]>`, `{model}`)
_METAVARS = {str: "TEXT", int: "INT", float: "FLOAT"}


class _ReadableArgument(TyperArgument):
    """A positional argument named as in usual CLI help: `MODEL`, `[EXTRA]...`, no `<str>`."""

    def _usage_display_name(self) -> str:
        name = self.metavar if self.required else f"[{self.metavar}]"
        return name + ("..." if self.nargs != 1 else "")

    def _rich_display_name(self) -> str:
        return self.metavar + ("..." if self.nargs != 1 else "")

    def display_type_rich(self, ctx) -> None:
        return None


def readable_metavars(command) -> None:
    """Name the values of `command`'s flags and arguments (and its subcommands') like usual CLI
    help: `--max-tokens INT`, `-p, --prompt TEXT (repeatable)`, `turbospec generate [OPTIONS] MODEL`.
    A metavar that a command sets itself is kept."""
    for sub in getattr(command, "commands", {}).values():
        readable_metavars(sub)
    for p in command.params:
        desc = getattr(p, "type_descriptor", None)
        if p.metavar is not None or getattr(p, "is_flag", False) or desc is None:
            continue
        one = desc.annotation.__args__[0] if desc.is_list else desc.annotation
        if one not in _METAVARS:
            continue                                   # a type of its own: typer's name for it
        if isinstance(p, TyperArgument):
            p.metavar = p.name.upper()
            p.__class__ = _ReadableArgument
        else:
            repeat = desc.is_list and "repeatable" not in (p.help or "")
            p.metavar = _METAVARS[one] + (" (repeatable)" if repeat else "")


class ReadableHelpGroup(TyperGroup):
    """The root group: typer builds every subcommand before it, so it names their values here."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        try:                            # typer's internals it reads may change: help is cosmetic,
            readable_metavars(self)     # the commands must keep working whatever typer is installed
        except (AttributeError, TypeError, IndexError):
            pass


class _App(typer.Typer):
    """The command: a `TURBOSPEC_*` switch given a value it does not take (env_switch.SwitchError, raised
    where the switch is read, often at an import inside a command) ends it with one line and status 2,
    as a bad flag does, not with a traceback."""

    def __call__(self, *args, **kwargs):
        from turbospec.env_switch import SwitchError
        try:
            return super().__call__(*args, **kwargs)
        except SwitchError as e:
            print(f"turbospec: error: {e}", file=sys.stderr)
            raise SystemExit(2) from None


app = _App(cls=ReadableHelpGroup, rich_markup_mode=None, add_completion=False, no_args_is_help=True,
           help="turbospec: fast, lossless speculative decoding for open LLMs.")


def _show_version(value: bool) -> None:
    if value:
        from turbospec import __version__
        typer.echo(f"turbospec {__version__}")
        raise typer.Exit()


@app.callback()
def _main(version: bool = typer.Option(False, "--version", is_eager=True, callback=_show_version,
                                       help="Print the version and exit.")) -> None:
    """turbospec: fast, lossless speculative decoding for open LLMs."""
    import warnings
    warnings.formatwarning = one_line_warning      # not `file.py:53: UserWarning: ...` + a source line


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep   # not a library under a clone's .venv/


def one_line_warning(message, category, filename, lineno, line=None) -> str:
    """A warning on a command's stderr: one line, `turbospec: warning: ...` (a library's warning keeps its
    category and origin, so that it is not taken for ours)."""
    if category is UserWarning and os.path.abspath(filename).startswith(_PACKAGE_DIR):
        return f"turbospec: warning: {message}\n"
    return f"warning ({category.__name__}, {filename.rsplit('/', 1)[-1]}:{lineno}): {message}\n"


def _register_subcommands() -> None:
    for name in _SUBCOMMAND_MODULES:
        try:
            mod = importlib.import_module(name)
        except ModuleNotFoundError as e:      # a family not built yet; any other missing import is a bug
            if e.name != name:
                raise
            continue
        mod.register(app)


try:                                      # importing them (torch) takes a second or two: a Ctrl-C
    _register_subcommands()               # there ends the command as one anywhere else does
except KeyboardInterrupt:
    print("turbospec: interrupted", file=sys.stderr)
    raise SystemExit(130) from None

if __name__ == "__main__":
    app()
