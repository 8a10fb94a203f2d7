# Quick start: `make demo` (set up, generate 3 days, run the pipeline) and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
SUPERSET_VENV ?= .venv-superset
export LAKEHOUSE_HOME ?= $(CURDIR)/.lakehouse
# The project's declaration: its sources and tables (the shop demo by default).
export LAKEHOUSE_PROJECT ?= $(CURDIR)/examples/shop/lakehouse.yaml
export DAGSTER_HOME := $(CURDIR)
# The Dagster instance's folders (dagster.yaml; the same by default without these variables).
export LAKEHOUSE_DAGSTER_STORAGE ?= $(LAKEHOUSE_HOME)/dagster
export LAKEHOUSE_DAGSTER_LOGS ?= $(LAKEHOUSE_HOME)/dagster/logs

# The demo's data: the DEMO_DAYS days ending today (UTC), today until now. Its partitions start with its
# first day (kept under LAKEHOUSE_HOME, so `make dev` and a later `make demo` use the same partitions).
DEMO_DAYS ?= 3
DEMO_END ?= $(shell date -u +%F)
DEMO_START_FILE := $(LAKEHOUSE_HOME)/demo-start-date
FIRST_DEMO_DAY = $(or $(shell cat $(DEMO_START_FILE) 2>/dev/null),$(DEMO_START))
DEMO_START ?= $(shell date -u -d "$(DEMO_END) -$$(($(DEMO_DAYS) - 1)) days" +%F)
demo dev stream: export LAKEHOUSE_START_DATE ?= $(FIRST_DEMO_DAY)

.PHONY: setup home demo demo-cdc cluster-demo dev stream test test-fast e2e soak lint bench snapshots clean

# The installation's class-data archive for Spark's JVM (every run, stream and command starts faster): built
# once, kept until Java or Spark change (runtime/jvm_archive.py). The project's Java parts (the Maven module java/:
# the landing files' line reader, the SQL endpoint's extension), built offline against pyspark's jars
# (runtime/java_jar.py). The jars Spark loads, the local Kafka broker's and Kafka Connect's (runtime/jars.tsv: Maven
# coordinates and sha256) and Maven's plugins are resolved once into the installation's local repository; nothing
# resolves anything after that.
setup: $(VENV)/.resolved
	@$(BIN)/python -m lakehouse_assets.runtime.jvm_archive build
	@$(BIN)/python -m lakehouse_assets.runtime.java_jar build

$(VENV)/.installed: pyproject.toml services/pyproject.toml constraints.txt scripts/system-deps.sh
	scripts/system-deps.sh
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c constraints.txt -e '.[dev]'
	$(BIN)/pip install -q -c constraints.txt -e ./services
	touch $@

$(VENV)/.resolved: $(VENV)/.installed lakehouse_assets/runtime/jars.tsv java/pom.xml
	$(BIN)/python -m lakehouse_assets.runtime.jars resolve >/dev/null
	$(BIN)/python -m lakehouse_assets.runtime.java_jar resolve
	touch $@

# The home's folders, and the declaration its lake is made with, recorded in it (LAKEHOUSE_HOME/project): in a
# shell without LAKEHOUSE_PROJECT, `lakehouse` and `dagster` take that one (settings.py, project_file).
home:
	mkdir -p $(LAKEHOUSE_HOME) $(LAKEHOUSE_DAGSTER_STORAGE) $(LAKEHOUSE_DAGSTER_LOGS)
	echo "$(abspath $(LAKEHOUSE_PROJECT))" > $(LAKEHOUSE_HOME)/project

demo: setup home
	@[ -s $(DEMO_START_FILE) ] || echo $(DEMO_START) > $(DEMO_START_FILE)
	$(BIN)/lakehouse generate --start $(DEMO_START) --days $(DEMO_DAYS)
	$(BIN)/dagster asset materialize -m lakehouse_assets.definitions --select '*' \
		--partition-range $(DEMO_START)...$(DEMO_END)
	$(BIN)/lakehouse tables
	$(BIN)/lakehouse reconcile
	@echo
	@echo "Pinned training set of this run (read back without Spark: lakehouse_assets.ml.pinning.read_pinned):"
	$(BIN)/lakehouse pin ml_training_set
	$(BIN)/lakehouse sql "SELECT activity_date, active_users, purchases, revenue FROM gold_daily_activity ORDER BY 1"
	@echo "Open the Dagster UI with: make dev   (then http://127.0.0.1:3000)"
	@echo "Drop new files for the landing sensors: $(BIN)/lakehouse drop --day $(DEMO_END)"

# Real CDC: a throwaway PostgreSQL (wal_level=logical), Debezium capture, bronze -> silver -> gold.
demo-cdc: setup
	mkdir -p $(LAKEHOUSE_DAGSTER_STORAGE) $(LAKEHOUSE_DAGSTER_LOGS)
	$(BIN)/python -m examples.cdc.demo

