# The two commands of the README: `make run` and `make test`. Both first run
# .ci/services, which installs or starts what is missing (PostgreSQL, Redis, the
# sandbox runtime) and fails loudly when it cannot.
SHELL := /bin/bash
export PATH := $(PATH):/usr/local/go/bin
GO ?= go

.PHONY: run test test-e2e test-race test-cgroup2 test-container fuzz services build vet rules bench soak

services:
	@./.ci/services

## VERSION is what `sandchat --version` and sandchat_build_info say: the nearest release tag (v…) and
## the commits since (or the commit alone), -dirty when the work tree has changes.
VERSION ?= $(shell git describe --tags --match 'v[0-9]*' --always --dirty 2>/dev/null || echo devel)

build:
	$(GO) build -ldflags '-X main.version=$(VERSION)' -o bin/sandchat ./cmd/sandchat

## run: the server with its defaults on http://127.0.0.1:8080, printing a one-time sign-in link
## for the admin and an admin API token.
run: services build
	@mkdir -p .sandchat
	./bin/sandchat serve --admin-token-file .sandchat/admin-token

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...

## rules: the shipped Prometheus alerts pass promtool's checks and their own tests
## (promtool comes with Debian's prometheus package, which .ci/services installs).
rules:
	@command -v promtool >/dev/null || { echo "promtool is missing: ./.ci/services installs it (Debian's prometheus package)" >&2; exit 1; }
	promtool check rules deploy/prometheus/alerts.yml
	promtool test rules deploy/prometheus/alerts_test.yml

## test: the whole suite against real PostgreSQL, Redis and Deno/Pyodide, in four parts
## run at once by .ci/test (each spends most of its time waiting on processes): test-e2e,
## test-race then fuzz, test-cgroup2 (where its VM is present; always in CI) and
## test-container (where podman can run; always in CI).
RACE_PKGS ?= . ./sandbox/... ./frontend-api/... ./agents/... ./conversations/... ./toolkits/... ./migrations/...
test: services vet rules
	@./.ci/test

## test-e2e: every package outside RACE_PKGS (cmd/sandchat: end-to-end and browser tests that
## drive whole servers), without the race detector.
test-e2e: services
	$(GO) test -count=1 -timeout 30m $$($(GO) list ./... | grep -vxF -f <($(GO) list $(RACE_PKGS)))

## test-race: RACE_PKGS alone, under the race detector; four tests at once where a test
## allows it (the sandbox tests that own their engine wait on processes more than they compute).
test-race: services
	$(GO) test -race -count=1 -timeout 30m -parallel 4 $(RACE_PKGS)

## fuzz: every fuzz target of FUZZ_PKGS (the readers of hostile input: upload and file
## names, package requirements and the index's answers, tables) run for FUZZTIME past its
## seed corpus (testdata/fuzz, which go test runs too), on one core, from a corpus cache
## of its own (so each run costs the same), without minimizing: a regression in a reader
## is caught. A failing input is written to the package's testdata/fuzz: add it with the
## fix. Longer, with go test's own cache: go test -fuzz FuzzX -fuzztime 5m ./pkg.
FUZZ_PKGS ?= . ./sandbox/internal/pkgs ./toolkits/tables
FUZZTIME ?= 2s
fuzz:
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	for pkg in $(FUZZ_PKGS); do \
		$(GO) test -c -fuzz . -o "$$tmp/fuzz.test" $$pkg || exit 1; \
		for f in $$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $$pkg/*_test.go | cut -c6-); do \
			out=$$(cd $$pkg && "$$tmp/fuzz.test" -test.run '^$$' -test.fuzz "^$$f\$$" -test.fuzztime $(FUZZTIME) \
				-test.fuzzminimizetime 0 -test.parallel 1 -test.fuzzcachedir "$$tmp/cache" 2>&1) || \
				{ echo "$$out"; echo "make fuzz: $$f ($$pkg) failed"; exit 1; }; \
		done; \
	done && echo "make fuzz: each target ran $(FUZZTIME)"

## test-cgroup2: the confinement tests and doctor on a cgroup-v2-only Linux booted on this
## machine (../shared/cgroup2-vm; root).
test-cgroup2: services
	@./.ci/cgroup2

## test-container: the image built from the Dockerfile with podman on bases made with
## mmdebstrap, run as docker-compose.yml and the Kubernetes example run it (root).
test-container: services
	@./.ci/container

## bench: the sandbox engine's figures (see docs/sandbox.md).
bench: services build
	./bin/sandchat bench

## soak: TestSoak for SOAK (10m by default): two nodes on one database and Redis, one killed
## and started again, cells cancelled while their sessions restore; every cell checked
## against its record (nothing lost, nothing applied twice).
SOAK ?= 10m
soak: services
	SANDCHAT_SOAK=$(SOAK) $(GO) test -count=1 -timeout 90m -run '^TestSoak$$' -v ./cmd/sandchat
