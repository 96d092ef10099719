#!/usr/bin/env bash
# A Debian 11 "bullseye" root (glibc 2.31) with that release's own big libraries, for
# testing pack-relocs outputs on a glibc older than 2.36 (tests/test_relocs_oldglibc.py,
# `pack-relocs --root DIR`). Idempotent: prints the root's path; builds it only when
# missing or made with another package list. Cached under ${ELFLAYOUT_CACHE:-~/.cache/elflayout}
# (never in the repository); built in a temporary directory and renamed when complete.
#
#   scripts/bullseye-root.sh            # -> ~/.cache/elflayout/bullseye-root
set -euo pipefail
CACHE=${ELFLAYOUT_CACHE:-$HOME/.cache/elflayout}
ROOT=${1:-$CACHE/bullseye-root}
# libllvm11 + llvm-11 (llc-11), libpython3.9 (+ python3.9 for the loader check inside the
# root), libc6-dev so a launcher can be linked against the root's own glibc.
PKGS="libllvm11,llvm-11,libpython3.9,python3.9-minimal,libpython3.9-stdlib,libc6-dev"
stamp="$ROOT/.elflayout-root"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$PKGS" ]; then
  echo "$ROOT"
  exit 0
fi
[ "$(id -u)" -eq 0 ] || { echo "bullseye-root: debootstrap needs root" >&2; exit 2; }
command -v debootstrap >/dev/null || { echo "bullseye-root: debootstrap is not installed (scripts/bootstrap.sh)" >&2; exit 2; }
# The Debian mirror apt already uses (deb822 .sources or a classic sources.list).
MIRROR=$(sed -n 's/^URIs:[[:space:]]*\(http[^[:space:]]*\/debian\)\/\{0,1\}[[:space:]]*$/\1/p' \
           /etc/apt/sources.list.d/*.sources 2>/dev/null | head -1)
[ -n "$MIRROR" ] || MIRROR=$(awk '$1=="deb" && $2 ~ /\/debian\/?$/ {print $2; exit}' \
                               /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null || true)
MIRROR=${MIRROR:-http://deb.debian.org/debian}
mkdir -p "$(dirname "$ROOT")"
tmp=$(mktemp -d "$ROOT.tmp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "bullseye-root: debootstrap --variant=minbase bullseye from $MIRROR (about a minute)" >&2
debootstrap --variant=minbase --include="$PKGS" bullseye "$tmp" "$MIRROR" >"$tmp.log" 2>&1 || {
  tail -5 "$tmp.log" >&2; rm -f "$tmp.log"; exit 1; }
rm -f "$tmp.log"
echo "$PKGS" >"$tmp/.elflayout-root"
rm -rf "$ROOT"
mv -T "$tmp" "$ROOT"
trap - EXIT
echo "$ROOT"
