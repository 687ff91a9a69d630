# `make demo` and `make test` each build .venv from nothing, each with what it needs: the demo llmdiag and torch
# (the `workloads` extra), the tests and lint the dev toolchain besides (pytest, HTA, Dask, pyarrow, ruff, mypy...).
# One stamp per purpose, so `make demo` then `make test` adds the toolchain to the demo's venv. Torch is pinned to
# the 2.13.0 CPU wheel where there is no CUDA: an unpinned torch pulls several GB of CUDA packages.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check -q
# The venv with torch; + llmdiag[workloads] (demo); + the dev toolchain (test, lint, bench, fuzz). The full one
# keeps its old name: venvs made before the split are recognised as complete.
TORCH_STAMP := $(VENV)/.llmdiag-torch
DEMO_STAMP  := $(VENV)/.llmdiag-demo
STAMP       := $(VENV)/.llmdiag-installed
# The demo fits the machine: at most one rank per core, so its report leads with what the workload shows
# (the pipeline's bubble and balance), not with "timings contaminated by oversubscription". tp2pp2 (4 ranks)
# from 4 cores, else pp2 (2 ranks; 1F1B with 4 microbatches).
NPROC  := $(shell nproc 2>/dev/null || sysctl -n hw.ncpu 2>/dev/null || echo 1)
DEMO   ?= $(if $(shell [ $(NPROC) -ge 4 ] && echo big),tp2pp2,pp2)
DEMO_OUT ?= runs/demo-$(DEMO)

.PHONY: demo test test-fast lint fuzz bench browser clean

$(TORCH_STAMP):
	[ -x $(PY) ] || $(PYTHON) -m venv $(VENV)
	@if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi >/dev/null 2>&1; then \
	  echo "CUDA found: installing the default torch build"; \
	else \
	  echo "no CUDA: installing torch==2.13.0 (CPU)"; $(PIP) install torch==2.13.0; \
	fi
	touch $@

$(DEMO_STAMP): pyproject.toml | $(TORCH_STAMP)
	$(PIP) install -e '.[workloads]'
	touch $@

# The full install also covers the demo's, so `make test` then `make demo` installs nothing more.
$(STAMP): pyproject.toml | $(TORCH_STAMP)
	$(PIP) install -e '.[dev,workloads]'
	touch $@ $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	rm -rf $(DEMO_OUT)
	$(VENV)/bin/llmdiag run --workload $(DEMO) --out $(DEMO_OUT)
	$(VENV)/bin/llmdiag analyze $(DEMO_OUT)

# Headless Chromium for the report's rendering test; best effort (root + apt only), the test skips without it.
browser:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
	  || echo "chromium not installed: the browser test will be skipped"; }

test: $(STAMP) browser
	$(PY) -m pytest -q tests

# ruff and mypy at the versions pinned in pyproject.toml's dev extra; both read their settings from pyproject.toml.
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

# Under two minutes on two cores: no torchrun workloads, property sweeps, expert corpus, attack suite, Dask
# clusters or browser (CI runs all).
test-fast: $(STAMP)
	$(PY) -m pytest -q tests -m "not slow and not exhaustive and not browser"

# The property tests and the adversarial suite with many fresh random examples each (LLMDIAG_FUZZ_EXAMPLES,
# default 10,000: the gate's mutated summaries, where no FAIL may turn into a PASS, among them; about an hour
# on 2 cores). The suite itself runs a few hundred, derandomized.
fuzz: $(STAMP)
	LLMDIAG_FUZZ_EXAMPLES=$${LLMDIAG_FUZZ_EXAMPLES:-10000} LLMDIAG_FUZZ_SEED=$${LLMDIAG_FUZZ_SEED:-random} $(PY) -m pytest -q -x -p no:cacheprovider tests/unit/test_properties.py tests/adversarial

bench: $(STAMP)
	$(PY) -m benchmarks.run

clean:
	rm -rf $(VENV) runs llmdiag-report benchmarks/results benchmarks/data
