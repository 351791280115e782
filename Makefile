# meerkatd — `make help` lists the targets.

GO       ?= go
BIN      ?= bin/meerkatd
FUZZTIME ?= 3s
COUNT    ?= 6
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
LDFLAGS  := -X main.version=$(VERSION)
# The CPU profile make build optimises with (profile-guided optimisation;
# make pgo refreshes it). PGO=off builds without it.
PGO      ?= cmd/meerkatd/meerkatd.pgo
NATSBENCH ?= bin/natsbench
NATSSERVER ?= bin/nats-server
NATS_PORT ?= 4222
BENCHFLAGS ?=
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
# Where make install puts bin/meerkatd: ~/.local for a user, /usr/local for root.
PREFIX   ?= $(if $(filter 0,$(shell id -u)),/usr/local,$(HOME)/.local)

.PHONY: help build pgo install uninstall run test natstest nats-dev race alloc benchsmoke fuzz e2e bench benchquick lint clean

## help: list the targets
help:
	@sed -n 's/^## //p' $(MAKEFILE_LIST) | awk '{ i = index($$0, ": "); printf "%-14s %s\n", substr($$0, 1, i - 1), substr($$0, i + 2) }'

## build: build bin/meerkatd, optimised with the profile cmd/meerkatd/meerkatd.pgo (PGO=off builds without it)
build:
	$(GO) build -trimpath -pgo=$(PGO) -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/meerkatd

## pgo: refresh cmd/meerkatd/meerkatd.pgo from the CPU profiles of every process of a bench run (sequential and pipelined, over UDS and TCP), then build with it
pgo:
	$(GO) build -trimpath -pgo=off -o $(BIN) ./cmd/meerkatd
	@set -e; dir=$$(mktemp -d "$${TMPDIR:-/tmp}/meerkatd-pgo.XXXXXX"); trap 'rm -rf "$$dir"' EXIT; \
	MEERKATD_CPUPROFILE="$$dir/p-%p.prof" ./$(BIN) bench --only sequential,pipelined --transport uds,tcp --reps 1 --msgs 5000 > "$$dir/bench.out"; \
	$(GO) tool pprof -proto "$$dir"/p-*.prof > "$$dir/merged.pgo"; \
	$(GO) run ./internal/pgoclean "$$dir/merged.pgo" cmd/meerkatd/meerkatd.pgo
	$(MAKE) build

## install: build and copy meerkatd to $(PREFIX)/bin (PREFIX defaults to ~/.local, or /usr/local as root)
install: build
	install -d '$(DESTDIR)$(PREFIX)/bin'
	install -m 0755 '$(BIN)' '$(DESTDIR)$(PREFIX)/bin/meerkatd'

## uninstall: remove $(PREFIX)/bin/meerkatd
uninstall:
	rm -f '$(DESTDIR)$(PREFIX)/bin/meerkatd'

## run: build and start the daemon on its embedded defaults
run: build
	./$(BIN) run

## test: everything CI runs: vet, race tests, allocation budgets, benchmarks once, fuzz smoke, MCP e2e
test:
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 20m ./...
	$(MAKE) alloc benchsmoke
	$(MAKE) fuzz FUZZTIME=$(FUZZTIME)
	$(MAKE) e2e PGO=off
	$(MAKE) natstest

## natstest: the NATS comparison module's own tests (bench/nats is a separate Go module)
natstest:
	cd bench/nats && $(GO) vet ./... && $(GO) test -count=1 ./...

## nats-dev: build nats-server (from its Go module) and run it in the foreground with JetStream on 127.0.0.1 port NATS_PORT (default 4222), its store in a temporary directory removed when it stops (Ctrl-C)
nats-dev:
	$(GO) build -o $(NATSSERVER) github.com/nats-io/nats-server/v2
	@dir=$$(mktemp -d "$${TMPDIR:-/tmp}/meerkat-nats.XXXXXX") || exit 1; \
	trap 'rm -rf "$$dir"' EXIT; trap 'exit 130' INT; trap 'exit 143' TERM; \
	echo "nats-server on nats://127.0.0.1:$(NATS_PORT), JetStream in $$dir (Ctrl-C stops it and removes the directory)"; \
	./$(NATSSERVER) -a 127.0.0.1 -p $(NATS_PORT) -js -sd "$$dir"

