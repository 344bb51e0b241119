# Tempest build and test entry points. See README.md.
GO        ?= go
BIN       := bin/tempest
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -s -w -X main.version=$(VERSION)
PKGS      := ./...
FUZZTIME  ?= 30s
BENCHTIME ?= 1s

.PHONY: all build run test vet bench bench-tracing bench-peers fuzz lint e2e soak clean netns-partition

all: build

## build: the static tempest binary in bin/
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/node

## run: a local 3-node cluster with a guided tour; stays up until Ctrl-C (see README)
run: build
	./$(BIN) dev --tour

## test: vet plus the race-enabled test suite, a sweep of SIM_SEEDS seeds of the simulation
## without -race (docs/federation.md, "Simulation"), and the build without tracing code
## (-tags tempest_notrace, see docs/BENCHMARKS.md "Tracing"): vetted, and its own tests run
SIM_SEEDS ?= 300
test: vet
	$(GO) test -race -count=1 -timeout 15m $(PKGS)
	$(GO) test -count=1 -timeout 15m -run '^TestSimulation$$' . -sim.seeds=$(SIM_SEEDS)
	$(GO) test -race -count=1 -tags tempest_notrace -run '$(NOTRACE_TESTS)' . ./ariel/
	cd deploy/k8s && $(GO) test -count=1 ./...
	cd third_party/raft && $(GO) test -count=1 -run '^(TestReplicationBackoffIsCapped|TestPipelineDecoderDrainsAfterAStaleTerm)$$' .

NOTRACE_TESTS := NoTracingBuild|TestTellAsk$$|TestAskJSON|TestTellAskSpawn

vet:
	$(GO) vet $(PKGS)
	$(GO) vet -tags tempest_notrace $(PKGS)

## soak: the long runs make test leaves out: failover with the default timing, the
## 20,000-connection API test and 40 seeds of the simulation (TEMPEST_SOAK), the race
## suite three times over, the linearizability tests of real processes once more on the
## default (LAN) timing, 5,000 seeds of the simulation without -race, and one million
## reminders on three engines and on three nodes (TEMPEST_SOAK_REMINDERS, without -race)
soak:
	ulimit -n 65536 2>/dev/null || true; TEMPEST_SOAK=1 $(GO) test -race -count=3 -timeout 90m $(PKGS)
	TEMPEST_SOAK=1 TEMPEST_TEST_TIMING=lan $(GO) test -count=1 -timeout 45m -run '^TestCountersLinearizable' ./cli
	$(GO) test -count=1 -timeout 90m -run '^TestSimulation$$' . -sim.seeds=5000
	TEMPEST_SOAK_REMINDERS=1 $(GO) test -count=1 -v -timeout 60m -run TestMillionReminders ./reminders
	TEMPEST_SOAK_REMINDERS=1 $(GO) test -count=1 -v -timeout 90m -run TestMillionRemindersThreeNodes .

## bench: benchmarks with their in-run baselines (see docs/BENCHMARKS.md)
bench:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) $(PKGS)

## bench-peers: the same workloads on Tempest and on peer actor libraries
bench-peers:
	cd bench/peers && $(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) ./...

## bench-tracing: what tracing costs on a cross-node ask and tell, the build without tracing
## code (-tags tempest_notrace) against the default build's off, 0 %, 1 % and 100 % sampling,
## the two builds run one after the other ROUNDS times (docs/BENCHMARKS.md, "Tracing")
ROUNDS          ?= 3
TRACE_BENCHTIME ?= 3000x
bench-tracing:
	mkdir -p bin
	$(GO) test -c -o bin/notrace.test -tags tempest_notrace .
	$(GO) test -c -o bin/trace.test .
	@for i in $$(seq $(ROUNDS)); do \
	  for b in notrace trace; do \
	    ./bin/$$b.test -test.run '^$$' -test.bench '^BenchmarkTracing$$' -test.benchtime $(TRACE_BENCHTIME) -test.benchmem; \
	  done; \
	done | tee bin/bench-tracing.txt | awk -f bench/tracing.awk

## fuzz: run every fuzz target for FUZZTIME each
fuzz:
	@set -e; for pkg in $$($(GO) list $(PKGS)); do \
	  for t in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "== $$pkg $$t"; $(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; \
	done

## lint: formatting and vet
lint: vet
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "not gofmt-formatted:"; echo "$$out"; exit 1; fi

clean:
	rm -rf bin

## image: the tempest container image, FROM scratch with the static binary
IMAGE        ?= tempest
# Evaluated once: VERSION is re-evaluated at each use and may change
# (e.g. -dirty) while a target runs.
IMAGE_TAG    := $(VERSION)
COMPOSE      ?= $(shell docker compose version >/dev/null 2>&1 && echo 'docker compose' || echo docker-compose)
E2E_TIMEOUT  ?= 9m
E2E_FLAGS    ?=

.PHONY: image compose-up compose-down

image: build
	rm -rf bin/image && mkdir -p bin/image/empty
	cp $(BIN) bin/image/tempest
	docker build -q -f deploy/docker/Dockerfile --build-arg VERSION=$(IMAGE_TAG) -t $(IMAGE):$(IMAGE_TAG) -t $(IMAGE):latest bin/image

## compose-up: a three-node cluster in containers (deploy/compose, docs/deploy.md)
compose-up: image
	cd deploy/compose && TEMPEST_IMAGE=$(IMAGE):$(IMAGE_TAG) $(COMPOSE) up -d

## compose-down: stop and remove it (data volumes stay; `down -v` wipes them)
compose-down:
	cd deploy/compose && $(COMPOSE) down --remove-orphans

## netns-partition: rejoin after a partition on real processes in network namespaces
## (root; RUNS, CUT; deploy/netns/partition.sh, docs/BENCHMARKS.md)
netns-partition: build
	TEMPEST_BIN=$(BIN) deploy/netns/partition.sh

## e2e: fault tests against a throwaway compose cluster (bounded, cleans up)
e2e: image
	cd deploy/e2e && $(GO) run . -compose '$(COMPOSE)' -image $(IMAGE):$(IMAGE_TAG) -timeout $(E2E_TIMEOUT) $(E2E_FLAGS)
