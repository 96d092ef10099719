"""What the bench scripts share: where they keep their work, how they run an elflayout
verb, and an in-process measurement that prints the plan it runs as the CLI command
that would run the same plan.

The cache root is ``${ELFLAYOUT_CACHE:-~/.cache/elflayout}`` as for the product
(``elflayout.targets.cache_dir``): an ELFLAYOUT_CACHE set but empty means the default,
not the current directory.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT / "tools") not in sys.path:
    sys.path.insert(0, str(ROOT / "tools"))

PY = sys.executable


def cache_root() -> Path:
    from elflayout.targets import cache_dir as product_cache_dir

    return product_cache_dir()


def cache_dir(name: str) -> Path:
    """``<cache root>/NAME``, created if missing: one per bench script."""
    d = cache_root() / name
    d.mkdir(parents=True, exist_ok=True)
    return d


def show_cmd(args) -> str:
    return "python3 -m elflayout " + " ".join(shlex.quote(str(a)) for a in args)


def cli(*args, check=True, echo=True) -> subprocess.CompletedProcess:
    """Run an elflayout verb as a user would (a subprocess on this tree's tools/). With
    ``echo``, print the exact command and its time; with ``check``, a failure ends the
    bench with the verb's last lines."""
    args = [str(a) for a in args]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "tools"))
    t = time.monotonic()
    r = subprocess.run([PY, "-m", "elflayout", *args], capture_output=True, text=True, env=env)
    if echo:
        print(f"  $ {show_cmd(args)}   ({time.monotonic() - t:.1f} s)", flush=True)
    if r.returncode != 0 and check:
        tail = "\n".join((r.stderr or r.stdout).strip().splitlines()[-8:])
        raise SystemExit(f"{Path(sys.argv[0]).stem}: elflayout {args[0]} failed (exit {r.returncode}):\n{tail}")
    return r


def plan_args(plan) -> list:
    """``elflayout measure`` options that make exactly PLAN (``measure.session.MeasurePlan``).
    States, runs, read-ahead, seed and retries are always written (they decide the
    figures); the other options only when they differ from the CLI's defaults."""
    a: list = [*sum((["--name", n, c] for n, c in plan.variants), []),
               *sum((["--state", s] for s in plan.states), []), "--runs", plan.runs]
    a += ["--read-ahead-kb", -1 if plan.read_ahead_kb is None else plan.read_ahead_kb]
    if plan.census:
        a += ["--census", plan.census]
    if plan.files:
        a += ["--files", *plan.files]
    a += ["--seed", plan.seed, "--retries", plan.retries]
    optional = (("--warmup", plan.warmup, 0), ("--realtime", plan.realtime, None),
                ("--governor", plan.governor, None), ("--timeout", plan.timeout or 0, 600),
                ("--storage", plan.storage, None))
    for flag, value, default in optional:
        if value != default:
            a += [flag, value]
    a += ["--no-aslr"] * plan.no_aslr + ["--no-trace"] * (not plan.trace)
    a += ["--rootless"] * bool(plan.rootless) + ["--isolate"] * plan.isolate
    a += sum((["--pin", c] for c in plan.pin or []), [])
    a += sum((["--env", f"{k}={v}"] for k, v in plan.env.items()), [])
    a += sum((["--census-under", d] for d in plan.census_under), [])
    return a


def plan_from_args(args):
    """The MeasurePlan the ``elflayout measure`` command line ARGS makes (its own parser)."""
    from elflayout.measure import cli as measure_cli

    ap = argparse.ArgumentParser()
    measure_cli.add_arguments(ap)
    return measure_cli.plan_of(ap.parse_args([str(a) for a in args]))


def measure(plan, out: Path) -> dict:
    """One measurement session in-process (``measure.session``), its results written to
    OUT; first prints the ``elflayout measure`` command that runs the same plan."""
    from elflayout import fileio
    from elflayout.measure import session

    print(f"  $ {show_cmd(['measure', *plan_args(plan), '-o', out])}   (in-process)", flush=True)
    doc = session.measure(plan)
    fileio.dump_json(doc, out)
    return doc


AS_NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]


def unprivileged_python() -> list[str] | None:
    """The command prefix running this tree's elflayout as user nobody: this interpreter
    if nobody can run it, else the system's python3.X of the same version with this
    one's packages (a venv's base can sit in a home directory others cannot enter);
    None when neither imports numpy, scipy and rich."""
    site = [p for p in sys.path if p.endswith("site-packages")]
    env = ["env", f"PYTHONPATH={ROOT / 'tools'}:{':'.join(site)}", "HOME=/tmp"]
    for exe in (sys.executable, f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"):
        r = subprocess.run([*AS_NOBODY, *env, exe, "-c", "import numpy, scipy.stats, rich, elflayout"],
                           capture_output=True, cwd="/")
        if r.returncode == 0:
            return [*AS_NOBODY, *env, exe]
    return None


def fuzz_parser(doc: str) -> argparse.ArgumentParser:
    """The options every fuzzing bench has: --count, --seed, --start (to replay one
    variant) and --jobs; DOC's first paragraph describes the bench."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=10_000, help="variants (default 10000)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--start", type=int, default=0, help="first variant index (to replay one)")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    return ap


def fuzz_chunks(start: int, count: int, step: int) -> list[tuple[int, int]]:
    """(first variant, variants) of each chunk of at most STEP of the variants
    START..START+COUNT-1: the unit of work of one worker process."""
    return [(s, min(step, start + count - s)) for s in range(start, start + count, step)]


def print_fuzz_tail(tally, t0: float, jobs: int) -> None:
    """The last lines of a fuzzing bench: variants by damage, the time, the first 20
    failures (``tally.failures``: seed, variant, damage, input, what went wrong)."""
    print("variants by damage: " + ", ".join(f"{k} {v:,}" for k, v in sorted(tally.by_kind.items())))
    print(f"time: {time.time() - t0:.0f} s with {jobs} workers")
    for f in tally.failures[:20]:
        print(f"  FAIL seed {f[0]} variant {f[1]} ({f[2]}, {f[3]}): {f[4]}")
