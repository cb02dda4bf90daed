# The two set-up commands of the README (`make run`, `make test`) and a few helpers.
# Each target creates .venv and installs statebed into it first (again only when
# pyproject.toml changed), so a fresh clone needs python3 (3.11+, with venv), make and
# Java 17; `make test` also Chromium (tests/prereqs.sh checks them before anything starts).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run stack kube-tools kube-up kube-down kube-e2e test e2e e2e-reset check k8s-check jvm image image-smoke bench chaos-nightly chaos-nightly-reset report-screenshots clean

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
	@$(MAKE) --no-print-directory -j2 --output-sync=target stack check k8s-check jvm
	$(call timed,suite-fast,$(BIN)/pytest -q -n 2 --ignore=tests/k8s --ignore=tests/kube -m "not slow and not e2e" --durations=10)
	$(call timed,suite-spark,$(BIN)/pytest -q --ignore=tests/k8s --ignore=tests/kube -m "slow and not e2e" --durations=25)

# The e2e tier (docs/testing.md): the expensive real-Spark cells `make test` leaves out, run by the
# nightly and by hand. Resumable: each test that passes is recorded in E2E_STATE and skipped by the
# next `make e2e`, so a run cut short continues; `make e2e-reset` starts over.
E2E_STATE ?= runs/e2e-state/passed.tsv

e2e: jvm stack  ## the e2e tier only (tens of minutes, real Spark), resumable: a rerun skips what passed
	$(BIN)/pytest -q --ignore=tests/k8s --ignore=tests/kube -m e2e --durations=25 --e2e-state=$(E2E_STATE)

e2e-reset:  ## forget what `make e2e` has passed: the next one runs the whole tier
	rm -f $(E2E_STATE)

# The real storage stack (install/install.sh, pins in install/versions.env): MinIO and Toxiproxy
# built from the Go module proxy, the S3A jars from Maven Central, into ~/.cache/statebed
# (STATEBED_CACHE). The first time takes minutes (MinIO ~10 min on 2 cores); afterwards it
# only verifies checksums, offline, in seconds.
stack:  ## MinIO, Toxiproxy and the S3A jars, built or fetched once into ~/.cache/statebed (needs go and mvn the first time)
	$(call timed,stack,bash install/install.sh all >/dev/null)

# A single-node Kubernetes cluster's parts (install/kube-tools.sh, same pins file, docs/kubernetes.md):
# built from upstream sources through the Go module proxy, once; not part of `make test`.
kube-tools:  ## kube-apiserver, controller-manager, scheduler, kubelet, kube-proxy, kubectl, kubeadm, etcd, containerd, CNI plugins, helm, CoreDNS and mc, built once into ~/.cache/statebed/kube (tens of minutes cold; needs go)
	$(call timed,kube-tools,bash install/kube-tools.sh all >/dev/null)

KUBE_DIR ?= runs/kube
kube-up: $(STAMP)  ## (root) a single-node cluster in its own network namespace (after make kube-tools): kubeconfig in $(KUBE_DIR)/kubeconfig/admin.conf
	$(BIN)/python -m statebed_chaos.infra.kube up --dir $(KUBE_DIR)

kube-down: $(STAMP)  ## stop a cluster make kube-up (or a stuck kube-e2e) left: its recorded processes, its mounts, its namespace
	$(BIN)/python -m statebed_chaos.infra.kube down --dir $(KUBE_DIR)

kube-e2e: $(STAMP) stack jvm image  ## (root; after make kube-tools) the cluster from cold, the chart, RBAC, Spark on it (tests/kube); torn down at the end
	$(call timed,kube-e2e,STATEBED_KUBE_DIR=$(KUBE_DIR) $(BIN)/pytest -q -p no:randomly tests/kube --durations=25)

# The JVM failpoint plug-in (jvm/, docs/native-failpoints.md): compiled with the JDK's javac against
# pyspark's own jars, again only when a source changed (the jar is named by the sources' digest).
JVM_SOURCES := $(wildcard jvm/src/statebed/*.java jvm/src-s3a/statebed/*.java)
JVM_STAMP   := jvm/build/.built

# Then the class-data archives every Spark JVM statebed starts maps instead of loading its classes
# (src/statebed_job/jvm_startup.py: a short run starts in about half the time), dumped by a small run.
jvm: $(JVM_STAMP)  ## the JVM failpoint plug-in's jar (native runs load it; needs javac: openjdk-17-jdk-headless) and the JVMs' class-data archives

$(JVM_STAMP): $(JVM_SOURCES) $(STAMP) | stack
	$(call timed,jvm,$(BIN)/python -m statebed_job.jvm_plugin --s3a && $(BIN)/python -m statebed_job.jvm_startup)
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

image:  ## (root, podman, debootstrap) statebed's image: the Dockerfile built on a debootstrapped bookworm, as $(SMOKE_IMAGE)
	podman image exists $(SMOKE_BASE) || ./k8s/smoke-base.sh $(SMOKE_BASE)
	$(call timed,image,podman build $(PODMAN_FLAGS) --network host --build-arg BASE_IMAGE=$(SMOKE_BASE) --build-arg S3A_JARS=false -t $(SMOKE_IMAGE) .)

image-smoke: $(STAMP) stack image  ## (root, podman, debootstrap) `statebed run` in the image against MinIO on loopback, then the chart smoke (MinIO behind Toxiproxy)
	$(BIN)/python k8s/image_smoke.py $(SMOKE_IMAGE)
	$(BIN)/python k8s/chart_smoke.py $(SMOKE_IMAGE)

bench: $(STAMP)  ## benchmarks (minutes; not part of the tests)
	$(BIN)/python benchmarks/run_all.py

NIGHTLY_OUT ?= runs/chaos-nightly
chaos-nightly: $(STAMP)  ## the whole fault catalogue (hours): every fault kind x workload x format that applies x 2 seeds; resumable: run it again to continue
	mkdir -p $(NIGHTLY_OUT)
	$(BIN)/statebed chaos matrix --full --seeds 2 --resume --baselines $(NIGHTLY_OUT)-baselines --json --out $(NIGHTLY_OUT) > $(NIGHTLY_OUT).json

chaos-nightly-reset:  ## forget the catalogue run: the next `make chaos-nightly` starts over
	rm -rf $(NIGHTLY_OUT) $(NIGHTLY_OUT).json $(NIGHTLY_OUT)-baselines

report-screenshots: $(STAMP)  ## regenerate docs/images/report-*.png: a 2-cell chaos matrix (~10 min), its reports, headless Chromium (apt: chromium)
	$(BIN)/python tests/report/screenshots.py docs/images

clean:
	rm -rf $(VENV) runs .pytest_cache