## race: the test suite under the race detector only
race:
	$(GO) test -race -count=1 -timeout 20m ./...

## alloc: allocation and memory budgets (they run without -race, which adds allocations and memory of its own)
alloc:
	$(GO) test -count=1 -run 'Allocs|^TestInboxPagingMemory$$' ./...

## benchsmoke: every benchmark once, so none can rot
benchsmoke:
	$(GO) test -count=1 -run '^$$' -bench . -benchtime 1x ./...

## fuzz: run every fuzz target for FUZZTIME each (make fuzz FUZZTIME=5m); each package's fuzzing binary is built once for all its targets; new inputs are kept where go test -fuzz keeps them
fuzz:
	@set -e; bin=$$(mktemp -d "$${TMPDIR:-/tmp}/meerkatd-fuzz.XXXXXX"); \
	trap 'rm -rf "$$bin"' EXIT; trap 'exit 130' INT; trap 'exit 143' TERM; \
	cache="$$($(GO) env GOCACHE)/fuzz"; \
	for pkg in $$(grep -rl --include='*_test.go' '^func Fuzz' . | sed 's|/[^/]*$$||' | sort -u); do \
		$(GO) test -c -fuzz=. -o "$$bin/fuzz.test" "$$pkg"; \
		corpus="$$cache/$$($(GO) list "$$pkg")"; \
		for t in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' "$$pkg"/*_test.go); do \
			echo "fuzz $$pkg $$t ($(FUZZTIME))"; \
			run() { (cd "$$pkg" && "$$bin/fuzz.test" -test.run '^$$' -test.fuzz "^$$t\$$" -test.fuzztime $(FUZZTIME) \
				-test.fuzzcachedir "$$corpus" -test.timeout 20m) > "$$bin/log" 2>&1; }; \
			run || \
			{ grep -q 'context deadline exceeded' "$$bin/log" && ! grep -q 'Failing input written' "$$bin/log" && \
			  echo "  (the fuzzer timed out stopping a busy worker, no failing input: once more)" && run; } || \
			{ cat "$$bin/log"; exit 1; }; \
		done; \
	done

## e2e: build, then drive meerkatd mcp with the official MCP TypeScript clients, 1.x (2025-11-25) and 2.x (2026-07-28) (Node.js 20.10+, npm; mcpserver/e2e); two test files at a time
e2e: build
	npm ci --prefix mcpserver/e2e --no-audit --no-fund
	MEERKATD_BIN=$(abspath $(BIN)) node --test --test-concurrency=2 mcpserver/e2e/*.test.mjs

## bench: benchmarks COUNT times (ratios to ed25519 in BenchmarkRatios), then the full meerkatd bench suite (against NATS when bench/nats exists; BENCHFLAGS=--gate to fail on a missed target)
bench: build
	$(GO) test -run '^$$' -bench . -benchmem -count $(COUNT) ./...
	@if [ -f bench/nats/go.mod ]; then \
		echo "cd bench/nats && $(GO) build -o ../../$(NATSBENCH) ."; \
		(cd bench/nats && $(GO) build -o ../../$(NATSBENCH) .) || exit 1; \
		echo "./$(BIN) bench --nats $(NATSBENCH) $(BENCHFLAGS)"; \
		./$(BIN) bench --nats $(NATSBENCH) $(BENCHFLAGS); \
	else \
		echo "./$(BIN) bench $(BENCHFLAGS)"; \
		./$(BIN) bench $(BENCHFLAGS); \
	fi

## benchquick: smoke run of meerkatd bench, every scenario in seconds (its figures mean nothing)
benchquick: build
	./$(BIN) bench --quick $(BENCHFLAGS)

## lint: go vet and staticcheck
lint:
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

## clean: remove build output and test caches
clean:
	rm -rf bin
	$(GO) clean -testcache