# The UI, the daemon, the metrics for Prometheus (METRICS_PORT), (STREAM=0 leaves it out) the stream of the
# event source and (SERVE=0 leaves it out) the SQL endpoint for BI tools, stopped together; when the declaration
# reads Kafka topics and no cluster is set, a local broker with those topics (left running).
METRICS_PORT ?= 9464
dev: setup home
	@kafka=$$($(BIN)/lakehouse kafka start --declared) || exit 1; \
	if [ -n "$$kafka" ]; then \
		export LAKEHOUSE_KAFKA_BOOTSTRAP_SERVERS=$$kafka; \
		echo "Kafka broker for the declared topics on $$kafka (lakehouse kafka stop stops it)"; \
	fi; \
	$(BIN)/lakehouse metrics serve --port $(METRICS_PORT) > $(LAKEHOUSE_HOME)/metrics.log 2>&1 & pids=$$!; \
	echo "metrics for Prometheus on http://127.0.0.1:$(METRICS_PORT)/metrics (log $(LAKEHOUSE_HOME)/metrics.log)"; \
	if [ "$(STREAM)" != "0" ]; then \
		$(BIN)/lakehouse stream > $(LAKEHOUSE_HOME)/stream.log 2>&1 & pids="$$pids $$!"; \
		echo "lakehouse stream running (log $(LAKEHOUSE_HOME)/stream.log)"; \
	fi; \
	if [ "$(SERVE)" != "0" ]; then \
		$(BIN)/lakehouse serve > $(LAKEHOUSE_HOME)/serve.log 2>&1 & pids="$$pids $$!"; \
		echo "SQL endpoint for BI tools starting: jdbc:hive2://127.0.0.1:$${LAKEHOUSE_SERVE_PORT:-10000}/ (log $(LAKEHOUSE_HOME)/serve.log)"; \
	fi; \
	trap "kill $$pids 2>/dev/null" EXIT INT TERM; \
	$(BIN)/dagster dev -w workspace.yaml -h 127.0.0.1 -p 3000

# Landing files to bronze, silver and gold_minute_activity in micro-batches, until stopped.
stream: setup home
	$(BIN)/lakehouse stream

# Two pytest workers (TEST_WORKERS), each with its own Spark session, S3 server and PostgreSQL server; a test
# module's tests stay together on one worker (its module-wide pipeline run is made once).
TEST_WORKERS ?= 2
test: setup
	$(BIN)/python -m lakehouse_assets.runtime.java_jar test
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadfile

# Whole deployments and live processes, each live path once: the daemon, the capture, the stream, the endpoint
# under Superset, the UI in a browser (the other cases, the cluster profile among them, in make soak).
e2e: setup $(SUPERSET_VENV)/.installed
	@command -v chromium >/dev/null 2>&1 || scripts/system-deps.sh chromium
	$(BIN)/pytest -m "e2e and not soak"

# Apache Superset, the BI tool the SQL endpoint's e2e test connects, in a venv of its own (its pins are not ours).
$(SUPERSET_VENV)/.installed: constraints-superset.txt
	$(PYTHON) -m venv $(SUPERSET_VENV)
	$(SUPERSET_VENV)/bin/pip install -q -c constraints-superset.txt apache-superset pyhive thrift thrift-sasl pure-sasl rich cachetools
	touch $@

# The reliability suite at a larger size (SOAK_SCALE, default 20), every case of it; its figures go to
# benchmarks/RELIABILITY.md. Then the other cases `make test` leaves to it (marked soak: another crash point,
# catalog kind, time zone, table or declaration), and the SQL endpoint's fuzzer with every case it makes, and
# variants (docs/sql-endpoint.md).
soak: setup
	@rm -f $(LAKEHOUSE_HOME)/reliability-figures.jsonl $(LAKEHOUSE_HOME)/reliability-junit.xml; mkdir -p $(LAKEHOUSE_HOME)
	LAKEHOUSE_SOAK_SCALE=$(or $(SOAK_SCALE),20) LAKEHOUSE_RELIABILITY_FIGURES=$(LAKEHOUSE_HOME)/reliability-figures.jsonl \
		$(BIN)/pytest lakehouse_assets_tests/reliability -m "not e2e" \
		--junitxml=$(LAKEHOUSE_HOME)/reliability-junit.xml; status=$$?; \
	$(BIN)/python -m lakehouse_assets_tests.reliability.report $(LAKEHOUSE_HOME)/reliability-figures.jsonl \
		--junit $(LAKEHOUSE_HOME)/reliability-junit.xml \
		--outcome "$$( [ $$status = 0 ] && echo 'every test passed' || echo "pytest exit $$status: see its output" )"; \
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadfile -m "soak and not e2e" --ignore=lakehouse_assets_tests/reliability \
		|| status=$$?; \
	$(BIN)/pytest -m "soak and e2e" || status=$$?; \
	LAKEHOUSE_FUZZ_VARIANTS=1 $(BIN)/pytest -s lakehouse_assets_tests/serving/test_serve.py -k fuzzer || status=$$?; \
	exit $$status

# The cluster profile on this machine, compared with the local profile on the same input.
cluster-demo: setup
	$(BIN)/python -m examples.cluster.demo

# The asset graph's snapshot (lakehouse_assets_tests/snapshots), written again after an intended change.
snapshots: setup
	$(BIN)/python -m lakehouse_assets_tests.test_definitions

# The tests not marked spark, postgres, s3, slow or e2e (a few still start small processes: docs/development.md).
test-fast: setup
	$(BIN)/pytest -m "not spark and not postgres and not s3 and not slow and not e2e"

lint: setup
	$(BIN)/ruff check lakehouse_assets lakehouse_assets_tests examples benchmarks services
	$(BIN)/mypy
	$(BIN)/lint-imports

# Benchmarks (not part of the tests): SCALE=N multiplies the data sizes; ONLY=ingest,cdc_capture runs some
# (their sections of benchmarks/RESULTS.md are replaced, the others kept).
bench: setup
	$(BIN)/python -m benchmarks.run --scale $(or $(SCALE),1) $(if $(ONLY),--only $(ONLY))

clean:
	rm -rf $(LAKEHOUSE_HOME)
