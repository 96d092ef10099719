#!/usr/bin/env bash
# Fetch libpython3.11-pic.a (apt-get download, into the cache) and relink
# libpython3.11.so.1.0 with GNU ld, gold and lld; run both workloads with each.
# Usage: examples/libpython/prepare.sh [LINKER ...]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$here/../.."
PY="${PYTHON:-$root/.venv/bin/python}"; [ -x "$PY" ] || PY=python3
PYTHONPATH="$root/tools${PYTHONPATH:+:$PYTHONPATH}" exec "$PY" - "${@:-bfd gold lld}" <<'PYEOF'
import os, subprocess, sys, time
from elflayout.targets import libpython
for linker in " ".join(sys.argv[1:]).split():
    d = libpython.prepare(linker)
    print(f"{linker}: {d['lib']}\n  map      {d['map']}\n  launcher {d['launcher']}")
    for name, argv in d["workloads"].items():
        t = time.perf_counter()
        r = subprocess.run(argv, env=os.environ | d["env"])
        print(f"  {name:8} exit {r.returncode}  {time.perf_counter() - t:.3f} s  ({' '.join(argv)})")
PYEOF
