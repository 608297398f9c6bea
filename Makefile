# AX's developer entry points. `make` lists them; `make test` is what CI runs.

GO ?= go
GOFMT ?= gofmt
# PKGS are the packages test, lint, fuzz and bench work on.
PKGS ?= ./...
# ARGS are the flags `make dev` gives ax dev, e.g. ARGS="--http 127.0.0.1:8081".
ARGS ?=
# FUZZTIME is how long `make fuzz` runs each fuzz test.
FUZZTIME ?= 20s
# FUZZ_TOOLCHAIN is the Go toolchain `make fuzz` fuzzes with. Go 1.26's fuzz
# coordinator can fail a target with a bare "context deadline exceeded" when
# -fuzztime runs out (go.dev/issue/75804, fixed in Go 1.27); the go command
# takes this version from the module proxy once per machine.
FUZZ_TOOLCHAIN ?= go1.27.3
# STATICCHECK_VERSION is the staticcheck module version `make lint` runs
# (v0.8.2 is the release of October 2026).
STATICCHECK_VERSION ?= v0.8.2
# WITHPG runs a command with TEST_DATABASE_URL set, starting a private
# PostgreSQL from the local installation unless it is already set.
WITHPG = $(GO) run ./internal/tools/withpg --
# CHROMIUM is the browser the console's browser test (internal/e2e) drives;
# the test reads AX_CHROMIUM too.
CHROMIUM ?= $(or $(AX_CHROMIUM),/usr/bin/chromium)
# PROMETHEUS is the Prometheus the dashboard test (internal/e2e) evaluates
# the Grafana dashboard's queries in; the test reads AX_PROMETHEUS too.
PROMETHEUS ?= $(or $(AX_PROMETHEUS),/usr/bin/prometheus)
# AX_BENCH_FSYNC is the durability the benchmarks' private PostgreSQL runs
# with: on (production, the default) or off. The benchmarks print what the
# server reports either way.
AX_BENCH_FSYNC ?= on
# BENCHPG is WITHPG for the benchmarks: AX_BENCH_FSYNC, pg_stat_statements
# preloaded.
BENCHPG = $(GO) run ./internal/tools/withpg -fsync $(AX_BENCH_FSYNC) -set shared_preload_libraries=pg_stat_statements --

# DRILL_ARGS are the settings `make drill` gives ax drill system: every
# scenario for DRILL_DURATION each at DRILL_RATE firings a second, with the
# lease TTL and fsync on.
DRILL_DURATION ?= 1m
DRILL_RATE ?= 20
DRILL_ARGS ?= --duration $(DRILL_DURATION) --rate $(DRILL_RATE) --lease-ttl 5s --fsync

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

.PHONY: help dev build test test-short test-cluster test-dashboard chromium mariadb prometheus lint fuzz bench bench-pipeline bench-burst bench-profile bench-peers bench-history drill tidy

help: ## list the targets
	@awk 'BEGIN { FS = ":.*## " } /^[a-z-]+:.*## / { printf "  %-15s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)

# dev runs the binary it builds, not go run: go run exits 1 after an
# interrupt however its program ended, so a clean Ctrl-C read as
# "make: *** Error 1".
dev: build ## run every service in one process (ax dev, built into bin/ax; flags in ARGS="--http 127.0.0.1:8081 ...")
	bin/ax dev $(ARGS)

build: ## build the ax binary into bin/ax
	$(GO) build -o bin/ax ./cmd/ax

test: chromium mariadb prometheus ## run all tests with the race detector (private PostgreSQL unless TEST_DATABASE_URL is set)
	AX_CHROMIUM=$(CHROMIUM) AX_PROMETHEUS=$(PROMETHEUS) $(WITHPG) $(GO) test -race -count=1 -timeout 30m $(PKGS)

test-short: ## the quick tests, go test -short: need only Go and PostgreSQL (no browser, Node, helm or NATS cluster tests)
	$(WITHPG) $(GO) test -short -race -count=1 -timeout 30m $(PKGS)

test-cluster: ## the pipeline on a three-node NATS cluster through two node restarts, verbose (also in make test), and nats-server's lost limit markers (a server bug, not in make test)
	AX_TEST_CLUSTER=1 $(GO) test -race -count=1 -v -run ClusterKeepsLimitMarkers ./internal/natsembed/
	$(WITHPG) $(GO) test -race -count=1 -v -run NATSNodeRestarts ./internal/e2e/

test-dashboard: prometheus ## every query of the Grafana dashboard against PostgreSQL and JetStream on a three-node cluster, in Debian's Prometheus, verbose (also in make test)
	AX_PROMETHEUS=$(PROMETHEUS) $(WITHPG) $(GO) test -race -count=1 -v -run DashboardAgainstTheTruth ./internal/e2e/

