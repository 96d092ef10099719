#!/usr/bin/env bash
# Build the synthetic ground-truth library with GNU ld, gold and lld.
# Usage: examples/synthetic/build.sh [OUTDIR] [OBJECTS] [FUNCS] [SEED]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$here/../.."
out="${1:-$root/build/synthetic}"
PY="${PYTHON:-$root/.venv/bin/python}"; [ -x "$PY" ] || PY=python3
PYTHONPATH="$root/tools${PYTHONPATH:+:$PYTHONPATH}" exec "$PY" -m elflayout.targets.synthetic \
  --objects "${2:-20}" --funcs "${3:-8}" --seed "${4:-0}" --linker bfd --linker gold --linker lld -o "$out"
