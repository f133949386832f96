# Tidemark make targets. `make test` is what CI runs (.ci/run).
SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := build

GO       ?= go
BIN      ?= bin/cdc
IMAGE    ?= tidemark/cdc
# oci or docker: the OCI image format drops the Containerfile's HEALTHCHECK, docker format keeps it.
IMAGE_FORMAT ?= oci
VERSION  ?= $$(git describe --tags --always --dirty 2>/dev/null || echo dev)
# Packages whose concurrency the race detector checks in test-unit (their dependencies are cheap
# to build with -race; the whole tree with -race costs minutes on a cold cache). `make test-race`
# runs every unit package with -race.
RACE_PKGS = ./pkg/change/ ./pkg/codec/ ./pkg/replication/ ./pkg/watermark/ ./pkg/pipeline/ ./pkg/consumer/ ./pkg/sink/ ./pkg/schemareg/
UNIT_PKGS = $$($(GO) list ./... | grep -v /integration)
# JVM flags of the Kafka broker that benchmarks start: kafka-server-start.sh's defaults (1 GiB
# heap, G1), as users run it; full JIT (no TieredStopAtLevel).
BENCH_KAFKA_HEAP ?= -Xms1g -Xmx1g -XX:+UseG1GC -XX:MaxGCPauseMillis=20

.PHONY: build static image test test-tools test-unit bench-smoke test-race test-integration test-integration-15 test-after test-integration-pg17 fuzz bench bench-debezium bench-instructions lint fmt up down demo docker clean

build:
	$(GO) build -o $(BIN) ./cmd/cdc
	$(GO) build -o $(dir $(BIN))tidemark-apply ./cmd/tidemark-apply

# The static cdc for the container image: no cgo, so it runs on an empty base.
static:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags="-s -w -X main.version=$(VERSION)" -o bin/static/cdc ./cmd/cdc

# The image FROM scratch (container/Containerfile), built by buildah without a Docker engine:
# the static cdc, CA certificates, the non-root user 65532 and a writable /tmp (docs/container.md).
image: static
	IMAGE='$(IMAGE)' IMAGE_FORMAT='$(IMAGE_FORMAT)' scripts/image.sh bin/static/cdc

# `make test` installs what every suite needs first: test-unit's deploy/ tests run promtool, which
# fail under CI=true without it (scripts/services.sh install-tools puts it there).
# make test runs the PostgreSQL 17 subset and bench-smoke side by side (test-after): each starts
# servers of its own, and together they take about the time of the longer one.
test: test-tools test-unit test-integration-15 test-after

test-tools:
	scripts/services.sh install
	scripts/services.sh install-tools

test-unit:
	python3 scripts/check-doc-links.py
	$(GO) test -short -count=1 $(UNIT_PKGS)
	$(GO) test -race -short -count=1 $(RACE_PKGS)

test-race:
	$(GO) test -race -short -count=1 $(UNIT_PKGS)

# Services come from CDC_TEST_PG_URL/CDC_TEST_KAFKA_BROKERS, Docker, or local binaries started by
# internal/testenv through scripts/services.sh on free ports. With CI=true missing services fail.
# pkg/snapshot, pkg/sink, pkg/pgcat, cmd/tidemark-apply and internal/testenv also have tests
# against the real servers (skipped by test-unit's -short): they run here. pkg/schemareg's and
# internal/testenv's registry tests run against Apicurio Registry (scripts/services.sh
# install-registry fetches it; it needs a Java of 21 or later, and under CI its absence fails).
# ./integration/fault/ (inside ./integration/...) starts servers of its own, which it crashes and
# restarts while cdc runs; it takes about 4 minutes (CDC_FAULT_SEED repeats a run), and its
# TestCluster about 2.5 more: a three-node Kafka cluster of its own (three JVMs of at most 384 MiB
# heap) whose nodes it kills under cdc (docs/testing.md#the-cluster-suite), TestClusterRolling
# about 4 more (a rolling restart and a node cut off for 2 minutes) and TestKafkaDeadPath about 2,
# and its TestTopicCreationHeldBack about 1 more (docs/testing.md#topic-creation-held-back). go test runs
# the package beside ./integration/, the longest.
# All of this runs on PostgreSQL 15 (test-integration-15), then test-integration-pg17 runs part
# of it on 17.
test-integration: test-integration-15
	$(MAKE) --no-print-directory test-integration-pg17

