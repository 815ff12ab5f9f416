# helix-dbos developer commands. `make` or `make help` lists them.
#
# Tests need PostgreSQL; scripts/test.sh provisions it (a Docker engine and a
# Postgres image on machines that lack them, see scripts/). Extra `go test`
# flags go through ARGS, e.g. `make test ARGS='-run TestContract -v'`.

SHELL := bash
.DEFAULT_GOAL := help

GOLANGCI_LINT_VERSION := v2.15.0
GOBIN := $(or $(shell go env GOBIN),$(shell go env GOPATH)/bin)
# An installed golangci-lint on PATH wins; otherwise the pinned one in GOBIN.
GOLANGCI_LINT := $(or $(shell command -v golangci-lint 2>/dev/null),$(GOBIN)/golangci-lint)

.PHONY: help test test-race stress soak vet lint bench

help: ## List the targets.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-10s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

test: ## Run every test against real Postgres (scripts/test.sh; ARGS= passes go test flags).
	scripts/test.sh $(ARGS)

test-race: ## Run every test with the race detector.
	scripts/test.sh -race $(ARGS)

stress: ## Hunt flaky tests: the suite 5x with -race, 5x more under CPU load (scripts/stress.sh; RUNS=, ARGS=).
	scripts/stress.sh -n $(or $(RUNS),5) -- $(ARGS)

soak: ## The long chaos run: 600 sessions over 10 min under kills, freezes and Postgres restarts (scripts/soak.sh; SESSIONS=, DURATION=).
	SESSIONS=$(or $(SESSIONS),600) DURATION=$(or $(DURATION),10m) scripts/soak.sh

vet: ## Run go vet.
	go vet ./...

lint: $(GOLANGCI_LINT) ## Run golangci-lint (.golangci.yaml); installs v2.15.0 if missing (a ~4 min build).
	$(GOLANGCI_LINT) run ./...

bench: ## Run the benchmarks (no tests) against real Postgres.
	scripts/test.sh -run '^$$' -bench . -benchmem $(ARGS)

$(GOBIN)/golangci-lint:
	@echo "==> installing golangci-lint $(GOLANGCI_LINT_VERSION) (a cold build takes about 4 minutes)"
	go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
