# django-pdfpool: `make test` sets everything up and runs every test; `make demo` serves the example.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# pyenv's other interpreters, for the nox matrix
PYENV_BINS := $(subst $(eval) ,:,$(wildcard $(HOME)/.pyenv/versions/3.12*/bin $(HOME)/.pyenv/versions/3.13*/bin))

.PHONY: venv test test-matrix lint bench browser-deps clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]' nox
	touch $@

venv: $(STAMP)

# Debian's chromium for the browser tests; installed when we are root with apt, else they skip.
browser-deps:
	@test -x /usr/bin/chromium || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
	      || echo "warning: could not install chromium: browser tests will skip"; \
	  else echo "note: /usr/bin/chromium is missing and cannot be installed here: browser tests will skip"; fi; }

test: $(STAMP) browser-deps
	$(BIN)/ruff check .
	$(BIN)/python -m pytest

test-matrix: $(STAMP) browser-deps
	PATH="$(PYENV_BINS):$$PATH" $(BIN)/nox

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_pool.py
	$(BIN)/python benchmarks/bench_extract.py

clean:
	rm -rf $(VENV) .nox .pytest_cache .ruff_cache .hypothesis test-output
