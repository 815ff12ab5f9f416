#!/usr/bin/env bash
# chromium.sh makes a headless-capable Chromium available for the browser
# tests (internal/browser).
#
# If the Chromium the tests will use answers `--version` (HELIX_CHROMIUM
# when set, else /usr/bin/chromium), it prints the version and does nothing
# else. Otherwise it installs Debian's `chromium` package with apt-get (as
# root, or through sudo), running `apt-get update` only when the install
# fails without it, and fails with what to install and how when it cannot.
# Idempotent; near-instant when Chromium is there.
#
# HELIX_CHROMIUM names another Chromium or Chrome executable; this script
# never installs one at that path: it fails when the named one does not
# answer, since installing Debian's package would not change what the tests
# run.
set -euo pipefail

log() { printf '==> chromium: %s\n' "$*" >&2; }
die() { printf '==> chromium: ERROR: %s\n' "$*" >&2; exit 1; }

debian=/usr/bin/chromium
exe=${HELIX_CHROMIUM:-$debian}

# usable reports whether the executable answers --version, which starts no
# browser and needs no network, display or profile.
usable() { [ -x "$1" ] && "$1" --version 2>/dev/null | grep -q .; }

if usable "$exe"; then
	log "$("$exe" --version 2>/dev/null) at $exe"
	exit 0
fi

if [ -n "${HELIX_CHROMIUM:-}" ]; then
	die "HELIX_CHROMIUM=$HELIX_CHROMIUM is not a Chromium that runs (\`$HELIX_CHROMIUM --version\` failed). Point it at a working Chromium or Chrome, or unset it to use Debian's $debian (this script installs it)."
fi

how="install Debian's chromium package yourself (\`apt-get install chromium\` as root), or set HELIX_CHROMIUM to a Chromium or Chrome executable"
command -v apt-get >/dev/null || die "no Chromium at $debian and no apt-get on this machine: $how"
sudo=()
if [ "$(id -u)" -ne 0 ]; then
	command -v sudo >/dev/null || die "no Chromium at $debian, and installing it needs root: $how"
	sudo=(sudo)
fi

export DEBIAN_FRONTEND=noninteractive
out=$(mktemp)
trap 'rm -f "$out"' EXIT

# run_apt runs apt-get, keeping its whole output in $out and showing apt's
# milestones (the size, the download, chromium's own setup) as progress.
run_apt() {
	local status
	set +e
	"${sudo[@]}" apt-get "$@" 2>&1 | tee "$out" |
		grep --line-buffered -E '^(Need to get|Fetched|[0-9]+ upgraded|Setting up chromium)' |
		sed -u 's/^/==> chromium:   apt: /' >&2
	status=${PIPESTATUS[0]}
	set -e
	return "$status"
}

t0=$SECONDS
install=(install -y -q --no-install-recommends chromium)
log "installing Debian's chromium (${sudo[*]:+${sudo[*]} }apt-get ${install[*]})"
if ! run_apt "${install[@]}"; then
	# Fresh machines and containers often have no package lists yet (or
	# stale ones whose files are gone from the mirror).
	log "install failed without fresh package lists ($(tail -n 1 "$out")); running apt-get update"
	run_apt update -q || { tail -n 20 "$out" >&2; die "apt-get update failed (output above): $how"; }
	log "apt-get update done after $((SECONDS - t0))s; installing again"
	run_apt "${install[@]}" || { tail -n 20 "$out" >&2; die "apt-get install chromium failed (output above): $how"; }
fi
usable "$debian" || die "installed chromium, but \`$debian --version\` fails: $how"
log "installed $("$debian" --version 2>/dev/null) in $((SECONDS - t0))s"
