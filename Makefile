# simworld: the two commands a newcomer needs are `make serve` and `make test`.
# Everything installs into a virtual environment at $(VENV) (created on first use).

VENV ?= .venv
PY := $(VENV)/bin/python
SIMWORLD := $(VENV)/bin/simworld
TEST_EXTRAS := bfcl,gym,hf,textworld,pretrained,openai,eval,serve,adapters,datascience,dev

.PHONY: serve test test-fast lint typecheck install install-test bundle clean

$(PY):
	python3 -m venv $(VENV)

# The stamp files re-run an install when pyproject.toml or the script changes.
$(VENV)/.installed: $(PY) pyproject.toml scripts/install.sh
	PYTHON=$(PY) scripts/install.sh bfcl,gym,hf,serve
	touch $@

$(VENV)/.installed-test: $(PY) pyproject.toml scripts/install.sh
	PYTHON=$(PY) scripts/install.sh $(TEST_EXTRAS)
	touch $@ $(VENV)/.installed

install: $(VENV)/.installed
install-test: $(VENV)/.installed-test

# The main job: the simulated BFCL environment over HTTP (REST, OpenEnv) with the shipped
# default world model, on http://127.0.0.1:8000 (HOST=0.0.0.0 PORT=9000 to change).
HOST ?= 127.0.0.1
PORT ?= 8000
serve: install
	$(SIMWORLD) serve --model default --env bfcl --host $(HOST) --port $(PORT)

lint: install-test
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: install-test
	PYTHON=$(PY) scripts/typecheck.sh

# The whole suite: lint, types, and every test (slow, contract and end-to-end included).
test: lint typecheck
	$(PY) -m pytest -q

# The inner loop: seconds, no installs, no slow tests.
test-fast:
	$(PY) -m pytest -q -m "not slow" -x

bundle: install-test
	$(SIMWORLD) bundle --out data/bundled

clean:
	rm -rf $(VENV) build .pytest_cache .mypy_cache .ruff_cache
