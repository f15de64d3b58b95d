# Thin targets: the real entry points are the console scripts declared in pyproject.toml.
VENV      ?= .venv
BIN       := $(VENV)/bin
DATA_DIR  ?= /var/lib/netplugin
LISTEN    ?= 127.0.0.1:9999
PYTEST    ?= $(BIN)/pytest

.PHONY: run test unit integration bench fuzz lint fmt deps test-deps lock clean plugin

## make deps: the system packages, and a venv with the Python packages pinned in constraints.txt.
deps:
	@scripts/bootstrap.sh

## make test-deps: deps, plus what the tests and benchmarks need (QEMU for the VM lab).
test-deps:
	@scripts/bootstrap.sh --test

## make lock: pin every Python package afresh into constraints.txt (after editing pyproject.toml).
lock:
	@scripts/lock.sh

## make run: install what is missing, then run netplugin in the foreground (Ctrl-C stops it).
run: deps
	@scripts/run.sh

## make plugin: build the managed (v2) plugin and `docker plugin create` it (PLUGIN=NAME:TAG,
## PUSH=1 to push it to the registry its name starts with). README: "Managed plugin".
plugin: deps
	@VENV=$(VENV) scripts/build-plugin.sh

## make test: the whole suite (unit + integration against real etcd/OVS/dockerd).
test: test-deps
	$(PYTEST) -q -p no:cacheprovider tests integration

unit: deps
	$(PYTEST) -q tests

integration: test-deps
	$(PYTEST) -q integration

## make bench: measure, and write docs/BENCHMARKS.md.
bench: test-deps
	$(BIN)/python -m bench

## make fuzz: the long fuzz run of the master's API and the plugin's Docker API (the unit suite
## runs a short one); counts into docs/BENCHMARKS.md. FUZZ_MASTER, FUZZ_PLUGIN (requests) and
## FUZZ_SEED override the defaults (10000, 2000, random).
fuzz: deps
	$(BIN)/python -m bench.fuzz

## make lint: ruff, the direction of imports between packages (pyproject.toml's
## [tool.importlinter]) and the module size limit (scripts/check_module_size.py).
lint: deps
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache
	$(BIN)/python scripts/check_module_size.py

fmt: deps
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
