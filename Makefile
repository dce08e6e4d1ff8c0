# Fresh machine: `make demo` runs the demo, `make test` runs the tests. Both set up .venv first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
ARGS ?=

.PHONY: setup demo test worker server lint lock wheel clean

setup: $(STAMP)

$(STAMP): requirements.lock pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip 'setuptools>=70.1'
	$(PY) -m pip install --quiet -r requirements.lock
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	@touch $(STAMP)

demo: setup
	$(PY) demo.py $(ARGS)

# The suite under coverage (worker and starter subprocesses included); fails under the gates below.
# Two pytest workers, a test module each at a time (pytest-xdist): most tests wait on processes and
# servers, so two share 2 cores well; TEST_WORKERS=0 runs them one after another.
COVERAGE_MIN ?= 90
COVERAGE_MIN_ENTRY ?= 85
TEST_WORKERS ?= 2
test: setup
	@rm -f .coverage .coverage.*
	COVERAGE_FILE=$(CURDIR)/.coverage $(PY) -m coverage run -m pytest -n $(TEST_WORKERS) --dist loadfile $(ARGS)
	@$(PY) -m coverage combine -q
	$(PY) -m coverage report --fail-under=$(COVERAGE_MIN)
	@for f in durable_agents/cli/starter.py durable_agents/cli/worker.py demo.py; do \
		$(PY) -m coverage report --include=$$f --fail-under=$(COVERAGE_MIN_ENTRY) >/dev/null \
		|| { echo "coverage of $$f is under $(COVERAGE_MIN_ENTRY)%"; exit 2; }; done

worker: setup
	$(PY) worker.py $(ARGS)

# The embedded dev server on its own, with the demo's SQLite file and the Web UI on :8233.
AGENT_DATA_DIR ?= data
server: setup
	@mkdir -p $(AGENT_DATA_DIR)
	$(VENV)/bin/temporal server start-dev --db-filename $(AGENT_DATA_DIR)/temporal.db --ui-port 8233 \
		--search-attribute AgentStatus=Keyword --search-attribute AgentName=Keyword \
		--search-attribute AgentParent=Keyword --search-attribute AgentForkOf=Keyword \
		--search-attribute AgentTenant=Keyword --search-attribute AgentUser=Keyword \
		--search-attribute AgentCost=Double --search-attribute AgentPromptWords=KeywordList \
		$$($(PY) -c 'from durable_agents.dev_server import dev_server_flags; print(" ".join(dev_server_flags()))')

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# The wheel to install elsewhere: pip install dist/durable_agents-*.whl (one import name, durable_agents).
wheel: setup
	$(PY) -m pip wheel --quiet --no-deps --no-build-isolation -w dist .

# Re-pin requirements.lock from the ranges in pyproject.toml.
lock:
	rm -rf .venv-lock && $(PYTHON) -m venv .venv-lock
	.venv-lock/bin/pip install --quiet --upgrade pip
	.venv-lock/bin/pip install --quiet '.[dev]'
	{ echo "# Exact versions the tests pass with; regenerate with: make lock"; \
	  .venv-lock/bin/pip freeze --exclude durable-agents; } > requirements.lock
	rm -rf .venv-lock

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
