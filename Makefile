# Two commands on a fresh machine: `make demo` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The CPU build of PyTorch first, so that no CUDA build is pulled in by the range in pyproject.
TORCH_SPEC ?= torch==2.13.0

.PHONY: demo test venv clean

$(BIN)/.installed: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q "$(TORCH_SPEC)"
	$(BIN)/pip install -q -e ".[test]" "transformers==5.17.0"
	touch $@

venv: $(BIN)/.installed

demo: venv
	$(BIN)/python -m turbospec.demo

test: venv
	$(BIN)/python -m pytest -q -ra tests

clean:
	rm -rf $(VENV)
