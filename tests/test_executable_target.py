"""An executable is a target like a library: profiled (valgrind), ordered, relinked with
lld and GNU ld, checked (check-order) and still giving the same output. PIE and not."""

import subprocess

import pytest

from conftest import need_tool, run_cli
from test_profile import need_firsttouch

N = 24
# Functions the program calls, in this order: the ordered link must put them first, in it.
CALLED = [17, 3, 11, 22, 5, 8]
SRC = "\n".join(f"__attribute__((noinline)) int f{k}(int x) {{ return x * {k + 3} + {k}; }}" for k in range(N)) + """
#include <stdio.h>
int main(void) {
    int acc = 0;
""" + "".join(f"    acc += f{k}(acc + {k});\n" for k in CALLED) + """    printf("%d\\n", acc);
    return 0;
}
"""


def _link(tmp_path, obj, tag, pie, linker, *extra):
    exe = tmp_path / tag
    subprocess.run(["gcc", "-pie" if pie else "-no-pie", f"-fuse-ld={linker}", "-o", exe, obj,
                    f"-Wl,-Map={exe}.map", *extra], check=True, capture_output=True)
    return exe


@pytest.mark.valgrind
@pytest.mark.parametrize("pie", [False, True], ids=["exec", "pie"])
@pytest.mark.parametrize("linker", ["lld", "bfd"])
def test_executable_profile_order_link(tmp_path, pie, linker):
    need_firsttouch()
    need_tool("gcc")
    need_tool("ld.lld")
    c = tmp_path / "prog.c"
    c.write_text(SRC)
    obj = tmp_path / "prog.o"
    subprocess.run(["gcc", "-O1", "-ffunction-sections", "-fPIE" if pie else "-fno-pie", "-c", "-o", obj, c],
                   check=True)
    base = _link(tmp_path, obj, "base", pie, linker)
    expected = subprocess.run([base], capture_output=True, text=True, check=True).stdout
    prof = tmp_path / "p.json"
    run_cli("profile", "--target", base, "--map", f"{base}.map", "-o", prof, "--", base)
    fmt = "lld" if linker == "lld" else "ld-script"
    order = tmp_path / f"order.{fmt}"
    run_cli("order", prof, "--format", fmt, "-o", order)
    flag = ([f"-Wl,--symbol-ordering-file={order}", "-Wl,--no-warn-symbol-ordering"] if linker == "lld"
            else [f"-Wl,-T,{order}"])
    ordered = _link(tmp_path, obj, "ordered", pie, linker, *flag)
    assert subprocess.run([ordered], capture_output=True, text=True, check=True).stdout == expected
    r = run_cli("check-order", ordered, "--profile", prof, "--map", f"{ordered}.map")
    assert "100.0% in profile order" in r.stdout, r.stdout
    nm = subprocess.run(["nm", "-n", "--defined-only", ordered], capture_output=True, text=True, check=True).stdout
    placed = [ln.split()[2] for ln in nm.splitlines() if ln.split()[2:] and ln.split()[2] in
              {f"f{k}" for k in range(N)}]
    assert placed[:len(CALLED)] == [f"f{k}" for k in CALLED], placed
