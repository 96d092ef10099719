"""The library function behind ``elflayout link``: run a real link command with a
profile's ordering and the default steps (``order.defaults``) applied, then check it.

``relink(cmd, LinkOptions(...), say)`` returns a ``LinkResult`` (exit status, the
command run, the steps decided and the check's lines); the CLI (``link_cli``) only
parses options and prints. Bad input raises ``ElflayoutError``; an ordering the linker
did not honour raises ``link.OrderNotHonoured``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from elflayout import fileio
from elflayout.elfcore import ElfImage
from elflayout.errors import ElflayoutError, Finding
from elflayout.order import defaults, pipeline
from elflayout.order.defaults import Step
from elflayout.order.link import (_OBJ_EXT, DEFAULT_FORMAT, FUNCTION_SECTIONS, apply, check_output, check_request,
                                  command_binds_now, companion_args, lto_function_sections, map_of, parse_command,
                                  split_command, OrderNotHonoured)
from elflayout.toolchain import linker_name

# formats that name input sections, not symbols: they need the link's section names
NAMES_SECTIONS = ("gold", "ld-script")

@dataclass
class LinkOptions:
    """``elflayout link``'s options. None for ``data_script``, ``dynstr``, ``split`` and
    ``pack``, ``move_symtab`` (and ``algorithm="auto"``): decided by ``order.defaults``
    (``move_symtab``: by the readahead model, ``move_symtab``); False/"none": off."""

    profile: str | None = None
    linker: str | None = None
    format: str = "auto"
    algorithm: str = "auto"
    target: str | None = None
    lib: str | None = None
    objects_from: str | None = None
    data: bool = True
    combine: str | None = None
    allow_stale_profile: bool = False
    keep_order_file: str | None = None
    force: bool = False
    min_order: float = 0.9
    data_script: bool | None = None
    dynstr: bool | None = None
    split: bool | None = None
    pack: str | None = None
    check: bool = False
    root: str | None = None
    check_order: bool = True
    move_symtab: bool | None = None
    readahead_marks: bool = True
    order_dynsym: bool = False
    reorder_dynstr: bool | None = None
    hot_strings: bool | None = None
    hot_constants: bool | None = None
    move_rodata: bool = True
    code_tail: bool = True


@dataclass
class LinkResult:
    status: int
    command: list[str]
    steps: list[Step] = field(default_factory=list)
    check: list[str] = field(default_factory=list)


def run_command(cmd: list[str]) -> int:
    """Run a link command, its output passing through; its exit status."""
    try:
        r = subprocess.run(cmd)
    except FileNotFoundError:
        raise ElflayoutError(f"{cmd[0]}: command not found") from None
    if r.returncode != 0:
        print(f"elflayout: link command failed (exit {r.returncode})", file=sys.stderr)
    return r.returncode


def _no_status(_msg):
    return contextlib.nullcontext()


def relink(cmd: list[str], opts: LinkOptions, say: Callable[[str], None] = lambda m: None,
           status=_no_status) -> LinkResult:
    """Link ``cmd`` as ``opts`` asks (see the module docstring); ``say`` gets progress
    lines, ``status(msg)`` a context manager around the long self-packing step."""
    parsed = parse_command(cmd, None if opts.linker is None else linker_name(opts.linker))
    linker = parsed["linker"]
    fmt = DEFAULT_FORMAT[linker] if opts.format == "auto" else opts.format
    _check_options(opts, linker)
    pack = defaults.pack_form(opts.pack if opts.profile else (opts.pack or "none"), linker)
    if opts.profile is None:
        rc = link_packed(parsed, parsed["cmd"], pack.value, opts, say, status)
        if not rc:
            _note_pack(pack, parsed["output"])
        return LinkResult(rc, parsed["cmd"], [pack] + (_after_link(parsed["output"], opts, linker, {}) if not rc else []))
    if opts.data_script and not opts.data:
        raise ElflayoutError("--data-script: data order is off (--no-data)")
    inputs = [a for a in parsed["cmd"][1:] if not a.startswith("-") and a.endswith(_OBJ_EXT + (".a",))
              and os.path.isfile(a)]
    split = defaults.split_step(opts.split, inputs, fmt)
    parsed, lto_note = lto_function_sections(parsed, inputs)
    check_request(parsed, linker, fmt, bool(split.value), bool(opts.data_script), bool(opts.dynstr))
    if opts.keep_order_file:
        fileio.check_output(opts.keep_order_file, force=opts.force, inputs=(opts.profile,))
    cmd_objs = [parsed["cmd"][p] for p in parsed["object_positions"]]
    lld = fmt == "lld" and linker == "lld"
    with tempfile.TemporaryDirectory(prefix="elflayout-link-") as td:
        objects_from = opts.objects_from
        if split.value:
            parsed = split_command(parsed, Path(td) / "split", say)
            if lld and objects_from is None:
                objects_from = _prelink_map(parsed, Path(td) / "prelink", say, "split objects")
        req = pipeline.Request(opts.profile, fmt, algorithm="first-access" if opts.algorithm == "auto" else opts.algorithm,
                               target=opts.target, lib=opts.lib, objects_from=objects_from, data=opts.data,
                               combine=opts.combine, allow_stale_profile=opts.allow_stale_profile,
                               default_target=Path(parsed["output"]).name, objects=tuple(cmd_objs),
                               bind_now=command_binds_now(parsed["cmd"]), split=bool(split.value),
                               move_rodata=opts.move_rodata,
                               header=f"generated by elflayout link --linker {linker} from {Path(opts.profile).name}")
        o = pipeline.order(req)
        if o.universe is None and fmt in NAMES_SECTIONS and objects_from is None:
            # gold and GNU ld order input sections by name; without a map of the profiled
            # build, .text.NAME is a guess that misses constructors (C1 is an alias in C2's
            # section) and whole functions in .text.startup./.unlikely.: the link's own map knows
            try:
                objects_from = _prelink_map(parsed, Path(td) / "prelink", say, "the profile has no link map")
            except ElflayoutError as e:  # the guessed names are still worth a try; check-order judges
                print(f"elflayout: warning: {e}; section names guessed as .text.NAME", file=sys.stderr)
            else:
                req = dataclasses.replace(req, objects_from=objects_from)
                o = pipeline.order(req)
        algo = defaults.algorithm_step(opts.algorithm, fmt, o.target, o.universe, move_symtab=opts.move_symtab,
                                       marks=opts.readahead_marks)
        if algo.value != req.algorithm:
            o = pipeline.order(dataclasses.replace(req, algorithm=algo.value))
        o, marks = _marks_step(o, fmt, opts)
        for w in o.warnings:
            print(f"elflayout: warning: {w}", file=sys.stderr)
        _say_matched(o, fmt, linker, say)
        steps = [split, algo, *_companion_steps(opts, o, lld), defaults.profile_step(o.profile.metadata)]
        if lto_note:
            steps.append(Step("LTO sections", FUNCTION_SECTIONS, lto_note))
        if split.value and steps[2].value and not _data_sections_split(o.universe):
            steps[2].why += ("; data sections are named as split: profile a build of split objects "
                             "(elflayout split, docs/splitting.md) for them to match")
        moved = pools = None
        if _hot_strings_on(opts, o, lld and steps[2].value is True):
            moved, hot, pools = hot_strings(parsed, o, Path(td) / "hotstrings", say)
            parsed = dict(parsed, cmd=[str(moved.get(a, a)) for a in parsed["cmd"]])
            steps.append(hot)
        order_file = Path(opts.keep_order_file) if opts.keep_order_file else Path(td) / f"order.{fmt}"
        fileio.atomic_write_text(order_file, o.text)
        rodata = defaults.rodata_step(opts.move_rodata, linker, fmt)
        full = apply(parsed, linker, fmt, o.text, order_file)
        full += companion_args(parsed, o, Path(td), steps[2].value is True, steps[3].value is True, say,
                               string_pool=moved, pools=pools, hot_constants=_hot_constants(opts, o))
        _note_companions(steps, o)
        shown = full if len(full) <= 24 else [*full[:12], f"... ({len(full) - 16} more arguments) ...", *full[-4:]]
        say(shlex.join(shown))
        rc = link_packed(parsed, full, pack.value, opts, say, status)
        steps.insert(4, pack)
        steps.insert(2, marks)
        steps += [rodata] if rodata else []
        if rc:
            return LinkResult(rc, full, steps)
        _note_pack(pack, parsed["output"])
        if pack.value == "pack-relocs":
            post_pack(pack, parsed["output"])
        if (fmt, linker) in (("ld-script", "bfd"), ("gold", "gold")):
            steps.append(relink_tail(parsed, o, full, order_file, pack, opts, say, status))
    steps += _after_link(parsed["output"], opts, linker, o.profile.metadata, algo.value, (o.target, map_of(full)))
    return _checked(LinkResult(0, full, steps), parsed, o, opts, cmd_objs, linker, bool(split.value))


def _checked(res: LinkResult, parsed: dict, o, opts: LinkOptions, cmd_objs: list[str], linker: str,
             split: bool) -> LinkResult:
    """The check step: the output's function order against the profile (``check_output``)."""
    from elflayout.order.check import ordered_sections_of

    if not opts.check_order:
        res.steps.append(Step("check", False, "--no-check-order"))
        return res
    fmt = o.request.format
    sections = ordered_sections_of(o.text) if fmt in ("gold", "ld-script") else None
    res.steps.append(Step("check", True,
                          f"at least {100 * opts.min_order:.0f}% of the placed functions in profile order"))
    try:
        res.check = check_output(parsed["output"], o.target, fmt, cmd_objs, linker, opts.min_order,
                                 map_of(res.command), sections or None)
    except OrderNotHonoured as e:
        e.split = split  # the CLI words the split hint by it
        raise
    return res


