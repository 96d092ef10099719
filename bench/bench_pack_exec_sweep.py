#!/usr/bin/env python3
"""pack-relocs --check over PIE executables (/usr/bin, /usr/lib/*/bin, /usr/lib/chromium); prints the counts.

Every regular ELF file there that is ET_DYN with PT_INTERP (a PIE) and has R_X86_64_RELATIVE
relocations in .rela.dyn is packed in the relr form with the full check (simulated
loader at two bases, tables field by field, both files started up to their entry point
under ptrace with their writable memory compared), and in the self form (the routine
run as DT_PREINIT_ARRAY) with the same check, or refused with the reason. Outcomes: packed and checked,
nothing to do, refused (one-line reason, grouped), check failed (exit 1, listed),
internal error (listed). Target: 0 check failures, 0 internal errors.

Run:  python3 bench/bench_pack_exec_sweep.py [--limit N] [--dirs D ...] [--no-self | --self-only] [--only PATH ...]
"""

from __future__ import annotations

import argparse
import collections
import glob
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "bench"))

from bench_pack_sweep import reason_class  # noqa: E402
from elflayout import elfcore  # noqa: E402
from elflayout import layouts as L  # noqa: E402
from elflayout.errors import ElflayoutError, Finding  # noqa: E402
from elflayout.relocs import simload  # noqa: E402
from elflayout.relocs.pack import AlreadyPacked, pack  # noqa: E402

DIRS = ["/usr/bin", *sorted(glob.glob("/usr/lib/*/bin")), "/usr/lib/chromium"]


def pie_with_relative(path: Path) -> bool:
    """ET_DYN with PT_INTERP and at least one RELATIVE relocation in .rela.dyn."""
    try:
        with open(path, "rb") as f:
            if f.read(4) != b"\x7fELF":
                return False
        with elfcore.ElfImage(path) as img:
            if img.elf.header["e_type"] != "ET_DYN" or not any(s.type == "PT_INTERP" for s in img.segments):
                return False
            t = img.reloc_tables().get(".rela.dyn")
            return t is not None and bool((img.reloc_types(t) == 8).any())
    except Exception:  # noqa: BLE001 - not an ELF file we can read: not a candidate
        return False


def candidates(dirs) -> list[Path]:
    seen, out = set(), []
    for d in dirs:
        for p in sorted(Path(d).iterdir()) if Path(d).is_dir() else []:
            if p.is_file() and not p.is_symlink() and p.stat().st_ino not in seen and pie_with_relative(p):
                seen.add(p.stat().st_ino)
                out.append(p)
    return out


def one(exe: Path, out: Path, form: str, count, reasons, examples, failed) -> int:
    """Pack and check ``exe`` in ``form``; counts the outcome; returns the packed relocations."""
    try:
        st = pack(exe, out, verify=simload.check, replace=True, form=form)
        count[form, "packed and checked"] += 1
        return st["packed"]
    except AlreadyPacked as e:
        count[form, "nothing to do"] += 1
        reasons[form, "nothing to do: " + reason_class(str(e))] += 1
    except Finding as e:
        count[form, "check failed (exit 1)"] += 1
        failed.append((form, str(exe), str(e)))
    except ElflayoutError as e:
        count[form, "refused (exit 2)"] += 1
        r = reason_class(str(e))
        reasons[form, r] += 1
        examples.setdefault((form, r), exe.name)
    except Exception as e:  # noqa: BLE001 - counted: a bug of ours (exit 3)
        count[form, "internal error (exit 3)"] += 1
        failed.append((form, str(exe), f"internal error {type(e).__name__}: {e}"))
    finally:
        out.unlink(missing_ok=True)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dirs", nargs="+", default=DIRS)
    ap.add_argument("--limit", type=int, default=0, help="the first N executables only, in path order (0: all)")
    ap.add_argument("--no-self", action="store_true", help="relr form only")
    ap.add_argument("--self-only", action="store_true", help="self form only")
    ap.add_argument("--only", nargs="+", metavar="PATH", help="these executables instead of the directories")
    a = ap.parse_args()
    t0 = time.time()
    exes = [Path(p) for p in a.only] if a.only else candidates(a.dirs)
    total = len(exes)
    if a.limit:
        exes = exes[:a.limit]
    forms = (["self"] if a.self_only else ["relr"]) + ([] if a.no_self or a.self_only else ["self"])
    print(f"# bench_pack_exec_sweep: {total} PIE executables with RELATIVE relocations in {', '.join(a.dirs)}; "
          f"{len(exes)} swept, forms {', '.join(forms)} ({time.time() - t0:.0f} s to find them)")
    count, reasons, examples, failed = collections.Counter(), collections.Counter(), {}, []
    packed = 0
    with tempfile.TemporaryDirectory(prefix="elflayout-exec-sweep-") as d:
        for i, exe in enumerate(exes):
            for form in forms:
                n = one(exe, Path(d) / exe.name, form, count, reasons, examples, failed)
                packed += n if form == "relr" else 0
            if (i + 1) % 25 == 0:
                print(f"  {i + 1}/{len(exes)} ({time.time() - t0:.0f} s)", file=sys.stderr, flush=True)
    for form in forms:
        print(f"form {form}:")
        for k in ("packed and checked", "nothing to do", "refused (exit 2)", "check failed (exit 1)",
                  "internal error (exit 3)"):
            print(f"  {k:<26} {count[form, k]:>5}")
        print("  reasons, most frequent first:")
        for (f, r), n in reasons.most_common():
            if f == form:
                print(f"    {n:>5}  {r}" + (f"   (e.g. {examples[f, r]})" if (f, r) in examples else ""))
    print(f"RELATIVE relocations packed (relr): {packed:,}")
    for form, name, msg in failed:
        print(f"  FAILED [{form}] {name}: {msg}")
    print(f"time: {time.time() - t0:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
