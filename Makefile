# AX's developer entry points. `make` lists them; `make test` is what CI runs.

GO ?= go
GOFMT ?= gofmt
# PKGS are the packages test, lint, fuzz and bench work on.
PKGS ?= ./...
# FUZZTIME is how long `make fuzz` runs each fuzz test.
FUZZTIME ?= 20s
# STATICCHECK_VERSION is the staticcheck module version `make lint` runs
# (v0.8.2 is the release of October 2026).
STATICCHECK_VERSION ?= v0.8.2
# WITHPG runs a command with TEST_DATABASE_URL set, starting a private
# PostgreSQL from the local installation unless it is already set.
WITHPG = $(GO) run ./internal/tools/withpg --

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

.PHONY: help dev build test lint fuzz bench bench-pipeline tidy

help: ## list the targets
	@awk 'BEGIN { FS = ":.*## " } /^[a-z-]+:.*## / { printf "  %-15s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)

dev: ## run every service in one process (ax dev)
	$(GO) run ./cmd/ax dev

build: ## build the ax binary into bin/ax
	$(GO) build -o bin/ax ./cmd/ax

test: ## run all tests with the race detector (private PostgreSQL unless TEST_DATABASE_URL is set)
	$(WITHPG) $(GO) test -race -count=1 -timeout 30m $(PKGS)

lint: ## check formatting (gofmt), go vet and staticcheck
	@unformatted=$$($(GOFMT) -l .); \
	if [ -n "$$unformatted" ]; then echo "gofmt would change these files (run gofmt -w on them):"; echo "$$unformatted"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) $(PKGS)

fuzz: ## run every Fuzz* test for FUZZTIME (20s) each
	@targets=$$($(GO) test -list '^Fuzz' $(PKGS) | \
		awk '/^Fuzz/ { names[n++] = $$1; next } /^(ok|\?)/ { for (i = 0; i < n; i++) print $$2 "," names[i]; n = 0 }'); \
	if [ -z "$$targets" ]; then echo "no fuzz tests found"; exit 0; fi; \
	for target in $$targets; do \
		pkg=$${target%,*}; name=$${target#*,}; \
		echo "fuzz $$pkg $$name for $(FUZZTIME)"; \
		$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) "$$pkg"; \
	done

bench: ## run every benchmark once (private PostgreSQL unless TEST_DATABASE_URL is set)
	$(WITHPG) $(GO) test -run '^$$' -bench . -benchtime 1x $(PKGS)

bench-pipeline: ## measure the whole pipeline: burst throughput and steady-load start latency
	$(WITHPG) $(GO) test -run '^$$' -bench Pipeline -benchtime 1x ./internal/e2e

tidy: ## go mod tidy, failing if it changed go.mod or go.sum
	@before=$$(cat go.mod go.sum | cksum); \
	$(GO) mod tidy; \
	if [ "$$before" != "$$(cat go.mod go.sum | cksum)" ]; then echo "go mod tidy changed go.mod or go.sum: review and commit the change"; exit 1; fi
