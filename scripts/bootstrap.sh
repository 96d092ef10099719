#!/usr/bin/env bash
# Idempotent set-up for a fresh Debian 12 machine: Debian packages, the Python package
# (editable, in .venv), the valgrind tool, tracefs. Safe to run again: each step is
# skipped when already done.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  binutils gcc g++ make lld mold valgrind          # linkers and compilers
  llvm-16 libllvm16                                 # real target: libLLVM-16.so.1, llc-16, opt-16
  lld-16                                            # bench_peers: lld's own -z pack-relative-relocs (lld 14 lacks it)
  bolt-16                                           # bench_peers: BOLT rows (llvm-bolt, merge-fdata, the instrumentation runtime)
  libffi8 libedit2 libzstd1 libtinfo6 libxml2 libz3-4  # libLLVM relinked from archives links these
  libpython3.11-stdlib libexpat1 zlib1g             # stdlib for the relinked libpython
  libpython3.11-testsuite                           # CPython's regression tests through a split relink (bench_split)
  python3 python3-venv python3-pip                  # Debian's python if none other is first on PATH
  fuse3 libfuse3-dev pkg-config                     # slow-storage emulation
  chromium sqlite3 file                             # report rendering test, history db
  postgresql                                        # history in PostgreSQL (tests start a private server)
  debootstrap                                       # a Debian 11 root (glibc 2.31) for pack-relocs tests
  qemu-user gcc-aarch64-linux-gnu g++-aarch64-linux-gnu  # AArch64: run (qemu-user loads our plugin), cross-compile
  clang-22                                          # profiles of clang -g builds (DWARF 5, split DWARF); split refuses its LTO bitcode
  chromium-driver                                   # the report's interactive view driven in headless Chromium (selenium)
  e2fsprogs util-linux mount                        # measure --isolate (mkfs.ext4, loop mounts), rootless tests (setpriv)
  firefox-esr util-linux                            # the Firefox ESR case study (bench_chromium.py --target firefox; fincore)
  clang-22 lld-19 lld-22 xz-utils                   # link with versioned toolchains (ld.lld-N, clang -fuse-ld=lld-N), ThinLTO tests; libzstd source (apt-get source)
  clang-14 clang-16 clang-19                        # profiles of -g builds by the clang versions Debian ships (their DWARF differs)
  cmake meson ninja-build                           # launch: the linker launcher in real CMake and Meson builds (tests/test_launch.py)
  bolt-22 libclang-rt-22-dev llvm-22                # bench_peers --llvm22: BOLT-22, clang-22 -fprofile-generate's runtime, llvm-profdata-22
  clang-16                                          # real-compile training set for libLLVM-16 orders (LLVM IR of zlib, Lua, bzip2, PCRE2 sources)
  gdb                                               # split of -g objects: a breakpoint by line in a reordered link (tests/test_split_dwarf.py)
  zlib1g-dev                                        # real-compile training set: libpng's sources include zlib.h
)

need=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "bootstrap: installing Debian packages: ${need[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# Python: a venv so Debian's externally-managed python accepts the install too.
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "bootstrap: creating .venv"
  "$PY" -m venv .venv
fi
stamp=.venv/.elflayout-installed
if [ ! -f "$stamp" ] || [ setup.cfg -nt "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "bootstrap: installing elflayout and its Python dependencies into .venv"
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  .venv/bin/python -m pip install -q -e '.[test,report,stats,postgresql]'
  touch "$stamp"
fi

# The C parts: the valgrind tool (out of tree), the FUSE slow-storage server, the preloader,
# the real-load check's probe for roots without a python3 with ctypes.
for d in tools/firsttouch tools/slowfs tools/preload tools/loadprobe; do
  [ -f "$d/Makefile" ] && make -s -C "$d"
done

# AArch64: the qemu plugin header (Debian's qemu source, cached) and the profile plugin; the
# arm64 system root itself is made on first use (scripts/arm64-root.sh, tests marked download).
if [ "$(id -u)" -eq 0 ] || command -v sudo >/dev/null; then
  scripts/arm64-root.sh --header >/dev/null && make -s -C tools/qemutouch || echo "bootstrap: note: no qemu plugin (AArch64 profiles)"
fi
command -v aarch64-linux-gnu-gcc >/dev/null && make -s -C tools/loadprobe  # pack-relocs --check of arm64 libraries

# tracefs for the trace backend and the harness (root only; others get a clear message later).
if [ "$(id -u)" -eq 0 ] && [ ! -d /sys/kernel/tracing/instances ]; then
  mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || echo "bootstrap: note: could not mount tracefs"
fi
echo "bootstrap: ready"
