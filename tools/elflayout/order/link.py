"""Library side of ``elflayout link``: read a link command, add a profile's ordering to it,
and judge whether the linker honoured it (the CLI in ``link_cli`` only parses and prints)."""

from __future__ import annotations

import io
import os
import re
from pathlib import Path

from elflayout.errors import ElflayoutError, Finding
from elflayout.fileio import atomic_write_text
from elflayout.order.check import check, object_order_fraction, summary_lines
from elflayout.toolchain import FUSE_LD, chosen_linker, default_linker

DEFAULT_FORMAT = {"lld": "lld", "gold": "gold", "bfd": "ld-script", "mold": "objects"}
# options whose value is the next argument (so it is not an object file)
_TAKES_VALUE = {"-o", "-T", "-Map", "-L", "-l", "-soname", "-h", "-z", "-e", "-rpath", "--version-script", "-x",
                "-MF", "-MT", "-include", "-isystem", "-I", "-D", "-U", "-Xlinker", "--sysroot", "-dynamic-linker"}
_OBJ_EXT = (".o", ".lo", ".obj")


def parse_command(cmd: list[str], linker: str | None) -> dict:
    """What the link command is: driver or direct linker, the linker it runs (``linker``,
    the ``--linker`` given, must agree; None: inferred), its output, its object arguments.

    A driver command that chooses no linker runs the system's default one; it gets no
    ``-fuse-ld`` it did not ask for: a ``--linker`` naming another is refused with the fix."""
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise ElflayoutError("link: no link command given (put it after --)")
    used, how, driver = chosen_linker(cmd)
    if used is None:
        used = default_linker()
        if linker is not None and linker != used:
            raise ElflayoutError(f"{cmd[0]}: the command chooses no linker, so it links with the default one ({used}); "
                                 f"add {FUSE_LD}{linker} to the command (clang also takes {FUSE_LD}lld-N, "
                                 f"{FUSE_LD}PATH, --ld-path=PATH) or give --linker {used}")
    elif linker is not None and used != linker:
        what = how or cmd[0]
        raise ElflayoutError(f"{what}: the command links with {used} but --linker says {linker}")
    out, objs = None, []
    i = 1
    while i < len(cmd):
        a = cmd[i]
        if a == "-o" and i + 1 < len(cmd):
            out = cmd[i + 1]
            i += 2
            continue
        if a.startswith("-o") and len(a) > 2 and driver:
            out = a[2:]
        elif a.startswith("--output="):
            out = a.split("=", 1)[1]
        elif a in _TAKES_VALUE:
            i += 2
            continue
        elif not a.startswith("-") and a.endswith(_OBJ_EXT):
            objs.append(i)
        i += 1
    if out is None:
        raise ElflayoutError(f"{cmd[0]}: the link command has no -o OUTPUT (needed to check the result)")
    return {"cmd": list(cmd), "driver": driver, "output": out, "object_positions": objs, "linker": used}


def apply(parsed: dict, linker: str, fmt: str, text: str, order_file: Path) -> list[str]:
    """The link command with the ordering applied."""
    cmd = list(parsed["cmd"])
    wl = (lambda *a: ["-Wl," + ",".join(a)]) if parsed["driver"] else (lambda *a: list(a))
    if fmt == "objects":
        pos = parsed["object_positions"]
        wanted = [l for l in text.splitlines() if l]
        if sorted(wanted) != sorted(cmd[p] for p in pos):
            raise RuntimeError("link: the object order does not list the command's objects")  # a bug: exit 3
        for p, o in zip(pos, wanted):
            cmd[p] = o
        return cmd
    if fmt == "lld":
        if linker != "lld":
            raise ElflayoutError(f"--format lld: {linker} has no --symbol-ordering-file (use --format auto)")
        return cmd + wl(f"--symbol-ordering-file={order_file}", "--no-warn-symbol-ordering")
    if fmt == "gold":
        if linker != "gold":
            raise ElflayoutError(f"--format gold: {linker} has no --section-ordering-file (use --format auto)")
        return cmd + wl(f"--section-ordering-file={order_file}")
    if fmt == "ld-script":
        if linker not in ("bfd",):
            raise ElflayoutError(f"--format ld-script: an INSERT script is for GNU ld (bfd), not {linker}")
        return cmd + (["-Wl,-T," + str(order_file)] if parsed["driver"] else ["-T", str(order_file)])
    raise ElflayoutError(f"--format {fmt}: unknown")


def command_binds_now(cmd: list[str]) -> bool | None:
    """``-z now`` / ``-z lazy`` as the link command gives them (the last one wins, as in
    ld), with or without the driver's ``-Wl,``; None when it gives neither."""
    words = []
    for a in cmd[1:]:
        words += a[4:].split(",") if a.startswith("-Wl,") else [a]
    out = None
    for i, w in enumerate(words):
        key = words[i + 1] if w == "-z" and i + 1 < len(words) else w[2:] if w.startswith("-z") else None
        if key in ("now", "lazy"):
            out = key == "now"
    return out


