# The two set-up commands of the README (`make run`, `make test`) and a few helpers.
# Each target creates .venv and installs statebed into it first (again only when
# pyproject.toml changed), so a fresh clone needs python3 (3.11+, with venv), make and
# Java 17; `make test` also Chromium (tests/prereqs.sh checks them before anything starts).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test e2e e2e-reset check k8s-check jvm image-smoke bench chaos-nightly report-screenshots clean

# `make test` without a prerequisite pip cannot install: one line naming it and its package,
# at parse time, so nothing (venv, lint, suite) starts.
ifneq ($(filter test,$(MAKECMDGOALS)),)
PREREQS_MISSING := $(shell /bin/sh tests/prereqs.sh '$(PYTHON)' '$(VENV)' 2>&1)
ifneq ($(PREREQS_MISSING),)
$(error $(PREREQS_MISSING))
endif
endif

# A stage of `make test` prints its command, then its wall time and exit status on one line,
# `stage NAME: S s (exit N)`, also appended to $STATEBED_STAGE_LOG when set (.ci/run prints them
# at the end: CI's budget). $(2) must hold no comma.
timed = @printf '%s\n' '$(2)'; start=$$(date +%s); $(2); rc=$$?; line="stage $(1): $$(( $$(date +%s) - start )) s (exit $$rc)"; \
	echo "$$line"; if [ -n "$$STATEBED_STAGE_LOG" ]; then echo "$$line" >> "$$STATEBED_STAGE_LOG"; fi; exit $$rc

$(STAMP): pyproject.toml
	$(call timed,install,$(PYTHON) -m venv $(VENV) && $(BIN)/python -m pip install --quiet --upgrade pip && $(BIN)/python -m pip install --quiet -e '.[test]')
	touch $(STAMP)

run: $(STAMP)  ## the main job on the embedded default: local Spark, local checkpoint under runs/, then both verifiers
	$(BIN)/statebed run

# The suite but its e2e tier, in two stages: the tests that start no Spark and no server but the
# suite's own S3 server, on two pytest-xdist workers; then the real-Spark tests, one at a time
# (two Spark drivers would share the machine's 2 cores and race each other's fault windows).
# Lint + type-check and the Kubernetes checks run side by side (each is one process); their output
# is printed target by target.
test: $(STAMP)  ## lint, type-check, the Kubernetes checks, then the test suite but its e2e tier (starts its own S3 server)
	@$(MAKE) --no-print-directory -j2 --output-sync=target check k8s-check jvm
	$(call timed,suite-fast,$(BIN)/pytest -q -n 2 --ignore=tests/k8s -m "not slow and not e2e" --durations=10)
	$(call timed,suite-spark,$(BIN)/pytest -q --ignore=tests/k8s -m "slow and not e2e" --durations=25)

# The e2e tier (docs/testing.md): the expensive real-Spark cells `make test` leaves out, run by the
# nightly and by hand. Resumable: each test that passes is recorded in E2E_STATE and skipped by the
# next `make e2e`, so a run cut short continues; `make e2e-reset` starts over.
E2E_STATE ?= runs/e2e-state/passed.tsv

e2e: jvm  ## the e2e tier only (tens of minutes, real Spark), resumable: a rerun skips what passed
	$(BIN)/pytest -q --ignore=tests/k8s -m e2e --durations=25 --e2e-state=$(E2E_STATE)

e2e-reset:  ## forget what `make e2e` has passed: the next one runs the whole tier
	rm -f $(E2E_STATE)

# The JVM failpoint plug-in (jvm/, docs/native-failpoints.md): compiled with the JDK's javac against
# pyspark's own jars, again only when a source changed (the jar is named by the sources' digest).
JVM_SOURCES := $(wildcard jvm/src/statebed/*.java)
JVM_STAMP   := jvm/build/.built

# Then the class-data archives every Spark JVM statebed starts maps instead of loading its classes
# (job/statebed_job/jvm_startup.py: a short run starts in about half the time), dumped by a small run.
jvm: $(JVM_STAMP)  ## the JVM failpoint plug-in's jar (native runs load it; needs javac: openjdk-17-jdk-headless) and the JVMs' class-data archives

$(JVM_STAMP): $(JVM_SOURCES) $(STAMP)
	$(call timed,jvm,$(BIN)/python -m statebed_job.jvm_plugin && $(BIN)/python -m statebed_job.jvm_startup)
	touch $@

k8s-check: $(STAMP)  ## charts rendered by Helm (default/kind/minikube) and validated for K8s 1.32-1.35, skaffold and workflow schemas
	$(call timed,k8s-check,$(BIN)/check-jsonschema --builtin-schema vendor.github-workflows .github/workflows/nightly.yml \
	  && $(BIN)/check-jsonschema --schemafile tests/k8s/skaffold-v4beta14.schema.json skaffold.yaml \
	  && $(BIN)/pytest -q -p no:cacheprovider -n 2 tests/k8s tests/chaos/test_k8s_targets.py tests/chaos/test_k8s_backend.py)

check: $(STAMP)  ## ruff (lint + format) and mypy --strict on the packages
	$(call timed,lint,$(BIN)/ruff check . && $(BIN)/ruff format --check .)
	$(call timed,type-check,$(BIN)/mypy)

SMOKE_BASE   ?= localhost/statebed-smoke-base:bookworm
SMOKE_IMAGE  ?= localhost/statebed:smoke
PODMAN_FLAGS := --runtime runc --ulimit nofile=1024:1024 --ulimit nproc=1024:1024

image-smoke: $(STAMP)  ## (root, podman, debootstrap) the Dockerfile built on a debootstrapped bookworm; `statebed run` in it against SeaweedFS on loopback, then the chart smoke
	podman image exists $(SMOKE_BASE) || ./k8s/smoke-base.sh $(SMOKE_BASE)
	podman build $(PODMAN_FLAGS) --network host --build-arg BASE_IMAGE=$(SMOKE_BASE) --build-arg S3A_JARS=false -t $(SMOKE_IMAGE) .
	$(BIN)/python k8s/image_smoke.py $(SMOKE_IMAGE)
	$(BIN)/python k8s/chart_smoke.py $(SMOKE_IMAGE)

bench: $(STAMP)  ## benchmarks (minutes; not part of the tests)
	$(BIN)/python benchmarks/run_all.py

chaos-nightly: $(STAMP)  ## the full chaos matrix (hours): every fault kind x 3 workloads x v1/v2/native x 12 seeds
	mkdir -p runs
	$(BIN)/statebed chaos matrix --full --json --out runs/nightly-$$(date -u +%Y%m%d-%H%M%S) > runs/nightly-latest.json

report-screenshots: $(STAMP)  ## regenerate docs/images/report-*.png: a 2-cell chaos matrix (~10 min), its reports, headless Chromium (apt: chromium)
	$(BIN)/python tests/report/screenshots.py docs/images

clean:
	rm -rf $(VENV) runs .pytest_cache