def _marks_step(o, fmt: str, opts: LinkOptions):
    """``order.marks.step`` unless ``--no-readahead-marks``: (the ordering, the step)."""
    from elflayout.order import marks

    if not opts.readahead_marks:
        return o, Step("readahead marks", False, "--no-readahead-marks")
    return marks.step(o, fmt, opts.move_symtab, defaults.READ_AHEAD_KB)


def relink_tail(parsed: dict, o, full: list[str], order_file: Path, pack: Step, opts: LinkOptions, say,
                status) -> Step:
    """``order.tail``: when the model says the read of the touched code's end runs into
    cold code, link ``full`` again with those functions after the cold code (the
    ordering file rewritten), and keep whichever output the model predicts to read
    fewer pages (``o.text`` then says which ordering was applied)."""
    import shutil

    from elflayout.order import tail

    if not opts.code_tail:
        return Step("code tail", False, "--no-code-tail")
    out, lmap = parsed["output"], map_of(full)
    lmap = lmap if lmap and os.path.exists(lmap) else None
    found = tail.find(out, o.target, o.layout, lmap)
    if not found.functions:
        return Step("code tail", False, found.why)
    keep = [(p, p + ".elflayout-first") for p in (out, lmap) if p and os.path.exists(p)]
    for p, q in keep:
        shutil.copy2(p, q)
    o2 = pipeline.order(dataclasses.replace(o.request, tail=found.functions))
    fileio.atomic_write_text(order_file, o2.text)
    rc = link_packed(parsed, full, pack.value, opts, say, status)
    if not rc and pack.value == "pack-relocs":
        post_pack(Step("pack", pack.value, ""), out)  # as the first output was
    after = tail.predict(out, o.target, lmap)[0] if not rc else None
    if after is None or after >= found.pages:
        for p, q in keep:
            os.replace(q, p)
        fileio.atomic_write_text(order_file, o.text)
        why = f"relink {'failed' if rc else f'predicted {after:,} pages, not fewer'}: kept the first link"
        return Step("code tail", False, f"{found.why}; {why}")
    for _p, q in keep:
        os.unlink(q)
    o.text = o2.text
    return Step("code tail", f"{len(found.functions)} functions after the cold code", found.why,
                      f"{found.pages:,} -> {after:,} pages (readahead model, the profile placed by name)")


