#!/usr/bin/env bash
# An arm64 (AArch64) sysroot and the qemu plugin header, for running and profiling arm64
# programs under qemu-user on an x86-64 machine (`qemu-aarch64 -L ROOT prog`). Idempotent:
# prints the root's path; builds it only when missing or made with another package list.
# Cached under ${ELFLAYOUT_CACHE:-~/.cache/elflayout} (never in the repository):
#   arm64-root/            libc6, libstdc++6, libllvm16 + llvm-16 (llc-16) and their libraries,
#                          unpacked with dpkg -x (no maintainer scripts, no binfmt_misc needed)
#   qemu-plugin/qemu-plugin.h  the TCG plugin API header of the installed qemu-user's version
# apt operations (adding the arm64 architecture and a deb-src line for the mirror apt
# already uses, apt-get update) run under `flock /tmp/elflayout-apt.lock` and need root.
#
#   scripts/arm64-root.sh            # -> ~/.cache/elflayout/arm64-root
#   scripts/arm64-root.sh --header   # -> ~/.cache/elflayout/qemu-plugin (the header only)
set -euo pipefail
. "$(dirname "$0")/lib/debian.sh"
CACHE=${ELFLAYOUT_CACHE:-$HOME/.cache/elflayout}
ROOT=$CACHE/arm64-root
HDR=$CACHE/qemu-plugin
LOCK=/tmp/elflayout-apt.lock
# libllvm16's run-time dependencies by name (apt-get download takes no closure), and
# libexpat1 for libpython3.11 (loaded by pack-relocs --check).
PKGS="libc6 libgcc-s1 libstdc++6 libllvm16 llvm-16 llvm-16-linker-tools libffi8 libedit2 libz3-4 libxml2
libzstd1 zlib1g libtinfo6 libbsd0 libmd0 libicu72 liblzma5 libexpat1"
PKGS=$(echo $PKGS)

SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
apt_setup() {  # arm64 packages and deb-src for the mirror apt already uses
  local changed=0
  dpkg --print-foreign-architectures | grep -qx arm64 || { $SUDO dpkg --add-architecture arm64; changed=1; }
  local src=/etc/apt/sources.list.d/elflayout-src.sources
  if [ ! -f "$src" ]; then
    local mirror
    mirror=$(debian_mirror)
    printf 'Types: deb-src\nURIs: %s\nSuites: bookworm bookworm-updates\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
      "$mirror" | $SUDO tee "$src" >/dev/null
    changed=1
  fi
  if [ $changed = 1 ] || ! ls /var/lib/apt/lists/*binary-arm64_Packages* >/dev/null 2>&1 \
       || ! ls /var/lib/apt/lists/*_source_Sources* >/dev/null 2>&1; then
    echo "arm64-root: apt-get update (arm64 lists and sources)" >&2
    $SUDO apt-get update -qq >/dev/null
  fi
}

header() {  # qemu-plugin.h from the Debian source of the installed qemu-user
  local ver
  ver=$(dpkg-query -W -f='${Version}' qemu-user 2>/dev/null) || {
    echo "arm64-root: qemu-user is not installed (apt-get install qemu-user)" >&2; exit 2; }
  if [ -f "$HDR/qemu-plugin.h" ] && [ "$(cat "$HDR/.version" 2>/dev/null)" = "$ver" ]; then return; fi
  local tmp
  tmp=$(mktemp -d "$CACHE/qemu-src.tmp.XXXXXX")
  echo "arm64-root: apt-get source --download-only qemu=$ver (the plugin header)" >&2
  # the binary version may carry a binNMU suffix (+b3) that the source lacks
  (cd "$tmp" && flock "$LOCK" apt-get source -qq -o APT::Sandbox::User=root --download-only "qemu=${ver%+b[0-9]*}" >/dev/null)
  local orig
  orig=$(ls "$tmp"/qemu_*.orig.tar.* | head -1)
  mkdir -p "$HDR"
  tar -xf "$orig" -C "$tmp" --wildcards '*/include/qemu/qemu-plugin.h'
  cp "$(find "$tmp" -name qemu-plugin.h | head -1)" "$HDR/qemu-plugin.h"
  echo "$ver" >"$HDR/.version"
  rm -rf "$tmp"
}

root() {
  local stamp="$ROOT/.elflayout-root"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$PKGS" ]; then return; fi
  mkdir -p "$CACHE/arm64-debs"
  local tmp
  tmp=$(mktemp -d "$ROOT.tmp.XXXXXX")
  echo "arm64-root: apt-get download + dpkg -x: $PKGS" >&2
  local p
  for p in $PKGS; do
    ls "$CACHE/arm64-debs/${p}_"*_arm64.deb >/dev/null 2>&1 || \
      (cd "$CACHE/arm64-debs" && apt-get download -qq -o APT::Sandbox::User=root "$p:arm64" >/dev/null)
  done
  for p in $PKGS; do dpkg -x "$(ls "$CACHE/arm64-debs/${p}_"*_arm64.deb | tail -1)" "$tmp"; done
  echo "$PKGS" >"$tmp/.elflayout-root"
  rm -rf "$ROOT"
  mv -T "$tmp" "$ROOT"
}

mkdir -p "$CACHE"
need_apt=0
[ -f "$ROOT/.elflayout-root" ] && [ "$(cat "$ROOT/.elflayout-root")" = "$PKGS" ] || need_apt=1
[ -f "$HDR/qemu-plugin.h" ] || need_apt=1
if [ $need_apt = 1 ]; then
  [ "$(id -u)" -eq 0 ] || command -v sudo >/dev/null || { echo "arm64-root: adding the arm64 architecture needs root" >&2; exit 2; }
  export -f apt_setup; export SUDO
  flock "$LOCK" bash -c apt_setup
fi
header
if [ "${1:-}" = "--header" ]; then echo "$HDR"; exit 0; fi
root
echo "$ROOT"
