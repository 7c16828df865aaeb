# Two entry points: `make demo` (the main job) and `make test` (the whole suite).
# Each creates .venv when missing: torch's CPU build first (pinned), then the project
# with exact versions from constraints.txt, then OpenRLHF without its GPU dependencies
# (only its agent API and CLI parser are used on CPU).
# `make test` also installs the system packages the serving tests drive (Debian's
# chromium and PostgreSQL) when they are missing and this is root on an apt system;
# elsewhere those tests skip and say why.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed
EXTRAS := dev,serve,rl,postgres,langgraph
SYSTEM_PACKAGES := chromium postgresql fonts-dejavu-core

.PHONY: demo test test-serving system-deps venv lint bench clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -c constraints.txt -e ".[$(EXTRAS)]"
	$(PIP) install -q --no-deps openrlhf==0.11.2
	touch $(STAMP)

venv: $(STAMP)

# Debian packages for tests/test_page_browser.py (chromium) and the Postgres checkpointer test.
system-deps:
	@if dpkg -s $(SYSTEM_PACKAGES) >/dev/null 2>&1; then \
		echo "system packages present: $(SYSTEM_PACKAGES)"; \
	elif command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
		echo "installing $(SYSTEM_PACKAGES) (apt-get)"; \
		apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(SYSTEM_PACKAGES); \
	else \
		echo "not installing $(SYSTEM_PACKAGES): needs root and apt-get; the browser and Postgres tests will skip"; \
	fi

demo: $(STAMP)
	PARALLELSEARCH_HOME=$${PARALLELSEARCH_HOME:-.parallelsearch} $(VENV)/bin/parallelsearch demo

test: $(STAMP) system-deps
	$(PY) -m pytest -q -rs

test-serving: $(STAMP) system-deps
	$(PY) -m pytest -q -rs -m serving

lint: $(STAMP)
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

bench: $(STAMP)
	for b in benchmarks/*.py; do $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) .parallelsearch build dist *.egg-info .langgraph_api
