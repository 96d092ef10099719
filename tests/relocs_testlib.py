"""A small C library with every kind of dynamic relocation, for tests and benchmarks.

Pointer tables of varied length and stride (runs, bitmaps and gaps in RELR), a
linked list of structs (RELATIVE into .data.rel.ro and .data), pointers to libc
functions (R_X86_64_64 / GLOB_DAT), TLS (DTPMOD64/DTPOFF64 or TPOFF64), an ifunc
(IRELATIVE), a writable pointer array read by the driver (COPY-free access through
GOT), and a driver that prints a checksum of all of it.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from elflayout.errors import ElflayoutError


def _source(n_tables: int, ifunc: bool = True) -> str:
    out = ['#include <stdio.h>', '#include <string.h>', '#include <stdlib.h>',
           'static int f0(int x){return x+1;} static int f1(int x){return x*2;} static int f2(int x){return x-3;}',
           'struct rec { const char *name; int (*fn)(int); const struct rec *next; long v; };',
           'static const struct rec recs[4] = {{"r0",f0,&recs[1],1},{"r1",f1,&recs[2],2},'
           '{"r2",f2,&recs[3],3},{"r3",f0,0,4}};',
           'char *mutable_ptrs[] = {"m0", "m1", (char*)&recs[2], 0};',
           'void *extern_ptrs[] = {(void*)&printf, (void*)&strlen, (void*)&malloc};',
           '__thread int tls_counter = 5;', 'static __thread const char *tls_name = "tls";',
           'static int impl_a(void){return 42;}', 'static void *resolve_pick(void){ return (void*)impl_a; }',
           'int pick(void) __attribute__((ifunc("resolve_pick")));' if ifunc else 'int pick(void){return impl_a();}',
           'extern char **environ;']
    # Tables with a stride of 1..9 words and lengths up to 300: long runs, sparse bitmaps, gaps.
    for t in range(n_tables):
        stride, n = 1 + t % 9, 5 + (t * 37) % 300
        out.append(f"struct s{t} {{ const char *p; long pad[{stride - 1 if stride > 1 else 1}]; }};")
        items = ", ".join(f'{{"t{t}e{i}"}}' for i in range(n))
        out.append(f"static const struct s{t} tab{t}[{n}] = {{{items}}};")
    out.append("long lib_report(void) {\n  long sum = 0;")
    for t in range(n_tables):
        n = 5 + (t * 37) % 300
        out.append(f"  for (int i = 0; i < {n}; i += 7) sum += strlen(tab{t}[i].p) * (i + {t});")
    out.append("""  for (const struct rec *r = &recs[0]; r; r = r->next) sum += r->fn(r->v) + strlen(r->name);
  sum += strlen(mutable_ptrs[0]) + ((const struct rec*)mutable_ptrs[2])->v;
  sum += (extern_ptrs[1] == (void*)&strlen);
  tls_counter++; sum += tls_counter + strlen(tls_name) + pick() + (environ != 0);
  printf("lib_report: %ld %s\\n", sum, recs[2].name);
  return sum;
}""")
    return "\n".join(out) + "\n"


DRIVER = """#include <stdio.h>
long lib_report(void);
extern char *mutable_ptrs[];
int main(void){ long s = lib_report(); printf("main: %ld %s\\n", s, mutable_ptrs[1]); return 0; }
"""


def build(workdir, linker: str = "bfd", n_tables: int = 24, extra=(), run: bool = True, ifunc: bool = True) -> dict:
    """Compile and link ``libt.so`` + ``main`` (RUNPATH $ORIGIN) with ``linker``.

    Returns dict(lib, driver, dir, output) where output is the driver's stdout (None
    without ``run``: e.g. lld 14's RELR output, which glibc refuses to load).
    """
    w = Path(workdir)
    d = w / f"{linker}{'-' + '-'.join(x.strip('-').replace(',', '_').replace('=', '_') for x in extra) if extra else ''}"
    d.mkdir(parents=True, exist_ok=True)
    obj = compile_lib(w, n_tables, ifunc)
    lib, drv = d / "libt.so", d / "main"
    _run(["gcc", "-shared", f"-fuse-ld={linker}", "-Wl,-soname,libt.so", *extra, str(obj), "-o", str(lib)])
    _run(["gcc", str(w / "main.c"), "-o", str(drv), f"-L{d}", "-lt", "-Wl,-rpath,$ORIGIN"])
    out = _run([str(drv)]) if run else None
    return dict(lib=lib, driver=drv, dir=d, output=out)


def compile_lib(workdir, n_tables: int = 24, ifunc: bool = True) -> Path:
    """``libt.o`` (and ``main.c``, the driver's source) in ``workdir``, compiled once.
    Without ``ifunc`` the library has no IRELATIVE relocation (the self form refuses those)."""
    w = Path(workdir)
    src, obj = w / "libt.c", w / "libt.o"
    if not obj.exists():
        src.write_text(_source(n_tables, ifunc))
        (w / "main.c").write_text(DRIVER)
        _run(["gcc", "-O1", "-fPIC", "-c", str(src), "-o", str(obj)])
    return obj


def _run(cmd) -> str:
    if shutil.which(cmd[0]) is None and not Path(cmd[0]).exists():
        raise ElflayoutError(f"{cmd[0]} is not installed")
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        raise ElflayoutError(f"{' '.join(cmd)} failed: {r.stderr.strip()[:500]}")
    return r.stdout
