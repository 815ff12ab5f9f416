#!/usr/bin/env bash
# The project's test command: package tests and integration tests against
# real PostgreSQL, on a fresh machine too.
#
#   scripts/test.sh            # everything
#   scripts/test.sh -race      # extra flags go to `go test`
#
# Postgres for package tests comes from internal/pgprovision: HELIX_DATABASE_URL
# if set, else a container, else the local cluster (started if needed). The
# integration tests always use testcontainers, so this script first makes a
# Docker engine and a Postgres image available (scripts/docker-engine.sh,
# scripts/postgres-image.sh): the official postgres:16-alpine when it can be
# pulled, otherwise an equivalent image built from Debian packages.
# HELIX_SKIP_DOCKER=1 skips that (and then skips the integration tests, loudly).
# The browser tests (internal/browser and its users) need Chromium, which
# scripts/chromium.sh installs (Debian's chromium package) when missing;
# HELIX_SKIP_BROWSER=1 skips that and the browser tests, loudly.
# HELIX_TEST_JSONFILE=path also writes every test event there (go test -json),
# as scripts/stress.sh does to tell which tests failed. HELIX_TEST_PACKAGES
# narrows the packages (default ./...), as scripts/soak.sh does.
set -euo pipefail
cd "$(dirname "$0")/.."

phase() { printf '\n==> %s\n' "$*" >&2; }
t0=$(date +%s)

if [ "${HELIX_SKIP_DOCKER:-0}" = 1 ]; then
  phase "HELIX_SKIP_DOCKER=1: no Docker; integration tests will be SKIPPED"
  export HELIX_INTEGRATION_SKIP=1
else
  phase "Docker engine"
  scripts/docker-engine.sh
  if [ -z "${HELIX_TEST_PG_IMAGE:-}" ]; then
    if docker image inspect postgres:16-alpine >/dev/null 2>&1 ||
       timeout 120 docker pull -q postgres:16-alpine >/dev/null 2>&1; then
      HELIX_TEST_PG_IMAGE=postgres:16-alpine
    else
      HELIX_TEST_PG_IMAGE=helix-dbos/postgres:15-bookworm
    fi
  fi
  export HELIX_TEST_PG_IMAGE
  phase "Postgres image $HELIX_TEST_PG_IMAGE"
  scripts/postgres-image.sh
  # No registry here for testcontainers' reaper image: containers are
  # terminated by the tests themselves.
  export TESTCONTAINERS_RYUK_DISABLED=true
  # Inside a container (/.dockerenv) testcontainers would dial the default
  # gateway instead of the published ports on this host.
  if [ -f /.dockerenv ]; then export TESTCONTAINERS_HOST_OVERRIDE=localhost; fi
fi

tc=$(date +%s)
if [ "${HELIX_SKIP_BROWSER:-0}" = 1 ]; then
  phase "HELIX_SKIP_BROWSER=1: no Chromium; browser tests will be SKIPPED"
  export HELIX_BROWSER_SKIP=1
else
  phase "Chromium"
  scripts/chromium.sh
fi
t1=$(date +%s)

packages=${HELIX_TEST_PACKAGES:-./...}
phase "go test $packages $*"
status=0
jsonfile=()
if [ -n "${HELIX_TEST_JSONFILE:-}" ]; then jsonfile=(--jsonfile "$HELIX_TEST_JSONFILE"); fi
go tool -modfile=tools/go.mod gotestsum --format testname --format-hide-empty-pkg "${jsonfile[@]}" -- -count=1 "$@" $packages || status=$?
t2=$(date +%s)

phase "summary"
printf 'provisioning: %ss (Docker and Postgres %ss, Chromium %ss), tests: %ss, total: %ss, exit status: %s\n' \
  "$((t1 - t0))" "$((tc - t0))" "$((t1 - tc))" "$((t2 - t1))" "$((t2 - t0))" "$status" >&2
exit "$status"
