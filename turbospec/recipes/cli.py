"""`turbospec recipe list | show | check | run` (turbospec/recipes/__init__.py has the format)."""
from __future__ import annotations

import shlex

import typer

recipe_app = typer.Typer(rich_markup_mode=None, no_args_is_help=True, add_completion=False,
                         help="Pinned recipes: a model, a GPU and the measured turbospec commands for them.")

MODEL = typer.Option(None, "--model", help="the model directory (default: the recipe's model id)")
SET = typer.Option([], "--set", help="a placeholder's value, KEY=VALUE (e.g. drafter=drafters/mine)")


def _load(name: str, model: str | None, sets: list[str]):
    from turbospec.recipes import load
    overrides: dict[str, str | None] = {"model": model}
    for item in sets:
        key, eq, value = item.partition("=")
        if not eq or not key or not value:            # an empty path was checked as '.', and said OK
            raise typer.BadParameter(f"--set {item!r}: write KEY=VALUE, e.g. --set drafter=drafters/mine")
        if key == "model" and model is not None and value != model:      # B won silently over --model A
            raise typer.BadParameter(f"--model {model!r} and --set model={value!r} name two models: give "
                                     "the model directory once (--model DIR)")
        overrides[key] = value
    if model == "":
        raise typer.BadParameter("--model '': give the model directory, or leave --model out for the recipe's")
    try:
        recipe = load(name)
        return recipe, recipe.values(overrides)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None


@recipe_app.command("list")
def list_recipes() -> None:
    """The shipped recipes."""
    from turbospec.recipes import load, names
    for n in names():
        r = load(n)
        typer.echo(f"{n:<28} {r.gpu:<6} {r.title}")


@recipe_app.command("show")
def show(name: str = typer.Argument(..., help="a shipped recipe's name or a .toml path"),
         model: str = MODEL, sets: list[str] = SET) -> None:
    """The recipe's setting, what was measured, and its steps as shell lines to copy."""
    recipe, values = _load(name, model, sets)
    typer.echo(f"# {recipe.title}")
    typer.echo(f"# GPU: {recipe.gpu} | pinned: " + ", ".join(f"{k} {v}" for k, v in recipe.pinned.items()))
    for line in recipe.measured.strip().splitlines():
        typer.echo(f"# {line}")
    for step in recipe.steps:
        about = recipe.about(step, values)
        typer.echo(f"\n# {step.name}: {about}" if about else f"\n# {step.name}")
        typer.echo("turbospec " + " ".join(shlex.quote(a) for a in recipe.argv(step, values)))


@recipe_app.command("check")
def check_cmd(name: str = typer.Argument(..., help="a shipped recipe's name or a .toml path"),
              model: str = MODEL, sets: list[str] = SET) -> None:
    """This machine and the model directory against the recipe; exit 1 on a FAIL."""
    from turbospec.recipes.check import check
    recipe, values = _load(name, model, sets)
    findings = check(recipe, values)
    for f in findings:
        typer.echo(f"{f.status:<5} {f.what:<13} {f.detail}")
    if any(f.status == "FAIL" for f in findings):
        raise typer.Exit(1)


@recipe_app.command("run")
def run(name: str = typer.Argument(..., help="a shipped recipe's name or a .toml path"),
        step: str = typer.Argument(..., help="the step to run (`turbospec recipe show` lists them)"),
        extra: list[str] = typer.Argument(None, help="more flags for the step's command, after `--`: "
                                          "appended to it, so they override the step's own (`-- --max-tokens 8` "
                                          "wins over its --max-tokens 48; a repeatable flag such as --prompt gets "
                                          "both); `-- --overwrite` starts a step's output over (an audit, a "
                                          "training run, the corpus; without it a regeneration continues)"),
        model: str = MODEL, sets: list[str] = SET,
        dry_run: bool = typer.Option(False, help="print the command on stdout instead of running it "
                                     "(`--dry-run > cmd.sh` saves it)")) -> None:
    """Run one step of the recipe, in this process, exactly as `show` prints it, plus any flags
    given after `--` (appended: they override the step's own). The command is printed first, on
    stderr (on stdout with --dry-run)."""
    recipe, values = _load(name, model, sets)
    try:
        argv = recipe.argv(recipe.step(step), values) + list(extra or [])
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None
    line = "turbospec " + " ".join(shlex.quote(a) for a in argv)
    if dry_run:                                  # the command is the output: `--dry-run > cmd.sh`
        typer.echo(line)
        return
    typer.echo(line, err=True)                   # the step's own stdout stays its own
    from turbospec.cli import app
    code = app(argv, prog_name="turbospec", standalone_mode=False)   # not standalone: an exit is returned
    if isinstance(code, int) and code:          # a command that returns a value: not an exit code
        raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    app.add_typer(recipe_app, name="recipe")
