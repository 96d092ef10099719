"""Synthetic ground-truth library: a generated shared library whose exact first-call
order of functions and objects is known.

Shape (all seeded, so a (n_objects, funcs_per_object, seed) triple is one library):

* N objects ``oNNNN.c`` × M exported functions ``sy_oNNNN_fMMM`` of varied code size
  (a lognormal number of unrolled volatile arithmetic statements, from a few bytes to
  ~8 KB), each reading its own const table (``.rodata.<name>_k``) and its own table
  of string pointers (``.data.rel.ro.local`` → R_X86_64_RELATIVE relocations); about
  a quarter call one or two later functions (a DAG, so call chains cross objects);
* per object a table of pointers to hidden aliases of its functions (more RELATIVE
  relocations) and, for ~30% of objects, a static constructor ``sy_oNNNN_ctor``
  calling a few functions;
* a driver executable (linked against the library with RUNPATH ``$ORIGIN``) whose own
  constructor and ``main`` call a seeded subset of functions in a seeded order and
  print a checksum that does not depend on layout or call order (a sum), so packed or
  reordered builds are compared by output;
* ``sy_truth.o``: every function starts with ``if (sy_trace_state) sy_hit(ID)``. In a
  normal run the first call reads ``SYNTH_TRUTH_LOG`` once, finds it unset and turns
  logging off (one extra small function executed, one .data word read per call).
  With ``SYNTH_TRUTH_LOG=FILE`` every first execution is appended to FILE as
  ``id phase`` (phase 0 = constructors, 1 = main): the observed truth.

The truth JSON (``truth.json`` beside the library) is that observed run, checked
against an independent prediction: the call plan replayed with the library's own
``.init_array`` order (constructor order across objects depends on link order and
linker). ``build`` refuses to return a truth that the two disagree on.

Compiled with ``-O1 -fPIC -ffunction-sections -fdata-sections -fno-ipa-icf`` and
``noinline,noclone`` on every function, so each function stays a distinct section
and symbol; links with GNU ld, gold, lld (and mold), each with ``-Wl,-Map=``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from elflayout.elfcore import ElfImage
from elflayout.errors import ElflayoutError
from elflayout.fileio import atomic_write_text, dump_json, envelope
from elflayout.fileio import load_json
from elflayout.targets import args_fingerprint, cache_dir, locked, param_key, record_paths, run
from elflayout.toolchain import driver_args, linker_flag

GENERATOR_VERSION = 1
CFLAGS = ["-O1", "-fPIC", "-ffunction-sections", "-fdata-sections", "-fno-ipa-icf",
          "-fno-inline-functions", "-fno-inline-small-functions", "-g0", "-w"]
LIBNAME = "libsynth.so"
TRUTH_ENV = "SYNTH_TRUTH_LOG"
SOURCES_PER_GCC = 40     # sources per gcc process: amortises start-up on 2,000 objects
MAIN_CHUNK = 400         # driver calls per helper function: keeps driver functions small

# Tuning of the generated program (why each value):
P_CALLEES = 0.25         # share of functions that call others: gives cross-object chains
P_CTOR = 0.30            # share of objects with a constructor: a realistic init phase
MAIN_SHARE = 0.15        # share of functions main calls directly: most code stays cold


# --------------------------------------------------------------------------- plan
def make_plan(n_objects: int, funcs_per_object: int, seed: int) -> dict:
    """The seeded program: function sizes, tables, callees, constructors, driver calls."""
    if n_objects < 1 or funcs_per_object < 1:
        raise ElflayoutError(f"synthetic: need at least 1 object and 1 function (got {n_objects}×{funcs_per_object})")
    rng = random.Random(seed)
    total = n_objects * funcs_per_object
    ow = max(4, len(str(n_objects - 1)))
    fw = max(3, len(str(funcs_per_object - 1)))
    names = [f"sy_o{i:0{ow}d}_f{j:0{fw}d}" for i in range(n_objects) for j in range(funcs_per_object)]
    objects = [f"o{i:0{ow}d}.o" for i in range(n_objects)]
    stmts = [min(700, int(rng.lognormvariate(2.4, 1.1)) + 1) for _ in range(total)]
    klen = [rng.randint(4, 48) for _ in range(total)]
    slen = [rng.randint(2, 12) for _ in range(total)]
    callees = []
    for g in range(total):
        if g < total - 1 and rng.random() < P_CALLEES:
            callees.append(sorted({rng.randrange(g + 1, total) for _ in range(rng.randint(1, 2))}))
        else:
            callees.append([])
    ctors = {}
    for i in range(n_objects):
        if rng.random() < P_CTOR:
            ctors[i] = [(rng.randrange(total), rng.getrandbits(32)) for _ in range(rng.randint(1, 3))]
    driver_ctor = [(rng.randrange(total), rng.getrandbits(32)) for _ in range(rng.randint(1, 3))]
    k = max(1, int(total * MAIN_SHARE))
    main_calls = [(g, rng.getrandbits(32)) for g in rng.sample(range(total), k)]
    ctor_names = {i: f"sy_o{i:0{ow}d}_ctor" for i in ctors}
    return dict(n_objects=n_objects, funcs_per_object=funcs_per_object, seed=seed, total=total,
                names=names, objects=objects, stmts=stmts, klen=klen, slen=slen, callees=callees,
                ctors=ctors, ctor_names=ctor_names, driver_ctor=driver_ctor, main_calls=main_calls,
                seed_consts=[rng.getrandbits(64) for _ in range(8)])


# ------------------------------------------------------------------------ sources
_PRELUDE = """/* generated by elflayout.targets.synthetic: do not edit */
#define SY_FN __attribute__((noinline, noclone, used))
extern int sy_trace_state __attribute__((visibility("hidden")));
extern void sy_hit(unsigned id) __attribute__((visibility("hidden")));
#define SY_HIT(id) do { if (__builtin_expect(sy_trace_state, 0)) sy_hit(id); } while (0)
"""


def _object_source(plan: dict, i: int) -> str:
    rng = random.Random(plan["seed"] * 1_000_003 + i)
    m = plan["funcs_per_object"]
    names = plan["names"]
    out = [_PRELUDE]
    ids = range(i * m, (i + 1) * m)
    ext = sorted({c for g in ids for c in plan["callees"][g] if c // m != i})
    if i in plan["ctors"]:
        ext += sorted({g for g, _ in plan["ctors"][i] if g // m != i} - set(ext))
    for c in ext:
        out.append(f"unsigned long {names[c]}(unsigned long);")
    for g in ids:
        out.append(f"unsigned long {names[g]}(unsigned long);")
    for g in ids:
        n = names[g]
        kv = ", ".join(f"0x{rng.getrandbits(64):x}UL" for _ in range(plan["klen"][g]))
        out.append(f"static const unsigned long {n}_k[{plan['klen'][g]}] = {{{kv}}};")
        sv = ", ".join(f'"{n}:{s}:{rng.getrandbits(24):x}"' for s in range(plan["slen"][g]))
        out.append(f"static const char *const {n}_s[{plan['slen'][g]}] = {{{sv}}};")
        body = [f"SY_FN unsigned long {n}(unsigned long x)", "{", f"    SY_HIT({g}u);",
                f"    volatile unsigned long v = x ^ 0x{rng.getrandbits(64):x}UL;"]
        for _ in range(plan["stmts"][g]):
            op = rng.randrange(3)
            if op == 0:
                body.append(f"    v = v * 0x{rng.getrandbits(32) | 1:x}UL + 0x{rng.getrandbits(16):x}UL;")
            elif op == 1:
                body.append(f"    v ^= v >> {rng.randint(1, 47)};")
            else:
                body.append(f"    v += 0x{rng.getrandbits(48):x}UL;")
        body.append(f"    unsigned long r = v + {n}_k[x % {plan['klen'][g]}u]"
                    f" + (unsigned char){n}_s[x % {plan['slen'][g]}u][0];")
        for c in plan["callees"][g]:
            body.append(f"    r += {names[c]}(r);")
        body += ["    return r;", "}"]
        out += body
        out.append(f'extern __typeof({n}) {n}_h __attribute__((alias("{n}"), visibility("hidden")));')
    tab = ", ".join(f"(const void *)&{names[g]}_h" for g in ids)
    out.append(f"const void *const sy_o{i}_table[{m}] __attribute__((used)) = {{{tab}}};")
    if i in plan["ctors"]:
        cid = plan["total"] + i
        out.append("extern unsigned long sy_acc;")
        out.append(f"__attribute__((constructor, noinline, noclone, used, visibility(\"hidden\")))"
                   f" void {plan['ctor_names'][i]}(void)")
        out.append("{")
        out.append(f"    SY_HIT({cid}u);")
        for g, x in plan["ctors"][i]:
            out.append(f"    sy_acc += {names[g]}({x}UL);")
        out.append("}")
    return "\n".join(out) + "\n"


def _truth_source(plan: dict) -> str:
    n = plan["total"] + plan["n_objects"]
    return f"""/* generated by elflayout.targets.synthetic: first-execution logger */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
