"""`python -m turbospec.serve MODEL ...`, the same as `turbospec serve MODEL ...`."""
import typer

from turbospec.serve.cli import serve

if __name__ == "__main__":
    typer.run(serve)
