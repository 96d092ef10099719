#!/usr/bin/env bash
# A Debian 11 "bullseye" arm64 root (glibc 2.31, no DT_RELR) with llvm-11 and python3.9,
# for testing AArch64 pack-relocs outputs (the self form) on an old glibc under
# qemu-user: `qemu-aarch64 -L ROOT`, `pack-relocs --root ROOT`. Made with debootstrap
# --foreign (downloads and unpacks, runs nothing of arm64) plus `dpkg -x` of the included
# packages. Idempotent: prints the root's path; builds it only when missing or made with
# another package list. Cached under ${ELFLAYOUT_CACHE:-~/.cache/elflayout}.
#
#   scripts/bullseye-arm64-root.sh      # -> ~/.cache/elflayout/bullseye-arm64-root
set -euo pipefail
CACHE=${ELFLAYOUT_CACHE:-$HOME/.cache/elflayout}
ROOT=${1:-$CACHE/bullseye-arm64-root}
PKGS="libllvm11,llvm-11,python3.9-minimal,libpython3.9-stdlib"
stamp="$ROOT/.elflayout-root"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$PKGS" ]; then
  echo "$ROOT"
  exit 0
fi
[ "$(id -u)" -eq 0 ] || { echo "bullseye-arm64-root: debootstrap needs root" >&2; exit 2; }
command -v debootstrap >/dev/null || { echo "bullseye-arm64-root: debootstrap is not installed (scripts/bootstrap.sh)" >&2; exit 2; }
MIRROR=$(sed -n 's/^URIs:[[:space:]]*\(http[^[:space:]]*\/debian\)\/\{0,1\}[[:space:]]*$/\1/p' \
           /etc/apt/sources.list.d/*.sources 2>/dev/null | head -1)
[ -n "$MIRROR" ] || MIRROR=$(awk '$1=="deb" && $2 ~ /\/debian\/?$/ {print $2; exit}' \
                               /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null || true)
MIRROR=${MIRROR:-http://deb.debian.org/debian}
mkdir -p "$(dirname "$ROOT")"
tmp=$(mktemp -d "$ROOT.tmp.XXXXXX")
trap 'rm -rf "$tmp" "$tmp.log"' EXIT
echo "bullseye-arm64-root: debootstrap --arch=arm64 --foreign bullseye from $MIRROR (a few minutes)" >&2
debootstrap --arch=arm64 --foreign --variant=minbase --include="$PKGS" bullseye "$tmp" "$MIRROR" >"$tmp.log" 2>&1 || {
  tail -5 "$tmp.log" >&2; exit 1; }
for f in "$tmp"/var/cache/apt/archives/*.deb; do dpkg -x "$f" "$tmp"; done  # --foreign unpacks only the base
rm -rf "$tmp"/var/cache/apt/archives/*.deb
echo "$PKGS" >"$tmp/.elflayout-root"
rm -rf "$ROOT"
mv -T "$tmp" "$ROOT"
trap - EXIT
rm -f "$tmp.log"
echo "$ROOT"