def split_command(parsed: dict, dest: Path, progress=None) -> dict:
    """The command with its object and archive arguments replaced by split copies."""
    from elflayout.split.api import split_inputs

    from elflayout.split.api import kept_whole

    cmd = list(parsed["cmd"])
    pos = [i for i, a in enumerate(cmd[1:], 1)
           if not a.startswith("-") and a.endswith(_OBJ_EXT + (".a",)) and os.path.isfile(a)]
    reports = []
    # (-gsplit-dwarf objects whose .dwo is written again: the new .dwo files are named by
    # the output's debug information, so they stay beside it, not in ``dest``)
    dwo_dir = Path(f"{parsed['output'] or 'a.out'}.dwo")
    for k, i in enumerate(pos):
        # One directory per input: two inputs may share a file name.
        reports += split_inputs([cmd[i]], dest / str(k), force=True, dwo_dir=dwo_dir / str(k))
        cmd[i] = str(dest / str(k) / Path(cmd[i]).name)
    if progress:
        objs = [o for r in reports for o in r.objects]
        dwos = sum(bool(o.dwo) for o in objs)
        progress(f"split {len(pos)} objects and archives into {dest}: {sum(o.changed for o in objs)} of "
                 f"{len(objs)} objects split" + (f"; {dwos} new .dwo files in {dwo_dir}" if dwos else ""))
        # sections kept whole move as one piece whatever the order says: say why, here
        for name, why, names in kept_whole(reports):
            progress(f"split kept {name} whole in {len(names)} object{'s' if len(names) != 1 else ''} "
                     f"({', '.join(Path(n).name for n in names[:3])}{' …' if len(names) > 3 else ''}): {why}")
    return dict(parsed, cmd=cmd)


def check_request(parsed: dict, linker: str, fmt: str, split: bool, data_script: bool, dynstr: bool) -> None:
    """Refuse option combinations that cannot work on this command, before anything is linked."""
    if fmt == "objects" and any(a.startswith("@") for a in parsed["cmd"][1:]):
        raise ElflayoutError(f"{parsed['cmd'][0]}: objects inside a response file (@FILE) cannot be reordered; "
                             "expand it on the command line")
    if fmt == "objects" and len(parsed["object_positions"]) < 2:
        raise ElflayoutError(f"{parsed['cmd'][0]}: fewer than two object files on the command line: nothing to reorder")
    if split and fmt == "objects":
        raise ElflayoutError("--split: an object order moves whole objects, so splitting them changes nothing")
    extras = [n for n, on in (("--data-script", data_script), ("--dynstr", dynstr)) if on]
    if extras and (linker != "lld" or fmt != "lld"):
        raise ElflayoutError(f"{extras[0]}: an lld companion (--linker lld, --format lld), not {linker}/{fmt}")


def companion_args(parsed: dict, ordering, workdir: Path, data_script: bool, dynstr: bool, progress=None,
                   string_pool: dict | None = None, pools: dict | None = None,
                   hot_constants: bool = False) -> list[str]:
    """The lld companion arguments of ``ordering`` (``pipeline.Ordering``): a -T
    data-section script and a .dynstr -u/-y response file, written into ``workdir``.
    ``string_pool``: the inputs ``split.hotstrings`` rewrote ({old path: new}); the data
    script then leads with their hot string pools and names the new files; ``pools``:
    the string sections of the touched objects that follow them (``write_lld_data_script``;
    None: all); ``hot_constants``: then their merged constants."""
    wl = (lambda a: "-Wl," + a) if parsed["driver"] else (lambda a: a)
    extra = []
    if data_script:
        dtext, dstats = ordering.data_script(string_pool=string_pool is not None, pools=pools,
                                             hot_constants=hot_constants)
        if string_pool:
            from elflayout.split.hotstrings import retarget_script

            dtext = retarget_script(dtext, string_pool)
        if dstats["data_sections"] or string_pool:
            dfile = workdir / "data.ld"
            atomic_write_text(dfile, dtext)
            extra += [wl("-T"), wl(str(dfile))] if not parsed["driver"] else [f"-Wl,-T,{dfile}"]
        if progress:
            progress(f"data script: {dstats['data_sections']} data sections"
                     + "".join(f"; {o} left as it is (every input section of it is ordered)" for o in dstats["left_out"]))
    if dynstr:
        rtext, rep = ordering.dynstr(option="--dynstr")
        rfile = workdir / "dynstr.rsp"
        atomic_write_text(rfile, rtext)
        extra.append(wl("@" + str(rfile)))
        if progress:
            progress(f".dynstr: {rep['names']} names first")
    return extra


class OrderNotHonoured(Finding):
    """The linker did not honour the ordering; ``lines`` say how and why."""

    def __init__(self, lines: list[str], msg: str):
        super().__init__(msg)
        self.lines = lines


