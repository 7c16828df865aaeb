# Two entry points: `make demo` (the main job) and `make test` (the whole suite).
# Each creates .venv when missing: torch's CPU build first (pinned), then the project
# with exact versions from constraints.txt, then OpenRLHF without its GPU dependencies
# (only its agent API and CLI parser are used on CPU).
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed

.PHONY: demo test venv lint bench clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -c constraints.txt -e ".[dev,serve,rl]"
	$(PIP) install -q --no-deps openrlhf==0.11.2
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	PARALLELSEARCH_HOME=$${PARALLELSEARCH_HOME:-.parallelsearch} $(VENV)/bin/parallelsearch demo

test: $(STAMP)
	$(PY) -m pytest -q -rs

lint: $(STAMP)
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

bench: $(STAMP)
	for b in benchmarks/*.py; do $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) .parallelsearch build dist *.egg-info