test-integration-15:
	scripts/services.sh install
	scripts/services.sh install-tools
	CI=$${CI:-} $(GO) test -count=1 -timeout 24m ./integration/... ./integration/fault/ ./pkg/snapshot/ ./pkg/sink/ \
		./pkg/pgcat/ ./cmd/tidemark-apply/ ./internal/testenv/ ./pkg/schemareg/

# The PostgreSQL 17 subset beside bench-smoke; each one's output is printed whole when it ends.
test-after:
	$(MAKE) --no-print-directory -j2 --output-sync=target test-integration-pg17 bench-smoke

# The integration tests whose subject changed between PostgreSQL 15 and 17 (pgoutput, catalogs,
# publications, slots), on a PostgreSQL 17 of their own: Debian 13's packages in a private folder
# (scripts/postgresql-17.sh, fetched once into $$TIDEMARK_CACHE), Kafka as above. testenv refuses
# a server of another version (CDC_TEST_PG_VERSION), and TestServerVersion checks it. Which tests,
# and why: docs/testing.md#postgresql-17.
PG17_TESTS = TestServerVersion TestSnapshotStreamAndRestart TestTypesSnapshotEqualsReplication \
	TestUnchangedToast TestTruncateKeyedTable TestUnicodeAndQuotedIdentifiers TestLargeRowsRoundTrip \
	TestGeneratedColumns TestKeylessTable.* TestPublication.* TestPartitionedTable TestLargeTransaction \
	TestChunkedNoLongTransaction TestChunkedCopiesRunTogether TestResnapshot \
	TestSchemaChangesWhileStreaming TestSchemaChangesDuringChunkedCopy TestNewKeyRecopyReconciles \
	TestKeyLostWhileStopped TestQuietTables TestQuietTablesAdvance TestRemoveAndReAddTable TestCheck \
	TestStartupWalLevelNotLogical TestStartupRoleWithoutReplication TestStartupMissingPublication \
	TestFailoverSlot TestStandbyCapture
empty :=
space := $(empty) $(empty)
PG17_ENV = env -u CDC_TEST_PG_URL -u CDC_TEST_KAFKA_BROKERS CDC_TEST_PG_VERSION=17 CI=$${CI:-}
test-integration-pg17:
	scripts/postgresql-17.sh >/dev/null
	$(PG17_ENV) $(GO) test -count=1 -timeout 12m -run '^($(subst $(space),|,$(strip $(PG17_TESTS))))$$' ./integration/
	$(PG17_ENV) $(GO) test -count=1 -timeout 5m ./pkg/snapshot/

# Every Go benchmark, twice, within a time limit per package (scripts/bench-smoke.sh): a
# benchmark that hangs (as BenchmarkDecodeTxn once did, unnoticed) fails `make test` with the
# stacks of where it hangs. The figures of so short a run mean nothing; `make bench` measures.
# Then tools/bench's formats scenario, tiny (BENCH_SMOKE_FORMATS): both paths with each
# CDC_VALUE_FORMAT against PostgreSQL, Kafka (CDC_TEST_* or its own) and an Apicurio Registry
# (CDC_TEST_SCHEMA_REGISTRY_URL or its own: a Java of 21 or later, whose absence fails), so the
# scenario that `make bench` runs at full size keeps working.
BENCH_SMOKE_SECONDS ?= 180
# It also runs the bench's many scenario (tools/bench, `-only many`) at BENCH_SMOKE_MANY tables:
# a publication FOR ALL TABLES of small tables beside a busy one, hydrated, its figures printed
# (`make bench` runs it at 10,000).
BENCH_SMOKE_MANY ?= 300
BENCH_SMOKE_FORMATS ?= -formats-rows 5000 -formats-txns 1000 -formats-rounds 1
bench-smoke:
	scripts/services.sh install
	CI=$${CI:-} GO=$(GO) scripts/bench-smoke.sh $(BENCH_SMOKE_SECONDS)
	out="$$(mktemp -d)"; trap 'rm -rf "$$out"' EXIT; \
	$(GO) run ./tools/bench -only formats $(BENCH_SMOKE_FORMATS) -out "$$out/formats.json" && \
	$(GO) run ./tools/bench -only many -many-tables $(BENCH_SMOKE_MANY) -out "$$out/bench-many.json"

