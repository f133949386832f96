# Tidemark make targets. `make test` is what CI runs (.ci/run).
SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := build

GO       ?= go
BIN      ?= bin/cdc
IMAGE    ?= tidemark/cdc
# -race costs ~4x test time and a one-off race build of the dependencies; RACE= turns it off.
RACE     ?= -race
UNIT_PKGS = $$($(GO) list ./... | grep -v /integration)
# JVM flags of the Kafka broker that benchmarks start (no TieredStopAtLevel: full JIT).
BENCH_KAFKA_HEAP ?= -Xms512m -Xmx1g -XX:+UseSerialGC

.PHONY: build test test-unit test-integration bench lint fmt up down demo docker clean

build:
	$(GO) build -o $(BIN) ./cmd/cdc

test: test-unit test-integration

test-unit:
	$(GO) test $(RACE) -short -count=1 $(UNIT_PKGS)

# Services come from CDC_TEST_PG_URL/CDC_TEST_KAFKA_BROKERS, Docker, or local binaries started by
# integration/testenv through scripts/services.sh on free ports. With CI=true missing services fail.
# pkg/snapshot and pkg/sink also have tests against the real servers (skipped by test-unit's -short).
test-integration:
	scripts/services.sh install
	CI=$${CI:-} $(GO) test -count=1 -timeout 12m ./integration/... ./pkg/snapshot/ ./pkg/sink/

bench:
	TIDEMARK_KAFKA_HEAP='$(BENCH_KAFKA_HEAP)' $(GO) test -run '^$$' -bench . -benchmem ./...
	TIDEMARK_KAFKA_HEAP='$(BENCH_KAFKA_HEAP)' $(GO) run ./cmd/bench $(BENCH_FLAGS)

lint:
	$(GO) vet ./...
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
