#!/usr/bin/env bash
# A Debian 11 "bullseye" root (glibc 2.31) with that release's own big libraries, for
# testing pack-relocs outputs on a glibc older than 2.36 (tests/test_relocs_oldglibc.py,
# `pack-relocs --root DIR`). Idempotent: prints the root's path; builds it only when
# missing or made with another package list. Cached under ${ELFLAYOUT_CACHE:-~/.cache/elflayout}
# (never in the repository); built in a temporary directory and renamed when complete.
#
#   scripts/bullseye-root.sh            # -> ~/.cache/elflayout/bullseye-root
set -euo pipefail
. "$(dirname "$0")/lib/debian.sh"
CACHE=${ELFLAYOUT_CACHE:-$HOME/.cache/elflayout}
# libllvm11 + llvm-11 (llc-11), libpython3.9 (+ python3.9 for the loader check inside the
# root), libc6-dev so a launcher can be linked against the root's own glibc.
debootstrap_root bullseye-root "${1:-$CACHE/bullseye-root}" \
  "libllvm11,llvm-11,libpython3.9,python3.9-minimal,libpython3.9-stdlib,libc6-dev"