def map_of(cmd: list[str]) -> str | None:
    """The link map a command writes (``-Map=F``, ``-Map F``, ``-Wl,-Map=F``, ``-Wl,-Map,F``)."""
    for i, a in enumerate(cmd):
        a = a.removeprefix("-Wl,").replace("--Map", "-Map")
        if a.startswith("-Map="):
            return a[5:]
        if a.startswith("-Map,"):
            return a[5:]
        if a == "-Map" and i + 1 < len(cmd):
            return cmd[i + 1]
    return None


def check_output(out: str, target, fmt: str, cmd_objs: list[str], linker: str, min_order: float,
                 lib_map: str | None = None, ordered_sections=None) -> list[str]:
    """Lines describing how well the linked ``out`` honours the profile, with the reasons for
    what is out of order (sharper with the link's map and the ordering's section names);
    raise Finding when it does not (fewer than ``min_order`` of the placed functions, or
    objects, in profile order)."""
    if not os.path.exists(out):
        raise ElflayoutError(f"{out}: the link command succeeded but wrote no output")
    res = check(out, target, lib_map=lib_map if lib_map and os.path.exists(lib_map) else None,
                ordered_sections=ordered_sections)
    lines = list(summary_lines(res))
    if fmt == "objects":
        frac = object_order_fraction(out, target, cmd_objs)
        lines.append(f"objects: {'n/a' if frac is None else f'{100 * frac:.1f}%'} of touched objects placed in profile order")
    else:
        frac = res["in_order_fraction"]
    if res.get("stale_hot"):
        raise OrderNotHonoured(lines, f"{out}: {res['stale_hot']}")
    if frac is None:
        raise Finding(f"{out}: no profiled function found in the output: cannot tell whether the ordering was honoured")
    if frac < min_order:
        top = ", ".join(f"{r['count']} {k}" for k, r in (res.get("reasons") or {}).items())
        raise OrderNotHonoured(lines, f"{out}: {linker} did not honour the ordering: only {100 * frac:.1f}% in profile order "
                      f"(< {100 * min_order:.0f}%; out of order or not placed: {top or 'no reason found'})")
    return lines


# GCC generates the code of an LTO link at link time: its sections are per function only
# when the link command itself says -ffunction-sections (the compile's flag does not reach
# that code generation), else every function lands in one .text and no order applies.
FUNCTION_SECTIONS = "-ffunction-sections"
_GCC_DRIVER = re.compile(r"(?:.*-)?(?:gcc|g\+\+|cc|c\+\+)(?:-[\d.]+)?$")     # gcc, gcc-12, x86_64-linux-gnu-g++-12


def gcc_lto_inputs(paths: list[str]) -> list[str]:
    """The inputs (objects, archive members) holding GCC LTO bytecode (``.gnu.lto_*`` sections)."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    from elflayout.split.archive import is_archive, read_archive
    from elflayout.split.reader import GCC_LTO_PREFIX

    out = []
    for p in paths:
        raw = Path(p).read_bytes()
        members = read_archive(raw, p) if is_archive(raw) else [(p, raw)]
        for name, data in members:
            if data[:4] != b"\x7fELF":
                continue
            try:
                names = [s.name for s in ELFFile(io.BytesIO(data)).iter_sections()]
            except (ELFError, ValueError, KeyError, IndexError, EOFError):
                continue    # (not ours to judge here: the linker says what is wrong with it)
            if any(n.startswith(GCC_LTO_PREFIX) for n in names):
                out.append(name if name == p else f"{p}({name})")
                break
    return out


def lto_function_sections(parsed: dict, inputs: list[str]) -> tuple[dict, str | None]:
    """The command with ``-ffunction-sections`` added when it is a GCC driver linking
    GCC LTO bytecode without it; and the step's note (None: nothing to do). A direct
    linker call cannot be given it: refused with the fix."""
    cmd = parsed["cmd"]
    if any(a in (FUNCTION_SECTIONS, "-fno-function-sections") for a in cmd[1:]):
        return parsed, None
    lto = gcc_lto_inputs(inputs)
    if not lto:
        return parsed, None
    shown = ", ".join(Path(x).name for x in lto[:3]) + (" …" if len(lto) > 3 else "")
    if not parsed["driver"] or not _GCC_DRIVER.match(Path(cmd[0]).name):
        raise ElflayoutError(f"{cmd[0]}: links GCC LTO bytecode ({shown}) without {FUNCTION_SECTIONS}, so the code "
                             f"generated at link time is one .text no order can move; link through gcc with "
                             f"-flto {FUNCTION_SECTIONS}")
    new = dict(parsed, cmd=[cmd[0], FUNCTION_SECTIONS, *cmd[1:]],
               object_positions=[p + 1 for p in parsed["object_positions"]])
    return new, (f"added: {len(lto)} input{'s' if len(lto) != 1 else ''} hold GCC LTO bytecode ({shown}), whose code "
                 f"is generated at link time, in one .text without it")