int sy_trace_state __attribute__((visibility("hidden"))) = 1;   /* 1 = not yet checked */
int sy_phase = 0;                       /* the driver's main sets 1 */
unsigned long sy_acc = 0;               /* constructors' results (a sum: order-free) */
static unsigned char sy_seen[{(n + 7) // 8}];
static int sy_fd = -1;
__attribute__((noinline, visibility("hidden"))) void sy_hit(unsigned id)
{{
    if (sy_trace_state == 1) {{
        const char *p = getenv("{TRUTH_ENV}");
        if (!p || !*p) {{ sy_trace_state = 0; return; }}
        sy_fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
        sy_trace_state = sy_fd >= 0 ? 2 : 0;
        if (sy_fd < 0) return;
    }}
    if (id >= {n}u || (sy_seen[id >> 3] & (1u << (id & 7)))) return;
    sy_seen[id >> 3] |= (unsigned char)(1u << (id & 7));
    char buf[32];
    int k = snprintf(buf, sizeof buf, "%u %d\\n", id, sy_phase);
    if (write(sy_fd, buf, (size_t)k) != k) sy_trace_state = 0;
}}
"""


def _driver_source(plan: dict) -> str:
    names = plan["names"]
    used = sorted({g for g, _ in plan["main_calls"]} | {g for g, _ in plan["driver_ctor"]})
    out = ["/* generated by elflayout.targets.synthetic: driver */", "#include <stdio.h>",
           "extern int sy_phase;", "extern unsigned long sy_acc;"]
    out += [f"unsigned long {names[g]}(unsigned long);" for g in used]
    out.append("static unsigned long drv_acc;")
    out.append("__attribute__((constructor)) static void drv_ctor(void)\n{")
    out += [f"    drv_acc += {names[g]}({x}UL);" for g, x in plan["driver_ctor"]]
    out.append("}")
    calls = plan["main_calls"]
    chunks = [calls[k:k + MAIN_CHUNK] for k in range(0, len(calls), MAIN_CHUNK)]
    for c, chunk in enumerate(chunks):
        out.append(f"__attribute__((noinline)) static unsigned long part{c}(void)\n{{\n    unsigned long a = 0;")
        out += [f"    a += {names[g]}({x}UL);" for g, x in chunk]
        out.append("    return a;\n}")
    out.append("int main(void)\n{\n    sy_phase = 1;\n    unsigned long a = 0;")
    out += [f"    a += part{c}();" for c in range(len(chunks))]
    ncalls = len(calls) + len(plan["driver_ctor"]) + sum(len(v) for v in plan["ctors"].values())
    out.append(f'    printf("synthetic: {ncalls} calls, checksum %016lx\\n", a + drv_acc + sy_acc);')
    out.append("    return 0;\n}")
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------------ building
def write_sources(plan: dict, srcdir: Path) -> list[str]:
    """Write the library's C sources (one per object, then ``sy_truth.c``) and
    ``driver.c`` into srcdir; the library's source names, in link order."""
    names = [obj[:-2] + ".c" for obj in plan["objects"]]
    for i, name in enumerate(names):
        (srcdir / name).write_text(_object_source(plan, i))
    (srcdir / "sy_truth.c").write_text(_truth_source(plan))
    (srcdir / "driver.c").write_text(_driver_source(plan))
    return [*names, "sy_truth.c"]


def _params(n_objects, funcs_per_object, seed):
    return dict(generator=GENERATOR_VERSION, n_objects=n_objects, funcs_per_object=funcs_per_object,
                seed=seed, cflags=CFLAGS)


def _compile(srcdir: Path, objdir: Path, sources: list[str], jobs: int) -> None:
    batches = [sources[k:k + SOURCES_PER_GCC] for k in range(0, len(sources), SOURCES_PER_GCC)]

    def one(batch):
        run(["gcc", "-c", *CFLAGS, *[srcdir / s for s in batch]], cwd=objdir,
            what=f"gcc -c {batch[0]}..{batch[-1]}")

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as ex:
        for _ in ex.map(one, batches):
            pass


def _prepare_sources(workdir: Path, n_objects, funcs_per_object, seed, jobs) -> dict:
    """Generate and compile (once per parameters) into workdir/src and workdir/obj."""
    params = _params(n_objects, funcs_per_object, seed)
    stamp = workdir / "build.json"
    plan = make_plan(n_objects, funcs_per_object, seed)
    srcdir, objdir = workdir / "src", workdir / "obj"
    if stamp.exists() and json.loads(stamp.read_text()) == params:
        return plan
    if workdir.exists() and any(workdir.iterdir()) and not stamp.exists():
        raise ElflayoutError(f"{workdir}: not empty and not a synthetic build directory (choose another -o)")
    for d in (srcdir, objdir):
        if d.exists():
            shutil.rmtree(d)
        d.mkdir(parents=True)
    for d in workdir.glob("link-*"):
        shutil.rmtree(d)
    stamp.unlink(missing_ok=True)
    sources = write_sources(plan, srcdir)
    (srcdir / "plan.json").write_text(json.dumps(
        {k: plan[k] for k in ("n_objects", "funcs_per_object", "seed", "names", "objects", "callees",
                              "driver_ctor", "main_calls")}
        | {"ctors": {plan["ctor_names"][i]: v for i, v in plan["ctors"].items()}}))
    _compile(srcdir, objdir, sources, jobs)
    run(["gcc", "-c", "-O1", "-fPIE", "-g0", srcdir / "driver.c", "-o", objdir / "driver.o"], what="gcc driver.c")
    stamp.write_text(json.dumps(params))
    return plan


def _init_array_ctors(lib: Path) -> list[str]:
    """Names of the functions in the library's .init_array, in execution order."""
    import numpy as np

    with ElfImage(lib) as img:
        ia = img.section(".init_array")
        if ia is None:
            return []
        lo, hi = ia.addr, ia.addr + ia.size
        raw = np.frombuffer(img.elf.get_section_by_name(".init_array").data(), "<u8").copy()
        for rel in img.reloc_tables().values():       # RELA: the addend is the pointer
            if "r_addend" not in (rel.dtype.names or ()):
                continue
            sel = (rel["r_offset"] >= lo) & (rel["r_offset"] < hi) & (img.reloc_types(rel) == img.relative_type())
            raw[(rel["r_offset"][sel] - lo) // 8] = rel["r_addend"][sel].astype("<u8")
    want = set(int(x) for x in raw)
    addr2name = {}
    nm = run(["nm", "--defined-only", lib], what=f"nm {lib}").stdout
    for line in nm.splitlines():
        f = line.split()
        if len(f) == 3 and f[1] in "tTwW" and int(f[0], 16) in want:
            addr2name.setdefault(int(f[0], 16), f[2])
    return [addr2name.get(int(a), f"0x{int(a):x}") for a in raw]


def predict_truth(plan: dict, init_order: list[str]) -> list[tuple[int, int]]:
    """First executions (id, phase) predicted from the plan and the .init_array order."""
    seen, order = set(), []
    callees = plan["callees"]
    by_ctor = {name: i for i, name in plan["ctor_names"].items()}

    def visit(g, phase):
        stack = [g]
        while stack:
            x = stack.pop()
            if x in seen:
                continue
            seen.add(x)
            order.append((x, phase))
            if x < plan["total"]:
                stack.extend(reversed(callees[x]))

    for name in init_order:                       # library constructors (our own only)
        if name in by_ctor:
            i = by_ctor[name]
            visit(plan["total"] + i, 0)
            for g, _ in plan["ctors"][i]:
                visit(g, 0)
    for g, _ in plan["driver_ctor"]:               # the executable's constructor
        visit(g, 0)
    for g, _ in plan["main_calls"]:
        visit(g, 1)
    return order


def _observe(driver: Path, logfile: Path) -> tuple[str, list[tuple[int, int]]]:
    env = dict(os.environ)
    env.pop("LD_LIBRARY_PATH", None)
    env[TRUTH_ENV] = str(logfile)
    r = run([driver], env=env, what=f"{driver} (truth run)")
    obs = [tuple(int(v) for v in line.split()) for line in logfile.read_text().splitlines() if line.strip()]
    return r.stdout, obs


def _link(plan: dict, workdir: Path, linker: str, extra_link_args, object_order) -> dict:
    objdir = workdir / "obj"
    objects = [objdir / o for o in plan["objects"]] + [objdir / "sy_truth.o"]
    if object_order is not None:
        by = {}
        for o in objects:
            by[str(o)] = o
            by[o.name] = o
        try:
            ordered = [by[str(Path(x))] if str(Path(x)) in by else by[Path(x).name] for x in object_order]
        except KeyError as e:
            raise ElflayoutError(f"object order: {e.args[0]} is not an object of this synthetic library") from None
        if sorted(map(str, ordered)) != sorted(map(str, objects)):
            raise ElflayoutError(f"object order: must list each of the {len(objects)} objects exactly once "
                                 f"(got {len(object_order)} entries)")
        objects = ordered
    extra = driver_args(extra_link_args)
    key = param_key(linker, args_fingerprint(extra), [o.name for o in objects])
    out = workdir / f"link-{linker}-{key}"
    result_file = out / "built.json"
    if result_file.exists():
        d = json.loads(result_file.read_text())
        return _as_paths(d)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    lib, lmap, driver = out / LIBNAME, out / f"{LIBNAME}.map", out / "driver"
    link_cmd = ["gcc", "-shared", linker_flag(linker), f"-Wl,-soname,{LIBNAME}", f"-Wl,-Map={lmap}",
                "-o", str(lib), *map(str, objects), *extra]
    run(link_cmd, what=f"link {LIBNAME} with {linker}")
    run(["gcc", "-o", driver, objdir / "driver.o", f"-L{out}", "-lsynth", "-Wl,-rpath,$ORIGIN"],
        what="link driver")
    stdout, observed = _observe(driver, out / "truth.log")
    init_order = _init_array_ctors(lib)
    predicted = predict_truth(plan, init_order)
    if observed != predicted:
        k = next((k for k, (a, b) in enumerate(zip(observed, predicted)) if a != b), min(len(observed), len(predicted)))
        raise ElflayoutError(f"{lib}: truth run disagrees with the prediction at first call #{k} "
                             f"({len(observed)} observed, {len(predicted)} predicted)")
    plain = run([driver], env={k: v for k, v in os.environ.items() if k not in (TRUTH_ENV, "LD_LIBRARY_PATH")},
                what=f"{driver}").stdout
    if plain != stdout:
        raise ElflayoutError(f"{driver}: output differs with and without truth logging")
    truth = _truth_doc(plan, observed, linker, [o.name for o in objects], lib, init_order)
    dump_json(truth, out / "truth.json")
    d = dict(lib=str(lib), driver=str(driver), map=str(lmap), truth=str(out / "truth.json"),
             objects=[str(o) for o in objects], link_cmd=link_cmd, sources_dir=str(workdir / "src"),
             outdir=str(out), linker=linker, output=stdout, workload=[str(driver)])
    atomic_write_text(result_file, json.dumps(d, indent=1))
    return _as_paths(d)


def _as_paths(d: dict) -> dict:
    return record_paths(d, ("lib", "driver", "map", "truth", "sources_dir", "outdir"))


def _truth_doc(plan, observed, linker, link_order, lib, init_order) -> dict:
    m, total = plan["funcs_per_object"], plan["total"]
    phase_name = {0: "init", 1: "main"}
    calls, objs, seen_obj = [], [], set()
    for seq, (g, ph) in enumerate(observed):
        if g < total:
            name, obj = plan["names"][g], plan["objects"][g // m]
        else:
            name, obj = plan["ctor_names"][g - total], plan["objects"][g - total]
        calls.append(dict(name=name, object=obj, phase=phase_name.get(ph, str(ph)), seq=seq))
        if obj not in seen_obj:
            seen_obj.add(obj)
            objs.append(dict(object=obj, phase=phase_name.get(ph, str(ph)), seq=seq))
    meta = dict(n_objects=plan["n_objects"], funcs_per_object=plan["funcs_per_object"], seed=plan["seed"],
                linker=linker, lib=str(lib), link_order=link_order, init_array=init_order,
                total_functions=total + len(plan["ctors"]), truth_env=TRUTH_ENV,
                note="first execution of each generated function body (constructors included), observed "
                     "with SYNTH_TRUTH_LOG and checked against the plan replayed in .init_array order; "
                     "crt and sy_truth.o helpers are not listed")
    return envelope("synthetic-truth", 1, meta, functions=[c["name"] for c in calls],
                    objects=[o["object"] for o in objs], calls=calls, object_calls=objs)


def build(workdir=None, n_objects: int = 20, funcs_per_object: int = 8, seed: int = 0, linker: str = "bfd",
          extra_link_args=(), object_order=None, jobs: int = 2) -> dict:
    """Generate, compile and link the synthetic library (cached by parameters).

    ``workdir`` None → ``cache_dir("synthetic", "n{N}-m{M}-s{S}")``. Returns
    ``dict(lib, driver, map, truth, objects, link_cmd, sources_dir, outdir, linker,
    output, workload)``; ``objects`` are in link order, ``output`` is the driver's
    stdout (compare reordered/packed builds by it), ``workload`` the argv to run.
    """
    linker_flag(linker)
    if workdir is None:
        workdir = cache_dir("synthetic", f"n{n_objects}-m{funcs_per_object}-s{seed}")
    workdir = Path(workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    with locked(workdir.parent / f".{workdir.name}.lock"):
        plan = _prepare_sources(workdir, n_objects, funcs_per_object, seed, jobs)
        return _link(plan, workdir, linker, extra_link_args, object_order)


def relink(built: dict, linker: str | None = None, extra_link_args=(), object_order=None) -> dict:
    """Relink a ``build`` result with another linker / ordering args / object order,
    into its own directory beside the baseline (the objects are reused)."""
    workdir = Path(built["sources_dir"]).parent
    params = json.loads((workdir / "build.json").read_text())
    return build(workdir, params["n_objects"], params["funcs_per_object"], params["seed"],
                 linker or built.get("linker", "bfd"), extra_link_args, object_order)


def load_truth(path) -> dict:
    return load_json(path, "synthetic-truth", (1,))


# ----------------------------------------------------------------------------- CLI
def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m elflayout.targets.synthetic",
                                description="Generate and build the synthetic ground-truth library.",
                                epilog="example: python -m elflayout.targets.synthetic --objects 20 --funcs 8 "
                                       "--seed 0 --linker lld -o build/synth")
    p.add_argument("--objects", type=int, default=20, help="number of objects (default 20)")
    p.add_argument("--funcs", type=int, default=8, help="functions per object (default 8)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--linker", choices=("bfd", "gold", "lld", "mold"), action="append",
                   help="linker(s) to link with (repeatable; default bfd)")
    p.add_argument("--jobs", type=int, default=2, help="parallel compile jobs (default 2)")
    p.add_argument("-o", "--output", required=True, help="build directory (reused when parameters match)")
    a = p.parse_args(argv)
    try:
        res = {ln: build(a.output, a.objects, a.funcs, a.seed, ln, jobs=a.jobs) for ln in (a.linker or ["bfd"])}
    except ElflayoutError as e:
        print(f"elflayout: error: {e}", file=sys.stderr)
        return 2
    for ln, d in res.items():
        t = load_truth(d["truth"])
        print(f"{ln}: {d['lib']}  ({len(d['objects'])} objects, {len(t['functions'])} functions first-called)")
        print(f"  driver {d['driver']}\n  map    {d['map']}\n  truth  {d['truth']}\n  output {d['output'].strip()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