def _check_options(opts: LinkOptions, linker: str) -> None:
    """Refuse what cannot work, before anything is linked."""
    if opts.pack in ("relr", "self") and linker == "gold":
        raise ElflayoutError("--pack: gold has no -z pack-relative-relocs (use lld, bfd or mold)")
    if (opts.check or opts.root) and opts.pack != "self":
        raise ElflayoutError(f"{'--check' if opts.check else '--root'}: only with --pack self")
    if opts.root and not opts.check:
        raise ElflayoutError("--root: only with --check (it is where the check loads the output)")
    if opts.profile is None:
        if opts.pack not in ("relr", "self"):
            raise ElflayoutError("link: give --profile (ordering) and/or --pack FORM")
        extra = [o for o, on in (("--split", opts.split), ("--data-script", opts.data_script),
                                 ("--hot-strings", opts.hot_strings),
                                 ("--dynstr", opts.dynstr), ("--keep-order-file", opts.keep_order_file),
                                 ("--lib", opts.lib), ("--no-data", not opts.data), ("--combine", opts.combine),
                                 ("--allow-stale-profile", opts.allow_stale_profile)) if on]
        if extra:
            raise ElflayoutError(f"{extra[0]}: an ordering option, which needs --profile")


# strings reached by section + addend: hot and moved too (split.hotstrings, a section symbol per pool)
BY_ADDEND = False


