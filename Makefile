# Two commands on a fresh machine: `make demo` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# PyTorch first, pinned, so that the range in pyproject pulls in no other version. From PyPI on
# Linux this is the CUDA build (a few GB); for the CPU-only build (about 200 MB) on a machine
# without a GPU: make demo TORCH_INDEX=https://download.pytorch.org/whl/cpu
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX ?=
# pytest-xdist workers for `make test` (each runs torch with one intra-op thread: tests/conftest.py)
TEST_WORKERS ?= 2

.PHONY: demo test venv clean

$(BIN)/.installed: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q "$(TORCH_SPEC)" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(BIN)/pip install -q -e ".[test]" "transformers==5.17.0"
	touch $@

venv: $(BIN)/.installed

demo: venv
	$(BIN)/python -m turbospec.demo

test: venv
	$(BIN)/python -m pytest -q -ra -n $(TEST_WORKERS) --durations=25 tests

clean:
	rm -rf $(VENV)
