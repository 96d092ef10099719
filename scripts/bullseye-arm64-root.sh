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
. "$(dirname "$0")/lib/debian.sh"
CACHE=${ELFLAYOUT_CACHE:-$HOME/.cache/elflayout}
debootstrap_root bullseye-arm64-root "${1:-$CACHE/bullseye-arm64-root}" \
  "libllvm11,llvm-11,python3.9-minimal,libpython3.9-stdlib" arm64
