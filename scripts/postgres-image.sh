#!/usr/bin/env bash
# Makes the Postgres image for testcontainers available locally, without a
# container registry: if ${HELIX_TEST_PG_IMAGE} (default
# helix-dbos/postgres:15-bookworm) is not present, load it from the cache
# tarball, or build it from Debian packages with debootstrap (the recipe of
# shared/docs/testcontainers.md) and cache it.
#
# The image behaves like the official postgres image for testcontainers'
# postgres module: POSTGRES_USER / POSTGRES_PASSWORD / POSTGRES_DB,
# /docker-entrypoint-initdb.d, and "ready to accept connections" logged twice.
# Needs a reachable Docker engine (scripts/docker-engine.sh) and root.
set -euo pipefail

image=${HELIX_TEST_PG_IMAGE:-helix-dbos/postgres:15-bookworm}
cache_dir=${XDG_CACHE_HOME:-$HOME/.cache}/helix-dbos
cache=$cache_dir/$(printf '%s' "$image" | tr '/:' '__').tar.gz

log() { printf '[postgres-image] %s\n' "$*" >&2; }

if docker image inspect "$image" >/dev/null 2>&1; then
  log "$image present"
  exit 0
fi
case "$image" in
  helix-dbos/*) ;; # built below
  *)
    log "pulling $image"
    docker pull -q "$image" >/dev/null
    exit 0 ;;
esac
if [ -s "$cache" ]; then
  start=$(date +%s)
  if gunzip -c "$cache" | docker load >/dev/null && docker image inspect "$image" >/dev/null 2>&1; then
    log "$image loaded from $cache in $(( $(date +%s) - start ))s"
    exit 0
  fi
  log "cache $cache is unusable; rebuilding"
fi

# The Debian mirror apt already uses (never a hard-coded host).
mirror=""
for f in /etc/apt/sources.list.d/*.sources; do
  [ -f "$f" ] || continue
  mirror=$(awk '/^URIs:/ {print $2; exit}' "$f")
  [ -n "$mirror" ] && break
done
if [ -z "$mirror" ] && [ -f /etc/apt/sources.list ]; then
  mirror=$(awk '$1 == "deb" {for (i = 2; i <= NF; i++) if ($i ~ /^https?:/) {print $i; exit}}' /etc/apt/sources.list)
fi
if [ -z "$mirror" ]; then
  log "cannot find the Debian mirror in /etc/apt/sources.list(.d)"
  exit 1
fi
suite=${HELIX_PG_IMAGE_SUITE:-bookworm}
pgver=${HELIX_PG_IMAGE_VERSION:-15}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rootfs=$work/rootfs
log "building $image: debootstrap $suite from $mirror (about a minute)"
start=$(date +%s)
debootstrap --variant=minbase --include="postgresql-$pgver,util-linux" "$suite" "$rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 || {
  log "debootstrap failed; last lines:"; tail -n 30 "$work/debootstrap.log" >&2; exit 1; }

# Trim what a database server does not need, and the cluster the package made.
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* \
  "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* \
  "$rootfs"/var/lib/postgresql/"$pgver" "$rootfs"/etc/postgresql/"$pgver"
find "$rootfs"/usr/share/locale -mindepth 1 -maxdepth 1 ! -name 'en*' -exec rm -rf {} + 2>/dev/null || true
mkdir -p "$rootfs"/docker-entrypoint-initdb.d "$rootfs"/var/run/postgresql
chroot "$rootfs" chown postgres:postgres /var/run/postgresql

cat >"$rootfs"/usr/local/bin/docker-entrypoint.sh <<'ENTRY'
#!/bin/bash
# A minimal entrypoint compatible with the official postgres image.
set -euo pipefail
export PGDATA=${PGDATA:-/var/lib/postgresql/data}
user=${POSTGRES_USER:-postgres}
db=${POSTGRES_DB:-$user}
as_pg() { setpriv --reuid=postgres --regid=postgres --init-groups "$@"; }
if [ "${1:-postgres}" = postgres ]; then
  shift || true
  mkdir -p "$PGDATA" /var/run/postgresql
  chown -R postgres:postgres "$PGDATA" /var/run/postgresql
  chmod 700 "$PGDATA"
  if [ ! -s "$PGDATA/PG_VERSION" ]; then
    pwfile=$(mktemp)
    printf '%s\n' "${POSTGRES_PASSWORD:-postgres}" >"$pwfile"
    chown postgres "$pwfile"
    as_pg initdb -D "$PGDATA" -U "$user" --pwfile="$pwfile" -A scram-sha-256 --auth-local=trust >/dev/null
    rm -f "$pwfile"
    printf "listen_addresses = '*'\n" >>"$PGDATA/postgresql.conf"
    printf 'host all all all scram-sha-256\n' >>"$PGDATA/pg_hba.conf"
    # Temporary socket-only server for the init scripts.
    as_pg pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start
    if [ "$db" != postgres ]; then
      as_pg psql -v ON_ERROR_STOP=1 -U "$user" -d postgres -c "CREATE DATABASE \"$db\"" >/dev/null
    fi
    for f in /docker-entrypoint-initdb.d/*; do
      case "$f" in
        *.sh) . "$f" ;;
        *.sql) as_pg psql -v ON_ERROR_STOP=1 -U "$user" -d "$db" -f "$f" ;;
        *.sql.gz) gunzip -c "$f" | as_pg psql -v ON_ERROR_STOP=1 -U "$user" -d "$db" ;;
      esac
    done
    as_pg pg_ctl -D "$PGDATA" -m fast -w stop
  fi
  exec setpriv --reuid=postgres --regid=postgres --init-groups postgres -D "$PGDATA" "$@"
fi
exec "$@"
ENTRY
chmod +x "$rootfs"/usr/local/bin/docker-entrypoint.sh

tar -C "$rootfs" -c . | docker import \
  -c "ENV PATH=/usr/lib/postgresql/$pgver/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
  -c 'ENV PGDATA=/var/lib/postgresql/data' \
  -c 'ENTRYPOINT ["/usr/local/bin/docker-entrypoint.sh"]' \
  -c 'CMD ["postgres"]' \
  -c 'EXPOSE 5432' \
  - "$image" >/dev/null
log "built $image in $(( $(date +%s) - start ))s"

mkdir -p "$cache_dir"
docker save "$image" | gzip -1 >"$cache.tmp" && mv "$cache.tmp" "$cache"
log "cached at $cache ($(du -h "$cache" | cut -f1))"