# Every fuzz target for FUZZTIME each (package:target). Their seed corpora (f.Add and
# testdata/fuzz/<target>/) run as ordinary tests in test-unit.
FUZZTIME ?= 60s
FUZZ_TARGETS = ./pkg/replication/:FuzzDecode ./pkg/codec/:FuzzEncoder ./pkg/format/internal/pgjson/:FuzzAppendValue \
	./pkg/codec/:FuzzSplitCopyText ./pkg/watermark/:FuzzDecode ./pkg/watermark/:FuzzTrackerHistory \
	./pkg/secret/:FuzzRedact ./pkg/consumer/:FuzzReader ./pkg/format/internal/pgjson/:FuzzPlainString \
	./pkg/format/avro/:FuzzEncode
fuzz:
	for t in $(FUZZ_TARGETS); do $(GO) test -run '^$$' -fuzz "^$${t#*:}$$" -fuzztime $(FUZZTIME) "$${t%%:*}"; done

bench:
	TIDEMARK_KAFKA_HEAP='$(BENCH_KAFKA_HEAP)' $(GO) test -run '^$$' -bench . -benchmem ./...
	TIDEMARK_KAFKA_HEAP='$(BENCH_KAFKA_HEAP)' $(GO) run ./tools/bench $(BENCH_FLAGS)

# Tidemark against Debezium 3.6.1.Final's PostgreSQL connector in Kafka Connect 4.1.1 on the same
# pgbench data (tools/bench, -only debezium), once with JSON and once with Avro (Apicurio
# Registry's AvroConverter and a registry the bench starts). install-debezium fetches Connect's,
# Debezium's and the converter's jars from Maven Central once (cached in $$TIDEMARK_CACHE);
# `make test` never does.
bench-debezium:
	scripts/services.sh install-debezium
	TIDEMARK_KAFKA_HEAP='$(BENCH_KAFKA_HEAP)' $(GO) run ./tools/bench -only debezium $(BENCH_FLAGS)

# Instructions per record of the hot loops (BenchmarkDecodeTxn: decode + encode per change, and
# the codec's snapshot row benchmarks), counted by valgrind --tool=callgrind over fixed iteration
# counts: repeatable where timings on a loaded machine are not (tools/bench/instructions.go).
# Needs Debian's valgrind package; no services.
bench-instructions:
	@command -v valgrind >/dev/null || { echo "valgrind not found: apt-get install -y valgrind"; exit 1; }
	$(GO) run ./tools/bench -instructions -out bench-instructions.json

lint:
	$(GO) vet ./...
	python3 scripts/check-doc-links.py
	@unformatted="$$(gofmt -l .)"; \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi

fmt:
	gofmt -w .

# Local PostgreSQL and Kafka on 127.0.0.1:55432 and :59092; `eval "$$(scripts/services.sh env)"`
# points integration tests at them.
up:
	scripts/services.sh up

down:
	scripts/services.sh down

demo:
	scripts/demo.sh

docker:
	docker build -t $(IMAGE) .

clean:
	scripts/services.sh clean
	rm -rf bin
