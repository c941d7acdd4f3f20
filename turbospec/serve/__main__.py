"""`python -m turbospec.serve MODEL ...`, the same as `turbospec serve MODEL ...` (the same command
object: vLLM's several-value flags, readable help, the same errors)."""
import sys

from turbospec.cli import app

if __name__ == "__main__":
    app(["serve", *sys.argv[1:]], prog_name="python -m turbospec.cli")
