"""A tiny synthetic shared library with a known first-call order, for tests and bench.

The targets package builds the project's full synthetic library; this one is smaller
and has exactly the awkward names ordering must handle: a ``static`` helper with the
same name in every object, switch jump tables (``.rodata.<function>``), constant tables
(``-fdata-sections``), and functions of chosen sizes so that order changes the pages.
The ground truth (call order) is written beside it and turned into a profile v1 by
``truth_profile``, the way the profiler would record it.
"""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path

from elftools.elf.enums import ENUM_ST_INFO_TYPE

from elflayout.elfcore import ElfImage

CFLAGS = ["-O1", "-fPIC", "-ffunction-sections", "-fdata-sections", "-fno-inline", "-fno-ipa-icf"]


def _obj_source(k: int, nfunc: int, rng: random.Random) -> tuple[str, list[str]]:
    names = [f"o{k}_f{j}" for j in range(nfunc)]
    src = [f"static int helper(int x) {{ return x * {k + 3} + 1; }}",
           f"const int tbl_{k}[64] = {{ {', '.join(str(rng.randrange(1000)) for _ in range(64))} }};"]
    for j, n in enumerate(names):
        pad = rng.choice([256, 512, 1024, 2048, 3000])
        if j % 3 == 0:  # a dense switch: GCC emits a jump table in .rodata.<fn>
            cases = "".join(f"case {c}: r += {c * 7 + k}; break; " for c in range(12))
            body = f"int r = 0; switch (x & 15) {{ {cases} default: r = -1; }} return r + helper(x) + tbl_{k}[x & 63];"
        else:
            body = f"return helper(x) + tbl_{k}[(x + {j}) & 63];"
        src.append(f"__attribute__((noinline)) int {n}(int x) {{ "
                   f"__asm__ volatile(\"jmp 1f\\n.skip {pad}, 0x90\\n1:\"); {body} }}")
    return "\n".join(src) + "\n", names


def build(workdir, n_objects: int = 6, funcs_per_object: int = 8, seed: int = 0, linker: str = "bfd",
          calls: int | None = None) -> dict:
    """Compile objects and link ``libsynth.so`` in default order; returns paths and truth."""
    wd = Path(workdir)
    wd.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    objects, all_names, owner = [], [], {}
    for k in range(n_objects):
        src, names = _obj_source(k, funcs_per_object, rng)
        c = wd / f"obj{k}.c"
        c.write_text(src)
        o = wd / f"obj{k}.o"
        subprocess.run(["gcc", *CFLAGS, "-c", str(c), "-o", str(o)], check=True)
        objects.append(o)
        all_names += names
        owner.update({n: o.name for n in names})
    # the startup calls a random subset in a random order: first-call order is known
    called = rng.sample(all_names, calls or max(1, len(all_names) // 3))
    decls = "".join(f"int {n}(int);\n" for n in all_names)
    body = "".join(f"  s += {n}(x);\n" for n in called)
    entry = wd / "entry.c"
    entry.write_text(decls + f"int synth_entry(int x) {{\n  int s = 0;\n{body}  return s;\n}}\n")
    eo = wd / "entry.o"
    subprocess.run(["gcc", *CFLAGS, "-c", str(entry), "-o", str(eo)], check=True)
    objects.insert(0, eo)
    drv = wd / "driver.c"
    drv.write_text("#include <stdio.h>\nint synth_entry(int);\nint main(void){printf(\"%d\\n\", synth_entry(5));return 0;}\n")
    lib = wd / "libsynth.so"
    mp = wd / "libsynth.map"
    link_cmd = ["gcc", "-shared", f"-fuse-ld={linker}", "-o", str(lib), *map(str, objects), f"-Wl,-Map,{mp}"]
    subprocess.run(link_cmd, check=True)
    driver = wd / "driver"
    subprocess.run(["gcc", "-o", str(driver), str(drv), f"-L{wd}", "-lsynth", f"-Wl,-rpath,{wd}"], check=True)
    truth = {"functions": ["synth_entry"] + [x for n in called for x in (n, "helper")],
             "owner": {"synth_entry": eo.name, **owner}, "called": called}
    tp = wd / "truth.json"
    tp.write_text(json.dumps(truth, indent=1))
    return {"lib": lib, "map": mp, "driver": driver, "objects": objects, "truth": tp, "link_cmd": link_cmd}


def build_profiled(workdir, **kw) -> dict:
    """``build`` plus its ground-truth profile: ``prof`` (the document) and ``profile``
    (its path, ``workdir/p.json``)."""
    d = build(workdir, **kw)
    d["prof"] = truth_profile(d["lib"], d["truth"])
    d["profile"] = Path(workdir) / "p.json"
    d["profile"].write_text(json.dumps(d["prof"]))
    return d


def truth_profile(lib, truth_path) -> dict:
    """Profile v1 of ``lib`` from the ground truth: what the valgrind backend would record.

    The ``helper`` of each object is a distinct local function: it is entered right after
    the first function of its object that runs, so its entry names that object.
    """
    truth = json.loads(Path(truth_path).read_text())
    from elflayout.order.resolve import elf_symbols

    with ElfImage(lib) as img:
        ident = img.identity()
        arr, names = elf_symbols(img)
        funcs = {}
        for i, n in enumerate(names):
            if arr["type"][i] == ENUM_ST_INFO_TYPE["STT_FUNC"]:
                funcs.setdefault(n, []).append((int(arr["offset"][i]), int(arr["size"][i])))
    seen, out, seq = set(), [], 0
    last_obj = None
    for n in truth["functions"]:
        if n == "helper":
            obj = last_obj
            # the helpers appear in link order in .symtab; the k-th object's helper is the k-th
            cands = sorted(funcs.get("helper", []))
            k = int(obj[3:-2]) if obj and obj.startswith("obj") else 0
            if k >= len(cands):
                continue
            off, size = cands[k]
            key = ("helper", obj)
        else:
            obj = truth["owner"].get(n)
            last_obj = obj
            off, size = funcs[n][0]
            key = (n, None)
        if key in seen:
            continue
        seen.add(key)
        out.append({"name": n, "offset": off, "size": size, "section": ".text", "object": obj,
                    "first": seq, "phase": "startup", "t": seq * 1e-6})
        seq += 1
    objs = list(dict.fromkeys(f["object"] for f in out if f["object"]))
    return {
        "format": "elflayout-profile", "version": 1,
        "metadata": {"argv": ["driver"], "backend": "truth", "granularity": "function", "kernel": "",
                     "read_ahead_kb": None, "started": "", "duration_s": 0.0, "exit_status": 0,
                     "notes": "made from the synthetic library's ground truth"},
        "targets": [{**ident, "map": None, "functions": out, "sections": [],
                     "objects": [{"object": o, "first": i} for i, o in enumerate(objs)], "pages": [], "reads": []}],
    }
