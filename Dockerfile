# syntax=docker/dockerfile:1
# sandchat with its Python sandbox (Deno + Pyodide).
#   docker build --build-arg VERSION=$(git describe --tags --match 'v[0-9]*' --always --dirty) -t sandchat .
#   (or: docker compose up --build, Postgres + Redis too; SANDCHAT_VERSION gives the version)
# The image needs Postgres and Redis: SANDCHAT_DATABASE_URL, SANDCHAT_REDIS_URL.

# --- 1. the Go binary -------------------------------------------------------------------
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
# What `sandchat --version` and sandchat_build_info report (.git stays out of the context).
ARG VERSION=devel
# No cgo anywhere in the tree: a static binary that runs on any base image.
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags="-s -w -X main.version=${VERSION}" -o /out/sandchat ./cmd/sandchat

# --- 2. the sandbox runtime: the Deno and Pyodide pinned by the lock file -----------------
FROM node:20-bookworm-slim AS runtime
WORKDIR /runtime
COPY sandbox/runtime/package.json sandbox/runtime/package-lock.json ./
# npm ci first. Why the fallback: npm ci refuses a lock that lacks an optional package the
# registry serves (the committed lock lists every platform's @deno package, but a mirror
# may serve fewer; .ci/services falls back the same way). npm install still takes every
# locked version and hash, and resolves this platform's Deno binary (exact version,
# pinned by the deno package). The checks below prove the result: the binary must be the
# Deno and the package the Pyodide that package.json pins.
# @deno/* is dropped: its binary is the one postinstall put at node_modules/deno/deno.
RUN --mount=type=cache,target=/root/.npm \
    { npm ci --omit=dev --no-audit --no-fund \
      || npm install --omit=dev --no-audit --no-fund; } \
 && if [ ! -x node_modules/deno/deno ]; then cp node_modules/@deno/*/deno node_modules/deno/deno; fi \
 && rm -rf node_modules/@deno node_modules/.bin \
 && want() { node -p "require('./package.json').dependencies['$1']"; } \
 && test "$(node_modules/deno/deno --version | head -n1 | cut -d' ' -f2)" = "$(want deno)" \
 && test "$(node -p "require('./node_modules/pyodide/package.json').version")" = "$(want pyodide)" \
 && test -f node_modules/pyodide/pyodide.mjs

# --- 3. the image -------------------------------------------------------------------------
FROM debian:bookworm-slim
# ca-certificates: TLS to the LLM provider and to a Pyodide package CDN.
# bubblewrap: each Python session runs in namespaces of its own (see docs/sandbox.md).
# Two users: sandchat runs the server, sandbox runs the sessions' processes.
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates bubblewrap \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --user-group --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin sandchat \
 && useradd --system --uid 10002 --user-group --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin sandbox
COPY --from=build /out/sandchat /usr/local/bin/sandchat
# Owned by root, so the app (and Python through Deno) can read the runtime but not alter it.
COPY --from=runtime /runtime/node_modules /opt/sandchat/runtime/node_modules
# The whole runtime directory (.dockerignore keeps node_modules out), so that every module
# of the control thread and the Worker (worker/) comes along.
COPY sandbox/runtime/ /opt/sandchat/runtime/
# Locate would not find the runtime from /usr/local/bin, so name it; the Deno binary and
# Pyodide are then found in its node_modules. Deno's cache goes to a temp dir under /tmp.
ENV SANDCHAT_ADDR=0.0.0.0:8080 \
    SANDCHAT_SANDBOX_RUNTIME_DIR=/opt/sandchat/runtime \
    SANDCHAT_SANDBOX_USER=sandbox
# The server runs as sandchat. A cgroup per session (the kernel's memory cap) needs a
# writable cgroup subtree of the container's own, which only root in the container
# writes: docker-compose.yml and deploy/kubernetes/ run the app as root with only the
# capabilities and syscalls that needs (no --privileged), and the server starts every
# session process as the unprivileged user sandbox. docs/deploying.md says what each
# runtime must grant. Elsewhere, run as sandchat with SANDCHAT_SANDBOX_ISOLATION=process
# (Deno permissions only).
USER 10001:10001
EXPOSE 8080
# /healthz over bash's /dev/tcp, so the image needs no curl; the port follows SANDCHAT_ADDR.
HEALTHCHECK --interval=15s --timeout=3s --start-period=20s --retries=3 \
  CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/${SANDCHAT_ADDR##*:} && printf 'GET /healthz HTTP/1.0\\r\\nHost: localhost\\r\\n\\r\\n' >&3 && head -n1 <&3 | grep -q ' 200 '"]
ENTRYPOINT ["sandchat"]
CMD ["serve"]