def _hot_strings_on(opts: LinkOptions, o, lld_script: bool) -> bool:
    """``--hot-strings``: by default on when the profile recorded the strings its run read
    (``profile --strings``) and lld's data script places the pools; asked for without
    that script, refused."""
    if opts.hot_strings is None:
        from elflayout.stringsets import recorded_strings

        return lld_script and recorded_strings(o.target) is not None
    if opts.hot_strings and not lld_script:
        raise ElflayoutError("--hot-strings: its pools are placed by lld's data script (--linker lld, "
                             "--format lld, no --no-data-script)")
    return opts.hot_strings


def _hot_constants(opts: LinkOptions, o) -> bool:
    """``--hot-constants``, by default on when the profile recorded the read-only bytes
    read: the hot data is then placed by them, and the touched objects' constants are
    what is left read in the cold ``.rodata`` (libpython3.11: 910 → 901 pages)."""
    return opts.hot_constants if opts.hot_constants is not None else o.target.rodata_read() is not None


def hot_strings(parsed: dict, o, dest: Path, say) -> tuple[dict[str, Path], Step, dict | None]:
    """The command's objects and archives with the strings the profiled run read (a
    ``profile --strings`` target), else those relocations of the profiled code and data
    reach, moved into hot pools (``split.hotstrings``, each object proved), in ``dest``:
    {input: rewritten copy}, the step, and (strings read) the string sections of each
    object still holding one, the only ones the data script then places hot (else None:
    the touched objects' pools, where the strings the static set missed are)."""
    from elflayout.split import hotstrings

    secs = hotstrings.hot_sections(o.layout)
    files = {k for k in secs if os.path.isfile(k.split("(", 1)[0] if k.endswith(")") else k)}
    # strings the run read (profile --strings), else those the profiled code and data reach
    hot = hotstrings.recorded_strings(o.target)
    recorded = hot is not None
    by_addend = BY_ADDEND or recorded
    src = "read by the profiled run" if recorded else "reached from the profiled sections"
    if hot is None:
        hot = hotstrings.static_hot_strings({k: v for k, v in secs.items() if k in files}, BY_ADDEND)
    inputs = [a for a in parsed["cmd"][1:] if not a.startswith("-") and a.endswith(_OBJ_EXT + (".a",))
              and os.path.isfile(a)]
    # strings read are read wherever they are: an object whose code did not run holds some
    # (a type's docstring PyType_Ready reads)
    moved, tot = hotstrings.rewrite_inputs(inputs, dest, hot, only=None if recorded else files, by_addend=by_addend)
    say(f"hot strings: {len(hot):,} strings {src}; {tot['moved_pieces']:,} moved in "
        f"{tot['objects_changed']:,} of {tot['objects']:,} objects, {tot['pinned_pieces']:,} left (named by "
        f"section + addend or a global symbol)")
    why = ("strings the profiled run read" if recorded else
           "strings the profiled code and data reach") + ", in pools of their own"
    if not moved:
        why = ("no profiled object of the profile's map is an input of this command" if not tot["objects"]
               else "no such string in the command's objects")
    pools = tot["hot_left"] if recorded else None
    return moved, Step("hot strings", bool(moved), why,
                       f"{tot['moved_bytes']:,} bytes of strings first in .rodata" if moved else ""), pools


def _companion_steps(opts: LinkOptions, o, lld: bool) -> list[Step]:
    """The data-order and .dynstr steps (before the files are written)."""
    if not opts.data:
        data = Step("data order", False, "--no-data")
    elif lld:
        data = Step("data order", opts.data_script is not False,
                    "lld data-section script (-T)" if opts.data_script is not False else "--no-data-script")
    else:
        data = Step("data order", "in the ordering file", f"{o.request.format} places data sections itself")
    lib = o.request.lib or o.target.path
    if opts.dynstr is not None:
        dyn = Step(".dynstr order", opts.dynstr, "asked" if opts.dynstr else "--no-dynstr")
    elif not lld:
        dyn = Step(".dynstr order", False, "only lld orders .dynstr (-u options)")
    elif not lib or not os.path.exists(lib):
        dyn = Step(".dynstr order", False, f"the profiled library {lib} is not there (give --lib)")
    else:
        dyn = Step(".dynstr order", True, "names ld.so reads first")
    return [data, dyn]