chromium: ## make sure the browser test has Chromium: installs Debian's chromium as root, else says how
	@case "$(PKGS)" in *...*|*e2e*) ;; *) exit 0 ;; esac; \
	if [ -x "$(CHROMIUM)" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing Debian's chromium for the browser test (internal/e2e/browser_test.go)"; \
		internal/tools/apt-install.sh chromium; \
	else \
		echo "make test needs Chromium at $(CHROMIUM) for the browser test: run 'sudo apt-get install -y chromium' (or set AX_CHROMIUM to a Chromium elsewhere)"; \
		exit 1; \
	fi

mariadb: ## make sure the XXL-JOB import and shadow tests have MariaDB: installs Debian's mariadb-server as root, else says how
	@case "$(PKGS)" in *...*|*importer*|*cmd/ax*) ;; *) exit 0 ;; esac; \
	if command -v mariadbd >/dev/null || [ -x /usr/sbin/mariadbd ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing Debian's mariadb-server for the XXL-JOB import test (importer/xxljob_test.go)"; \
		internal/tools/apt-install.sh --no-install-recommends mariadb-server; \
	else \
		echo "make test needs MariaDB's server for the XXL-JOB import test: run 'sudo apt-get install -y mariadb-server'"; \
		exit 1; \
	fi

prometheus: ## make sure the dashboard test has Prometheus: installs Debian's prometheus as root, else says how
	@case "$(PKGS)" in *...*|*e2e*) ;; *) exit 0 ;; esac; \
	if [ -x "$(PROMETHEUS)" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing Debian's prometheus for the dashboard test (internal/e2e/dashboard_checks_test.go)"; \
		internal/tools/apt-install.sh --no-install-recommends prometheus; \
	else \
		echo "make test needs Prometheus at $(PROMETHEUS) for the dashboard test: run 'sudo apt-get install -y prometheus' (or set AX_PROMETHEUS to a Prometheus elsewhere)"; \
		exit 1; \
	fi

helm: ## helm lint and helm template the chart deploy/helm/ax and check what it renders (make test runs these too)
	$(GO) test -count=1 ./internal/deploy

lint: ## check formatting (gofmt), go vet and staticcheck
	@unformatted=$$($(GOFMT) -l .); \
	if [ -n "$$unformatted" ]; then echo "gofmt would change these files (run gofmt -w on them):"; echo "$$unformatted"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) $(PKGS)

fuzz: ## run every Fuzz* test for FUZZTIME (20s) each (private PostgreSQL unless TEST_DATABASE_URL is set)
	@if [ -z "$${TEST_DATABASE_URL:-}" ]; then exec $(WITHPG) $(MAKE) --no-print-directory fuzz; fi; \
	export GOTOOLCHAIN=$(FUZZ_TOOLCHAIN); $(GO) version; \
	targets=$$($(GO) test -list '^Fuzz' $(PKGS) | \
		awk '/^Fuzz/ { names[n++] = $$1; next } /^(ok|\?)/ { for (i = 0; i < n; i++) print $$2 "," names[i]; n = 0 }'); \
	if [ -z "$$targets" ]; then echo "no fuzz tests found"; exit 0; fi; \
	for target in $$targets; do \
		pkg=$${target%,*}; name=$${target#*,}; \
		echo "fuzz $$pkg $$name for $(FUZZTIME)"; \
		$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) "$$pkg"; \
	done

bench: ## run every benchmark once (private PostgreSQL with fsync on unless TEST_DATABASE_URL is set)
	$(BENCHPG) $(GO) test -run '^$$' -bench . -benchtime 1x $(PKGS)

bench-pipeline: ## measure the whole pipeline: burst throughput and steady-load start latency (AX_BENCH_FSYNC=on)
	$(BENCHPG) $(GO) test -run '^$$' -bench Pipeline -benchtime 1x ./internal/e2e

bench-burst: ## the burst alone, with the production lease TTL and with 2 s: outcomes, deadlocks, costs (AX_BENCH_N=20000)
	$(BENCHPG) $(GO) test -run '^$$' -bench PipelineThroughput -benchtime 1x ./internal/e2e
	AX_BENCH_LEASE_TTL=2s $(BENCHPG) $(GO) test -run '^$$' -bench PipelineThroughput -benchtime 1x ./internal/e2e

bench-history: ## with 10,000,000 instances in the history (AX_BENCH_HISTORY): the mover's rate, list latency by filter, burst and steady load
	AX_BENCH_HISTORY=$${AX_BENCH_HISTORY:-10000000} $(BENCHPG) $(GO) test -run '^$$' -bench 'HistoryMoverAndList|PipelineHistory' -benchtime 1x -timeout 3h ./internal/e2e

bench-profile: ## CPU profile of the burst by service, its costliest functions, and its allocations (AX_BENCH_N=20000)
	@mkdir -p bin
	$(GO) test -c -o bin/e2e.test ./internal/e2e
	$(BENCHPG) env AX_BENCH_CPUPROFILE=bin/burst.pprof AX_BENCH_MEMPROFILE=bin/burst.allocs bin/e2e.test -test.run '^$$' -test.bench PipelineThroughput -test.benchtime 1x
	$(GO) tool pprof -tags bin/burst.pprof 2>/dev/null | sed -n '/service/,/^$$/p'
	@for svc in dispatcher executor nats-server; do \
		echo "== $$svc: top functions by cumulative CPU (of the whole profile)"; \
		$(GO) tool pprof -top -cum -nodecount 25 -tagfocus service=$$svc bin/e2e.test bin/burst.pprof 2>/dev/null | sed -n '/flat%/,$$p'; \
	done
	@echo "== allocations of the burst by function (objects allocated, sampled)"
	@$(GO) tool pprof -top -sample_index=alloc_objects -nodecount 30 -base bin/burst.allocs.base bin/e2e.test bin/burst.allocs 2>/dev/null | sed -n '/flat%/,$$p'

bench-peers: ## AX's burst (alone and with the auditor) and steady benchmarks and River's, round-robin on one PostgreSQL (fsync on), 3 rounds: medians and ratios
	cd bench && $(GO) run ./peers -rounds 3

drill: build ## ax drill system: every fault scenario against a sandbox of its own, then the table (DRILL_DURATION=1m each, DRILL_RATE=20)
	bin/ax drill system $(DRILL_ARGS)

tidy: ## go mod tidy, failing if it changed go.mod or go.sum
	@before=$$(cat go.mod go.sum | cksum); \
	$(GO) mod tidy; \
	if [ "$$before" != "$$(cat go.mod go.sum | cksum)" ]; then echo "go mod tidy changed go.mod or go.sum: review and commit the change"; exit 1; fi
