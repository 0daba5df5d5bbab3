# django-pdfpool: `make test` sets everything up and runs every test; `make demo` serves the example.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# pyenv's other interpreters, for the nox matrix
PYENV_BINS := $(subst $(eval) ,:,$(wildcard $(HOME)/.pyenv/versions/3.12*/bin $(HOME)/.pyenv/versions/3.13*/bin))

.PHONY: venv test test-matrix lint bench browser-deps demo clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,example]' nox
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

# The example project (example_project/) on http://127.0.0.1:$(PORT)/: migrates its SQLite
# database, makes sure of an admin user with a generated password (printed on every run),
# then serves with uvicorn; Ctrl-C or SIGTERM drains the pool before the server exits.
PORT ?= 8000
DEMO_PYTHON := $(abspath $(BIN))/python

demo: $(STAMP)
	cd example_project && $(DEMO_PYTHON) manage.py migrate --noinput
	cd example_project && $(DEMO_PYTHON) manage.py ensure_demo_admin --base-url http://127.0.0.1:$(PORT)
	cd example_project && exec $(DEMO_PYTHON) -m uvicorn demo.asgi:application \
	  --host 127.0.0.1 --port $(PORT) --lifespan on

clean:
	rm -rf $(VENV) .nox .pytest_cache .ruff_cache .hypothesis test-output