def _data_sections_split(universe) -> bool:
    """Whether the profiled build's map has data sections of their own (``.data.NAME``:
    -fdata-sections or split objects); True when there is no map to say."""
    from elflayout.split.extents import SPLIT_PREFIX

    names = getattr(universe, "extent_names", None)
    if not names:
        return True
    data = tuple(p for s, p in SPLIT_PREFIX.items() if not s.startswith(".text"))
    # a generic name (.data.rel.ro, .rodata.str1.1) is no section of its own
    return any(str(n).startswith(data) and str(n) not in SPLIT_PREFIX
               and not str(n).startswith((".rodata.str", ".rodata.cst")) for n in names)


def _note_companions(steps: list[Step], o) -> None:
    """What the ordering and its companions place, as the steps' predictions."""
    n = o.report.get("data", {}).get("sections")
    if steps[2].value is not False and n is not None:
        steps[2].predicted = f"{n:,} data sections placed"
    r = o.report.get("functions", {})
    steps[1].predicted += ("; " if steps[1].predicted else "") + f"{r.get('matched', 0):,} functions ordered"


def _note_pack(pack: Step, output: str) -> None:
    """A relr link whose linker ignored ``-z pack-relative-relocs``: say so, not "relr"."""
    if pack.value == "relr" and not defaults.relr_written(output):
        pack.value, pack.why = False, f"the linker ignored -z pack-relative-relocs (lld < 15, GNU ld < 2.38): {pack.why}"


def post_pack(pack: Step, output: str) -> None:
    """``pack-relocs --check`` of the linked ``output`` in place (relr form); a file it
    cannot pack (or prove) is left as linked, and the step says why."""
    from elflayout.relocs import simload
    from elflayout.relocs.pack import READAHEAD_UNIT, AlreadyPacked, pack as pack_relocs

    try:
        st = pack_relocs(output, output, verify=lambda a, b: simload.check(a, b), replace=True, form="relr",
                         cut_unit=READAHEAD_UNIT)
    except AlreadyPacked as e:
        pack.value, pack.why = False, f"{e}: nothing to pack"
        return
    except (ElflayoutError, Finding) as e:  # left as linked: packing is a default, not what was asked
        pack.value, pack.why = False, f"not packed, the output is as linked: {e}"
        return
    pack.predicted = (f"{st['packed']:,} of {st['relocations']:,} relocations packed, .rela.dyn "
                      f"{st['rela_dyn_bytes_before']:,} -> {st['rela_dyn_bytes_after']:,} bytes + "
                      f"{st['relr_bytes']:,} bytes of .relr.dyn; equivalence proved; " + _cut_note(st.get("cut")))


def _cut_note(cut: dict | None) -> str:
    """What happened to the freed whole pages (``pack``'s ``cut`` statistics)."""
    if cut and cut.get("pages"):
        return f"{cut['pages']} freed pages cut from the file"
    return f"freed pages kept in the file ({cut['why'] if cut else 'none whole'})"


def _after_link(output: str, opts: LinkOptions, linker: str, metadata: dict, algorithm: str | None = None,
                profiled=None) -> list[Step]:
    """The rewrites of the linked (and packed) output, in this order: the dynamic-symbol
    order (asked) needs the final relocation tables; the .dynstr rewrite
    (``reorder_dynstr``) the final .dynsym; the move (``move_symtab``), the final file.
    ``profiled``: (the profile's target, the link's map or None)."""
    steps = [order_dynsym(output, metadata)] if opts.order_dynsym else []
    if opts.reorder_dynstr or profiled is not None:
        steps.append(reorder_dynstr(output, opts.reorder_dynstr, linker, metadata, profiled))
    if opts.move_symtab is None and profiled is None:
        return steps  # auto needs a profile to predict with: a link with --pack only
    return steps + [move_symtab(output, algorithm, opts.move_symtab, *(profiled or ()))]


