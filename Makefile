# django-pdfpool: `make test` sets everything up and runs every test; `make demo` serves the example.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# pyenv's other interpreters, for the nox matrix
PYENV_BINS := $(subst $(eval) ,:,$(wildcard $(HOME)/.pyenv/versions/3.12*/bin $(HOME)/.pyenv/versions/3.13*/bin))

.PHONY: venv test test-matrix lint typecheck docs dist bench bench-load soak browser-deps redis-deps sandbox-deps demo demo-cluster clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,example,docs]' nox
	touch $@

venv: $(STAMP)

# Debian's chromium for the browser tests; installed when we are root with apt, else they skip.
browser-deps:
	@test -x /usr/bin/chromium || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
	      || echo "warning: could not install chromium: browser tests will skip"; \
	  else echo "note: /usr/bin/chromium is missing and cannot be installed here: browser tests will skip"; fi; }

# Debian's redis-server and redis-sentinel for the Redis pool's tests, which start servers
# of their own (never the system's services).
redis-deps:
	@{ command -v redis-server && command -v redis-sentinel; } >/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server redis-sentinel >/dev/null) \
	      || echo "warning: could not install redis-server/redis-sentinel: the Redis tests will skip"; \
	  else echo "note: redis-server or redis-sentinel is missing and cannot be installed here: the Redis tests will skip"; fi; }

# libseccomp for the children's seccomp layer (pyseccomp loads it; Debian images have it,
# as apt needs it); installed when we are root with apt, else the sandbox tests skip (fail
# under CI=true).
sandbox-deps:
	@ldconfig -p 2>/dev/null | grep -q 'libseccomp\.so\.2' || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libseccomp2 >/dev/null) \
	      || echo "warning: could not install libseccomp2: the seccomp layer will be missing"; \
	  else echo "note: libseccomp.so.2 is missing: the seccomp layer will be missing"; fi; }

# Every test, then the given conformance test once more against the Redis pool
# (tests.support.redis_server starts a throwaway redis-server and sets PDFPOOL_TEST_REDIS_URL).
test: $(STAMP) browser-deps redis-deps sandbox-deps
	$(BIN)/ruff check .
	$(MAKE) --no-print-directory typecheck docs dist
	$(BIN)/python -m pytest
	PDFPOOL_TEST_POOL=tests.support.redis_factory:make_pool $(BIN)/python -m tests.support.redis_server \
	  $(BIN)/python -m pytest tests/test_pool_conformance.py -p no:cacheprovider

# A mutation run of the pool's rules (tools/mutate_rules.py): one single-line change at a
# time to each rule of the two pools and the door's decide(), the rule's test folder run
# against each; every mutant must be caught. Minutes; not part of `make test`.
.PHONY: mutants
mutants: $(STAMP) redis-deps
	$(BIN)/python tools/mutate_rules.py

test-matrix: $(STAMP) browser-deps redis-deps sandbox-deps
	PATH="$(PYENV_BINS):$$PATH" $(BIN)/nox

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# mypy in strict mode, with django-stubs (settings in pyproject.toml)
typecheck: $(STAMP)
	$(BIN)/mypy

# The documentation site, built strictly (a broken link or reference fails) into site/
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

# The sdist and the wheel into dist/, checked by twine; tests/e2e/test_wheel.py installs the wheel
dist: $(STAMP)
	rm -rf dist
	$(BIN)/python -m build --sdist --wheel --outdir dist . >/dev/null
	$(BIN)/twine check --strict dist/*

# Every benchmark, each printing its ratios against a baseline measured in the same run, in a
# few minutes: bench_load in its short mode (needs the corpus and redis-server for the Celery
# peer) and a one-minute soak. `make bench-load`: the full load run; `make soak`: ten minutes
# of mixed load with the pool's bounds and the server's memory checked every second.
bench: $(STAMP) redis-deps
	$(BIN)/python benchmarks/bench_pool.py --quick
	$(BIN)/python benchmarks/bench_redis.py --quick
	$(BIN)/python benchmarks/bench_door.py --quick
	$(BIN)/python benchmarks/bench_extract.py --repeat 2
	$(BIN)/python benchmarks/bench_load.py --short
	$(BIN)/python benchmarks/bench_load.py --soak 1 --clients 8

bench-load: $(STAMP) redis-deps
	$(BIN)/python benchmarks/bench_load.py

soak: $(STAMP)
	$(BIN)/python benchmarks/bench_load.py --soak 10

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

# The same example, with three uvicorn workers sharing one pool through a throwaway
# redis-server (no persistence, stopped with the demo): the status page shows the
# cluster-wide limits and which worker holds what. `make demo` stays Redis-free.
REDIS_PORT ?= 6390

demo-cluster: $(STAMP) redis-deps
	cd example_project && $(DEMO_PYTHON) manage.py migrate --noinput
	cd example_project && $(DEMO_PYTHON) manage.py ensure_demo_admin --base-url http://127.0.0.1:$(PORT)
	redis-server --bind 127.0.0.1 --port $(REDIS_PORT) --save "" --appendonly no \
	  --daemonize yes --pidfile $(CURDIR)/.demo-redis.pid --logfile ""
	cd example_project && trap 'kill $$(cat $(CURDIR)/.demo-redis.pid) 2>/dev/null; rm -f $(CURDIR)/.demo-redis.pid' EXIT INT TERM; \
	  PDFPOOL_REDIS_URL=redis://127.0.0.1:$(REDIS_PORT)/0 \
	  $(DEMO_PYTHON) -m uvicorn demo.asgi:application --host 127.0.0.1 --port $(PORT) \
	  --workers 3 --lifespan on

clean:
	rm -rf $(VENV) .nox .pytest_cache .ruff_cache .mypy_cache .hypothesis test-output site dist build
