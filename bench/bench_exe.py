#!/usr/bin/env python3
"""An executable as the target: Debian's ``python3.11`` relinked from ``libpython3.11.a``
(``targets.python_exe``: its ``python.o``, the archive's objects after ``elflayout
split``, ``-export-dynamic`` as Debian links it) with GNU ld and lld, profiled, ordered
and relinked exactly as a library is, then measured: pages read *from the executable*
at a selectively-cold start of ``python3.11 -c "import json, decimal, asyncio, re"``
(read_ahead_kb 128), Debian's own ``/usr/bin/python3.11`` beside them. The ordered builds
must give the same results as Debian's for CPython's ``test_json test_re test_struct``.

Steps, each the library call its verb runs: ``profile --target EXE --map EXE.map --data
--clean-env --env LC_ALL=C --stdout null --repeat 3`` on the unordered lld build;
``order --format lld`` / ``--format ld-script`` (``order.pipeline``); the relinks; one
interleaved ``measure`` session (``measure.session``).

Run:  python3 bench/bench_exe.py [--runs 5] [--no-regrtest]
Goal: >= 30% fewer pages read from the executable than the unordered build, per linker.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "bench"))

import bench_pipeline as bp  # noqa: E402
from bench_split import DEBIAN_PYTHON, MEASURED_CONDITIONS, PROFILE_RUNS  # noqa: E402

REGRTESTS = ["test_json", "test_re", "test_struct"]
LINKERS = ("bfd", "lld")
ORDER_FORMAT = {"lld": "lld", "bfd": "ld-script"}
GOAL = 0.30


def order_args(fmt: str, path: Path) -> list[str]:
    """Link arguments applying the ordering file PATH of format FMT."""
    h = bp.hashed_copy(path)
    return [f"-Wl,--symbol-ordering-file={h}", "-Wl,--no-warn-symbol-ordering"] if fmt == "lld" else [f"-Wl,-T,{h}"]


def builds(w: Path) -> tuple[dict, dict, Path]:
    """({linker: unordered build}, {linker: ordered build}, the profile)."""
    from elflayout.targets import python_exe

    base = {lk: python_exe.prepare(lk) for lk in LINKERS}
    b = base["lld"]
    envs = sum((["--env", f"{k}={v}"] for k, v in b["env"].items()), [])
    prof = w / "python-exe.profile.json"
    bp.cached_profile(prof, b["exe"], ["profile", "--target", b["exe"], "--map", b["map"], "--data", *envs,
                                       *MEASURED_CONDITIONS, "--repeat", PROFILE_RUNS, "-o", prof, "--force", "--",
                                       *b["workloads"]["imports"]])
    ordered = {"lld+data": full_recipe(w, b, prof), "bfd+data": bfd_recipe(w, b, prof)}
    for lk in LINKERS:
        fmt = ORDER_FORMAT[lk]
        f = w / f"python-exe.{fmt}"
        bp.write_order(f, prof, fmt, lib=b["exe"], objects_from=b["map"])
        extra = order_args(fmt, f)
        print(f"  relink: python_exe.prepare({lk!r}, extra_link_args={extra})", flush=True)
        ordered[lk] = python_exe.prepare(lk, extra_link_args=extra)
    return base, ordered, prof


def full_recipe(w: Path, b: dict, prof: Path) -> dict:
    """lld with the product's fullest recipe (as bench_split's): hot-last code order, a
    data script placing the touched data sections, hot ``.dynstr`` names first."""
    from elflayout.targets import python_exe

    extra = bp.full_recipe_args(w / "python-exe-full", prof, b["exe"], b["map"], wl="-Wl,")
    print(f"  relink: python_exe.prepare('lld', extra_link_args={extra})", flush=True)
    return python_exe.prepare("lld", extra_link_args=extra)


def bfd_recipe(w: Path, b: dict, prof: Path) -> dict:
    """GNU ld with the fullest recipe its script takes: hot-last code order and the
    touched data sections placed first (the script places both)."""
    from elflayout.targets import python_exe

    f = w / "python-exe-full.ld-script"
    bp.write_order(f, prof, "ld-script", lib=b["exe"], objects_from=b["map"], algorithm="hot-last")
    extra = order_args("ld-script", f)
    print(f"  relink: python_exe.prepare('bfd', extra_link_args={extra})", flush=True)
    return python_exe.prepare("bfd", extra_link_args=extra)


def check_order(d: dict, prof: Path) -> str:
    r = bp.cli("check-order", d["exe"], "--profile", prof, "--map", d["map"], check=False, echo=False)
    return next((ln.split(":", 1)[1].strip() for ln in r.stdout.splitlines() if ln.startswith("order:")), r.stdout)


def regrtests(ordered: dict) -> bool:
    """CPython's tests through each ordered executable and Debian's: same verdicts."""
    from elflayout.targets import python_exe

    if not Path("/usr/lib/python3.11/test/test_json").exists():
        print("  regrtest: skipped (apt-get install libpython3.11-testsuite)")
        return True
    out = {}
    runs = [(f"ordered {lk}", str(d["exe"]), python_exe.clean_env()) for lk, d in ordered.items()]
    runs.append(("Debian python3.11", DEBIAN_PYTHON, {k: v for k, v in python_exe.clean_env().items()
                                                        if k not in python_exe.ENV}))
    for name, exe, env in runs:
        t = time.monotonic()
        r = subprocess.run([exe, "-m", "test", *REGRTESTS], capture_output=True, text=True, env=env)
        tail = " ".join(ln.strip() for ln in r.stdout.splitlines() if ln.startswith(("Result", "Tests result"))
                        or ln.strip().endswith(("tests OK.", "skipped:", "failed:")))
        out[name] = (r.returncode, tail)
        print(f"  $ {exe} -m test {' '.join(REGRTESTS)}   ({time.monotonic() - t:.0f} s): exit {r.returncode}; {tail}",
              flush=True)
    same = len(set(out.values())) == 1
    print(f"  regrtest results {'identical' if same else 'DIFFER'} through the ordered executables and Debian's")
    return same


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5, help="measured runs per variant and state (default 5)")
    ap.add_argument("--no-regrtest", action="store_true", help="skip CPython's regression tests")
    a = ap.parse_args(argv)
    print("## an executable as the target: python3.11 relinked from libpython3.11.a\n", flush=True)
    w = bp.work_dir() / "exe"
    w.mkdir(parents=True, exist_ok=True)
    base, ordered, prof = builds(w)
    for lk, d in ordered.items():
        print(f"  check-order {lk}: {check_order(d, prof)}", flush=True)
    same = True if a.no_regrtest else regrtests(ordered)
    variants = {"Debian /usr/bin/python3.11": (Path(DEBIAN_PYTHON).resolve(),
                                               bp.variant_cmd(None, [DEBIAN_PYTHON, "-c", bp.IMPORTS], {}))}
    for tag, group in (("unordered", base), ("function order", ordered)):
        for lk, d in group.items():
            variants[f"{tag} {lk}"] = (d["exe"], bp.variant_cmd(None, d["workloads"]["imports"], d["env"]))
    doc = bp.measure(w / "python-exe.results.json", variants, a.runs)
    summ = bp.summarise(doc, {n: exe for n, (exe, _) in variants.items()})
    rows = [(n, summ.get(n)) for n in variants]
    print()
    print(bp.table(rows, None, "unordered lld", True,
                   "pages read from the python3.11 executable — selective, read_ahead_kb 128"))
    print()
    ok = same
    for name in ordered:
        lk = name.split("+")[0]
        u, o = summ.get(f"unordered {lk}"), summ.get(f"function order {name}")
        if not (u and o):
            print(f"{name}: not measured (every run disturbed)")
            ok = False
            continue
        cut = 1 - o["pages"] / u["pages"]
        ok &= cut >= GOAL
        print(f"Goal >= {GOAL:.0%} fewer pages from the executable, {name}: {u['pages']:,.0f} -> "
              f"{o['pages']:,.0f} ({-cut:+.1%}) {'met' if cut >= GOAL else 'NOT met'}")
    print(bp.determinism_note(rows))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