def reorder_dynstr(output: str, asked: bool | None, linker: str, metadata: dict, profiled=None) -> Step:
    """``order.dynstr_order`` of the linked output in place: the strings ld.so reads (the
    output's symbol relocations, the profiled program's imports, the dynamic and version
    strings) first in .dynstr. ``asked`` None: not with lld (``--dynstr`` orders it at the
    link), else kept only when the readahead model predicts fewer pages for the profile
    (``profiled``: its target and the link's map); False: off."""
    from elflayout.order import dynstr, dynstr_order

    name = ".dynstr rewrite"
    if asked is False:
        return Step(name, False, "--no-reorder-dynstr")
    if asked is None and linker == "lld":
        return Step(name, False, "lld orders .dynstr at the link (--dynstr)")
    tmp = Path(output).with_name(f".{Path(output).name}.dynstr")
    try:
        names, _ = dynstr.read_names(output, dynstr.workload_executable(metadata))
        st = dynstr_order.reorder(output, tmp, names)
        shown = ""
        if profiled is not None:
            target, lmap = profiled
            lmap = lmap if lmap and os.path.exists(lmap) else None
            before, after = (dynstr_order.predict(p, target, lmap, names) for p in (output, tmp))
            shown = f"; readahead model: {before:,} -> {after:,} pages"
            if asked is None and after >= before:
                return Step(name, False, "the readahead model predicts no fewer pages", shown[2:])
        os.replace(tmp, output)
    except ElflayoutError as e:  # the output stays as linked
        if asked:
            raise
        return Step(name, False, f"not reordered: {e}")
    finally:
        tmp.unlink(missing_ok=True)
    why = "asked" if asked else "the readahead model predicts fewer pages"
    return Step(name, True, why, f"{st['first']:,} of {st['strings']:,} strings ({st['first_bytes']:,} bytes) first, "
                f"{st['references']:,} references mapped and proved" + shown)


def order_dynsym(output: str, metadata: dict) -> Step:
    """``order.dynsym`` of the linked output in place: the symbols ld.so looks up (the
    output's symbol relocations, the profiled program's imports) first in .dynsym."""
    from elflayout.order import dynstr
    from elflayout.order.dynsym import reorder_in_place

    try:
        names, _ = dynstr.read_names(output, dynstr.workload_executable(metadata))
        st = reorder_in_place(output, names)
    except ElflayoutError as e:  # the output stays as linked
        return Step("dynsym order", False, f"not ordered: {e}")
    (b0, b1), (w0, w1) = st["buckets"], st["bloom_words"]
    shape = f"; {b0:,} -> {b1:,} buckets, {w0:,} -> {w1:,} bloom words" if (b0, w0) != (b1, w1) else ""
    return Step("dynsym order", True, "asked", f"{st['hot']:,} of {st['hashed']:,} hashed symbols looked up "
                f"first in .dynsym, .gnu.version and the .gnu.hash chains{shape}; lookups proved unchanged")


def move_symtab(output: str, algorithm: str | None = None, asked: bool | None = True, target=None,
                lib_map: str | None = None) -> Step:
    """``order.tuck`` of the linked output in place: the file ends with its last segment;
    the unloaded sections go where the readahead model predicts the fewest pages for the
    profile ``target``'s touches (``tuck.predict_places``), else (no profile) into the hole
    the code order leaves cold (``tuck.cold_hole``). ``asked`` None: moved only when the
    model predicts fewer pages than at the tail; False: not moved."""
    from elflayout.order import tuck

    if asked is False:
        return Step("move symtab", False, "--no-move-symtab")
    pred, shown = None, ""
    with ElfImage(output) as img:
        if not tuck.holes(img):
            try:
                tuck.plan(img, tuck.cold_hole(img, algorithm))
            except ElflayoutError as e:
                return Step("move symtab", False, f"not moved: {e}")
        preferred = tuck.cold_hole(img, algorithm)
        if target is not None:
            try:
                pred = _place_pages(output, img, target, lib_map)
            except ElflayoutError as e:
                if not asked:
                    return Step("move symtab", False, f"no prediction: {e}")
            else:
                shown = "readahead model at read_ahead_kb {}: {}".format(defaults.READ_AHEAD_KB, ", ".join(
                    f"{tuck.where(img, a)} {n:,} pages" for a, n in pred.items()))
    if pred is None and not asked:
        return Step("move symtab", False, "no profile to predict with")
    after = preferred if pred is None else tuck.choose(pred, asked, preferred)
    if after == tuck.TAIL:
        return Step("move symtab", False, "the readahead model predicts no fewer pages moved", shown)
    try:
        p = tuck.tuck_in_place(output, after)
    except ElflayoutError as e:  # the output stays as linked
        return Step("move symtab", False, f"not moved: {e}", shown)
    with ElfImage(output) as img:
        place = tuck.where(img, after)
    why = ("asked" if asked else "the readahead model predicts fewer pages") + (
        "" if pred is None else f"; {place}, the fewest predicted")
    return Step("move symtab", True, why, f"{', '.join(p['moved_names'])} moved to {p['hole']:#x}, {place}; "
                "nothing past the last segment for read-ahead" + (f"; {shown}" if shown else ""))


