"""The `turbospec` command. Each subcommand family lives beside its code and registers itself
through a `register(app)` function, so this file stays a table of contents."""
from __future__ import annotations

import importlib

import typer

app = typer.Typer(rich_markup_mode=None, add_completion=False, no_args_is_help=True,
                  help="turbospec: fast, lossless speculative decoding for open LLMs.")

_SUBCOMMAND_MODULES = (
    "turbospec.generate_cli",      # turbospec generate
    "turbospec.serve.cli",         # turbospec serve
    "turbospec.benchmarks.cli",    # turbospec bench decode|spec
    "turbospec.audit.cli",         # turbospec audit
    "turbospec.train.cli",         # turbospec train eagle3|dflash
    "turbospec.recipes.cli",       # turbospec recipe list|show|check|run
)


def _show_version(value: bool) -> None:
    if value:
        from turbospec import __version__
        typer.echo(f"turbospec {__version__}")
        raise typer.Exit()


@app.callback()
def _main(version: bool = typer.Option(False, "--version", is_eager=True, callback=_show_version,
                                       help="Print the version and exit.")) -> None:
    """turbospec: fast, lossless speculative decoding for open LLMs."""


for _name in _SUBCOMMAND_MODULES:
    try:
        _mod = importlib.import_module(_name)
    except ModuleNotFoundError as e:      # a family not built yet; any other missing import is a bug
        if e.name != _name:
            raise
        continue
    _mod.register(app)

if __name__ == "__main__":
    app()
