# The two commands of the README: `make run` and `make test`. Both first run
# .ci/services, which installs or starts what is missing (PostgreSQL, Redis, the
# sandbox runtime) and fails loudly when it cannot.
SHELL := /bin/bash
export PATH := $(PATH):/usr/local/go/bin
GO ?= go

.PHONY: run test test-cgroup2 services build vet bench

services:
	@./.ci/services

build:
	$(GO) build -o bin/sandchat ./cmd/sandchat

## run: the server with its defaults on http://127.0.0.1:8080, printing an admin token.
run: services build
	@mkdir -p .sandchat
	./bin/sandchat serve --admin-token-file .sandchat/admin-token

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...

## test: the whole suite against real PostgreSQL, Redis and Deno/Pyodide.
test: services vet
	$(GO) test -count=1 -timeout 30m ./...
	@./.ci/cgroup2 --if-available

## test-cgroup2: the confinement tests and doctor on a cgroup-v2-only Linux booted on this
## machine (../shared/cgroup2-vm; root). `make test` ends with it where the VM is there
## (always in CI).
test-cgroup2: services
	@./.ci/cgroup2

## bench: the sandbox engine's figures (see docs/sandbox.md).
bench: services build
	./bin/sandchat bench