def _place_pages(output: str, img, target, lib_map: str | None) -> dict:
    """Pages predicted for the profile's touches of the linked ``output`` (placed as
    ``simulate`` places a relink's) with its unloaded sections at each place."""
    from elflayout.order import tuck
    from elflayout.order.placement import profile_touches
    from elflayout.order.simulation import touches_relocations

    pages, kinds, _notes = profile_touches(target, img, 1, lib_map if lib_map and os.path.exists(lib_map) else None)
    if not pages.size:
        raise ElflayoutError(f"no profiled touch could be placed in {output}")
    loader = not touches_relocations(img, pages)
    return tuck.predict_places(output, {"": (pages, kinds)}, defaults.READ_AHEAD_KB, loader)[""]


def _say_matched(o, fmt: str, linker: str, say) -> None:
    f, stats = o.layout.report["functions"], o.stats
    say(f"{f['matched']}/{f['profiled']} profiled functions matched; applying {fmt} ordering for {linker}")
    if stats.get("shared_section_objects"):
        n = stats["shared_section_objects"]
        say(f"profiled code in the plain .text of {n} object{'s' if n != 1 else ''} "
            f"({', '.join(stats['shared_section_examples'][:3])}): gold names sections, not files, so '.text' moves "
            f"every object's plain .text; --split gives each function its own section")


def _prelink_map(parsed: dict, dest: Path, say, why: str) -> str:
    """The link map of the command's objects linked in their own order: the names of their
    sections (split objects: cold code for hot-last, data sections for the data script;
    gold and GNU ld: the section of each profiled function)."""
    from elflayout.relocs.linkself import with_output

    dest.mkdir(parents=True, exist_ok=True)
    out = dest / Path(parsed["output"]).name
    lmap = dest / (out.name + ".map")
    cmd = with_output(parsed["cmd"], str(out)) + [("-Wl,-Map=" if parsed["driver"] else "-Map=") + str(lmap)]
    say(f"link the objects once in their own order for their map ({lmap.name}): {why}")
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode or not lmap.exists():
        raise ElflayoutError(f"{cmd[0]}: linking the objects for their map failed (exit {r.returncode}): "
                             f"{(r.stderr.strip().splitlines() or [''])[-1]}")
    return str(lmap)


def link_packed(parsed: dict, cmd: list[str], pack: str | None, opts: LinkOptions, say, status) -> int:
    """Run the link, packed as ``pack`` says (None, ``relr``, ``self``; relocs/linkself.py)."""
    from elflayout.relocs import linkself

    if pack == "relr":
        return linkself.link_relr(cmd, parsed["driver"], parsed["output"], run_command, say=say)
    if pack != "self":
        return run_command(cmd)
    st = linkself.link(cmd, parsed["driver"], parsed["output"], run_command, check_output=opts.check, root=opts.root,
                       say=say, status=status)
    if isinstance(st, int):
        return st
    say(f"self-applying form ({st['links']} link{'s' if st['links'] > 1 else ''}): {st['self_applied']:,} of "
        f"{st['relr_relocations']:,} DT_RELR relocations applied by the routine at {st['applier']['entry']:#x} "
        f"(DT_INIT), {st['kept_for_ld_so']:,} back to RELA for ld.so; DT_RELR* tags hidden, "
        f"{st['version_need']}")
    if "check" in st:
        c, real = st["check"], st["check"].get("real_load")
        say(f"check: relocated images equal at {len(c['bases'])} load bases; real load "
            + ("equal" if isinstance(real, dict) else str(real))
            + ("; loads in " + str(opts.root) if c.get("root_dlopen") else ""))
    return 0
