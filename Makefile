# `make test` and `make demo` set themselves up from a fresh clone with only Python.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# The CPU build of torch; override TORCH_SPEC to install something else.
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu

.PHONY: test demo setup lint clean torch-matrix

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	@# pip's notes on index locations a machine's pip.conf names but lacks are the machine's,
	@# not the project's: left out, unless the install fails (then all of its output shows).
	@echo "upgrading pip in $(VENV)"
	@out=$$($(PY) -m pip install -q --upgrade pip 2>&1) || { echo "$$out"; exit 1; }; \
	  echo "$$out" | grep -v '^WARNING: Location' || true
	@if $(PY) -c "import torch" 2>/dev/null; then echo "torch present: $$($(PY) -c 'import torch; print(torch.__version__)')"; \
	else $(PY) -m pip install -q "$(TORCH_SPEC)" --extra-index-url $(TORCH_INDEX) --retries 0 --timeout 15 2>&1 \
	  | grep -v '^WARNING' || true; $(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "$(TORCH_SPEC)"; fi
	@# setuptools warns that an editable install's folders could shadow the package: the
	@# engine is profiler/tprof_engine/, mapped by package-dir (tests/test_install.py).
	@echo "installing pytest-tprof (editable) with its test and html extras"
	@out=$$(PYTHONWARNINGS="ignore:Editable installation" $(PY) -m pip install -q -e ".[test,html]" 2>&1) \
	  || { echo "$$out"; exit 1; }; echo "$$out" | grep -v '^WARNING: Location' || true
	touch $@

setup: $(VENV)/.installed

lint: setup
	$(VENV)/bin/ruff check profiler pytest_tprof tests benchmarks examples action
	$(VENV)/bin/ruff format --check profiler pytest_tprof tests benchmarks examples action
	$(VENV)/bin/mypy profiler/tprof_engine pytest_tprof action/judge.py
	$(VENV)/bin/zizmor --offline --min-severity=medium --no-config action.yml
	$(VENV)/bin/check-jsonschema --builtin-schema vendor.github-actions action.yml

# Most tests run on TEST_WORKERS pytest-xdist workers; those marked serial assert timing verdicts,
# which the plugin calls inconclusive while other processes keep the CPUs busy, so they run
# alone afterwards.  Both runs always run; either failing fails the target.  -rs lists each
# skipped test with its reason (no GPU, a torch without a feature, a tool not installed).
TEST_WORKERS ?= 2

test: lint
	status=0; \
	$(VENV)/bin/pytest -q -rs -n $(TEST_WORKERS) -m "not serial" || status=$$?; \
	$(VENV)/bin/pytest -q -rs -m serial || status=$$?; \
	exit $$status

demo: setup
	$(PY) examples/demo.py

# Every supported torch release in a virtualenv of its own: the suite and a profiled workload
# each (docs/torch.md).  Tens of GB of downloads and most of two hours on two cores.
torch-matrix: setup
	$(PY) benchmarks/torch_matrix.py

clean:
	rm -rf $(VENV) .tprof .pytest_cache .mypy_cache .ruff_cache
