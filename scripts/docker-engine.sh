#!/usr/bin/env bash
# docker-engine.sh makes a Docker engine reachable, for testcontainers.
#
# If `docker info` already answers (Docker Desktop, a system dockerd, a
# remote DOCKER_HOST), it does nothing. Otherwise, as root on Debian, it
# installs docker.io (plus debootstrap and iptables, which the engine and
# scripts/postgres-image.sh need) when missing, starts dockerd in the
# background (log: $HELIX_DOCKERD_LOG, default /var/log/helix-dockerd.log)
# and waits until the engine answers. Idempotent; near-instant when the engine
# is already up. See docs/testcontainers.md for why these machines need it.
set -euo pipefail

log() { printf '==> docker-engine: %s\n' "$*" >&2; }
die() { printf '==> docker-engine: ERROR: %s\n' "$*" >&2; exit 1; }

if docker info >/dev/null 2>&1; then
	log "engine reachable ($(docker version --format '{{.Server.Version}}' 2>/dev/null || echo '?'))"
	exit 0
fi

[ "$(id -u)" -eq 0 ] || die "no Docker engine reachable and not root: start Docker yourself, or run as root to install Debian's docker.io"
command -v apt-get >/dev/null || die "no Docker engine reachable and no apt-get: install and start Docker"

missing=()
command -v dockerd >/dev/null || missing+=(docker.io)
command -v debootstrap >/dev/null || missing+=(debootstrap)
command -v iptables >/dev/null || missing+=(iptables)
if [ ${#missing[@]} -gt 0 ]; then
	log "installing ${missing[*]} with apt"
	t0=$SECONDS
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
	log "installed in $((SECONDS - t0))s"
fi

dockerd_log=${HELIX_DOCKERD_LOG:-/var/log/helix-dockerd.log}
# A dockerd killed without cleanup leaves its pid file behind, and a new one
# refuses to start while the file names a live-looking pid.
if [ -f /var/run/docker.pid ] && ! kill -0 "$(cat /var/run/docker.pid)" 2>/dev/null; then
	rm -f /var/run/docker.pid
fi
if ! pgrep -x dockerd >/dev/null; then
	log "starting dockerd (log: $dockerd_log)"
	# setsid + all descriptors redirected: the daemon outlives this script and
	# holds no pipe of the caller open (a `scripts/test.sh | tee` must end).
	setsid dockerd >"$dockerd_log" 2>&1 </dev/null &
fi

t0=$SECONDS
until docker info >/dev/null 2>&1; do
	if [ $((SECONDS - t0)) -ge 60 ]; then
		tail -n 20 "$dockerd_log" >&2 || true
		die "dockerd did not answer within 60s (log above: $dockerd_log)"
	fi
	sleep 0.2
done
log "engine ready ($(docker version --format '{{.Server.Version}}'))"
