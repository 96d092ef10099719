"""Match profiled function names to the names a link knows (symbols, input sections).

A profile names functions as the profiled library's symbol table did; the objects of the
next link may call them differently:

- local (``static``) functions with one name in several objects: the profile's
  ``object`` field picks the right one when the universe knows objects;
- compiler clones ``foo.part.0``, ``foo.cold``, ``foo.isra.0``, ``foo.constprop.0``,
  ``foo.lto_priv.0``: matched as themselves first, then as their base ``foo``;
- the other way round, a name the link has only with such a suffix, or the one LTO
  adds (``foo`` profiled on a build without LTO, ``foo.llvm.<hash>`` (ThinLTO) or
  ``foo.lto_priv.0`` (GCC) in the link): matched when one name bears it (``suffix``),
  reported as ``ambiguous-suffix`` and left out when several do;
- C++ thunks ``_ZThn8_N...`` / ``_ZTv0_n24_N...``: matched to the function they adjust
  to (``_ZN...``) when they have no symbol of their own;
- FDE-only names (a stripped library's functions, known only by ``.eh_frame`` extents)
  cannot be matched by name: reported, never guessed.

Without a universe (no link map), names are taken as they are and marked unverified:
the linker is the judge, and ``check-order`` measures the result.
"""

from __future__ import annotations

import os
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import PurePath

import numpy as np

# foo.part.0, foo.cold, foo.cold.12, foo.isra.0, foo.constprop.3, foo.lto_priv.0, foo.localalias
_CLONE = re.compile(r"\.(?:part|cold|isra|constprop|lto_priv|localalias|llvm|specialized)(?:\.\d+)?$")
# the names LTO gives the local functions it promotes: ThinLTO foo.llvm.<hash>, GCC foo.lto_priv.<n>
_LTO_RENAMED = re.compile(r"\.(?:llvm|lto_priv)\.\d+(?:\.|$)")
_LTO_SUFFIX = re.compile(r"\.(?:llvm|lto_priv)\.\d+")
# parts GCC splits off a function (not the function itself)
_SPLIT_PART = re.compile(r"\.(?:cold|part)(?:\.\d+)?(?:\.|$)")
# Itanium ABI call-offset thunks: _ZTh <nv-offset> _ and _ZTv <v-offset> _ <offset> _
_THUNK = re.compile(r"^_ZT(?:h(n?\d+)_|v(n?\d+)_(n?\d+)_)")
# names a profiler gives functions that only an FDE delimits
_FDE_ONLY = re.compile(r"^(?:fde|FUN|sub|func)?[_@]?(?:0x)?[0-9a-fA-F]{4,}$|^(?:fde|FUN|sub)[_@]")


def clone_base(name: str) -> str:
    """``foo.constprop.0.isra.0`` → ``foo`` (all clone suffixes stripped)."""
    prev = None
    while prev != name:
        prev, name = name, _CLONE.sub("", name)
    return name


def suffix_matches(name: str, candidates) -> list[str]:
    """Those of ``candidates`` (names sharing ``name``'s clone base) that are ``name`` with
    suffixes a compiler or LTO added: for a plain ``foo`` any clone but a split-off part
    (``foo.cold``, ``foo.part.0``); for a clone, the same clone with LTO's renaming."""
    plain = clone_base(name) == name
    want = _LTO_SUFFIX.sub("", name)
    out = []
    for c in candidates:
        if c == name or clone_base(c) != clone_base(name):
            continue
        if (not _SPLIT_PART.search(c)) if plain else _LTO_SUFFIX.sub("", c) == want:
            out.append(c)
    return out


def lto_renamed(name: str) -> bool:
    """Whether ``name`` carries a suffix only LTO adds (``.llvm.<hash>``, ``.lto_priv.<n>``)."""
    return bool(_LTO_RENAMED.search(name))


def thunk_target(name: str) -> str | None:
    m = _THUNK.match(name)
    if not m:
        return None
    return "_Z" + name[m.end():]


def ctor_alias(name: str) -> str | None:
    """Itanium ABI complete/base object constructor and destructor share one body: GCC
    emits ``C1``/``D1`` as aliases of ``C2``/``D2``, and a symbol table may name either."""
    for a, b in (("C1E", "C2E"), ("C2E", "C1E"), ("D1E", "D2E"), ("D2E", "D1E"), ("C1I", "C2I"), ("C2I", "C1I")):
        i = name.rfind(a)
        if i > 2 and name.startswith("_Z"):
            return name[:i] + b + name[i + 3:]
    return None


def is_fde_only(name: str) -> bool:
    return bool(_FDE_ONLY.match(name))


def text_section_of(name: str) -> str:
    """The input section -ffunction-sections gives a function (GCC and clang naming)."""
    if re.search(r"\.cold(?:\.\d+)?$", name):
        return ".text.unlikely." + clone_base(name)
    return ".text." + name


# GCC puts a whole function in .text.unlikely.NAME (noreturn ``__throw_*`` helpers, code
# only reached from cold paths), .text.hot.NAME, .text.startup.NAME (static constructors)
# or .text.exit.NAME when it is all cold/hot/startup/exit code
_PREFIXED_TEXT = (".text.unlikely.", ".text.hot.", ".text.startup.", ".text.exit.")


def own_text_section(name: str, sections) -> str | None:
    """The input section ``-ffunction-sections`` gave function ``name`` itself, if the link
    has one: ``.text.NAME`` (``.text.unlikely.BASE`` for ``BASE.cold``), else NAME in a
    hot/cold/startup/exit section."""
    for sec in (text_section_of(name), *(p + name for p in _PREFIXED_TEXT)):
        if sec in sections:
            return sec
    return None


def same_object(a: str | None, b: str | None) -> bool:
    """Object names from different maps: ``x/libfoo.a(bar.o)`` vs ``libfoo.a(bar.o)`` vs ``bar.o``."""
    if not a or not b:
        return False
    if a == b:
        return True

    def parts(s):
        m = re.match(r"^(.*)\((.*)\)$", s)
        if m:
            return PurePath(m[1]).name, PurePath(m[2]).name
        return None, PurePath(s).name

    (aa, am), (ba, bm) = parts(a), parts(b)
    return am == bm and (aa is None or ba is None or aa == ba)


# -ffunction-sections / -fdata-sections name a section after its (mangled) symbol
_SECTION_PREFIXES = (".text.unlikely.", ".text.hot.", ".text.startup.", ".text.exit.", ".text.split.", ".text.",
                     ".rodata.", ".data.rel.ro.local.", ".data.rel.ro.", ".data.rel.local.", ".data.rel.", ".data.",
                     ".bss.", ".tdata.", ".tbss.")
_NOT_A_SYMBOL = re.compile(r"^(?:\.|str\d|cst\d|$|(?:startup|unlikely|hot|exit|split|local|rel|ro)$)")


def symbol_of_section(name: str) -> str | None:
    """The symbol a ``-ffunction-sections``/``-fdata-sections`` section is named after.

    Link maps print C++ names demangled (``llvm::foo(int)``), which a symbol ordering
    file cannot use; the section name keeps the mangled one. None for sections that
    name no symbol (``.rodata.str1.1``, ``.rodata.cst16``, ``.rodata..Lswitch.table``).
    """
    for pre in _SECTION_PREFIXES:
        if name.startswith(pre):
            rest = name[len(pre):]
            return None if _NOT_A_SYMBOL.match(rest) else rest
    return None


def object_member(s: str) -> str:
    """The file name of an object or archive member: ``a/libx.a(b/c.o)`` → ``c.o``."""
    m = re.match(r"^.*\((.*)\)$", s)
    return PurePath(m[1] if m else s).name


@dataclass
class Universe:
    """What a link knows: symbol → [(input section, object)], input sections, objects."""

    symbols: dict[str, list[tuple[str | None, str | None]]] = field(default_factory=dict)
    sections: set[str] = field(default_factory=set)
    objects: list[str] = field(default_factory=list)
    source: str = ""
    # input section extents in the linked file (from a map): offset/size arrays + names
    extents: np.ndarray | None = None
    extent_names: list[str] = field(default_factory=list)
    extent_objects: list[str | None] = field(default_factory=list)
    section_symbols: dict[str, list[str]] = field(default_factory=dict)
    # (input section, object) → symbols the map lists in it (code sections included)
    object_section_symbols: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    # one symbol per code input section, in the map's (link) order
    text_order: list[tuple[str, str, str]] = field(default_factory=list)  # (symbol, section, object)
    _by_base: dict[str, list[str]] | None = field(default=None, repr=False)

    def suffixed(self, name: str) -> list[str]:
        """The symbols that are ``name`` with compiler/LTO suffixes (``name.llvm.123``)."""
        if self._by_base is None:
            self._by_base = {}
            for n in self.symbols:
                b = clone_base(n)
                if b != n:
                    self._by_base.setdefault(b, []).append(n)
        return suffix_matches(name, self._by_base.get(clone_base(name), []))


@dataclass
class Resolved:
    name: str  # as profiled
    link_name: str | None  # symbol to give the linker (None: unresolved)
    sections: list[str]  # input section name(s) holding it
    objects: list[str | None]
    how: str  # exact | object | ambiguous | clone | thunk | alias | suffix | unverified | fde-only | missing
    #           | ambiguous-suffix
    first: float | None = None  # the profile entry's first-access rank (a local name may be profiled twice)


def universe_from_linkmap(path, image=None) -> Universe:
    """Symbols, input sections and objects listed in a GNU ld / gold / lld / mold map.

    With ``image`` (the file that link produced) input sections also get file offsets,
    so a profile's data pages of that build can be mapped to input sections.
    """
    from elflayout import linkmap  # owned by the inspect helper
    from elflayout.elfcore import ElfImage

    if image is not None and os.path.exists(image):
        with ElfImage(image) as img:
            lm = linkmap.parse(path, img)
    else:
        lm = linkmap.parse(path)
    u = Universe(source=str(path))
    names, objs = lm.name, lm.object
    u.sections = set(names)
    u.objects = lm.objects
    has_sym = np.zeros(len(names), dtype=bool)
    for sname, k in zip(lm.sym_name, lm.sym_section.tolist()):
        if k < 0:
            continue
        sec = names[k]
        if not has_sym[k]:
            # the mangled name from the section name first: maps print C++ demangled
            derived = symbol_of_section(sec)
            if derived:
                u.object_section_symbols.setdefault((sec, objs[k]), []).append(derived)
                if not sec.startswith(".text"):
                    u.section_symbols.setdefault(sec, []).append(derived)
            if sec.startswith(".text"):
                u.text_order.append((derived or sname, sec, objs[k]))
        has_sym[k] = True
        u.symbols.setdefault(sname, []).append((sec, objs[k]))
        u.object_section_symbols.setdefault((sec, objs[k]), []).append(sname)
        if not sec.startswith(".text") and not symbol_of_section(sec):
            u.section_symbols.setdefault(sec, []).append(sname)
    # a -ffunction-sections section names its function even when the map lists no
    # symbol in it (gold and GNU ld list globals only, gold demangled)
    own = {(sec[6:], objs[k]) for k, sec in enumerate(names) if sec.startswith(".text.")}
    for k in np.flatnonzero(~has_sym).tolist():
        sec = names[k]
        if sec.startswith(".text.") and len(sec) > 6:
            fn = sec[6:]
            for pre in ("unlikely.", "hot.", "startup.", "exit.", "split."):
                if fn.startswith(pre):
                    fn = fn[len(pre):]
                    break
            if fn != sec[6:] and (fn, objs[k]) in own:
                continue  # .text.unlikely.NAME beside .text.NAME: NAME's cold part (NAME.cold), not NAME
            u.symbols.setdefault(fn, []).append((sec, objs[k]))
    ok = np.flatnonzero(lm.offset >= 0)
    u.extents = np.zeros(len(ok), dtype=[("offset", "<i8"), ("size", "<i8")])
    u.extents["offset"], u.extents["size"] = lm.offset[ok], lm.size[ok]
    u.extent_names = [names[k] for k in ok.tolist()]
    u.extent_objects = [objs[k] for k in ok.tolist()]
    return u


def resolve(entries: list, universe: Universe | None) -> tuple[list[Resolved], dict]:
    """Resolve profile function entries (``profile.model.Function``) in order.

    Returns one ``Resolved`` per entry (duplicates of an earlier link name dropped) and a
    report: counts per outcome and a few examples of each failure.
    """
    out: list[Resolved] = []
    counts: Counter = Counter()
    examples: dict[str, list[str]] = defaultdict(list)
    taken: set[tuple[str, tuple]] = set()
    for e in entries:
        name = e.name
        r = _resolve_one(name, e.object, universe, getattr(e, "section", None))
        r.first = e.first
        counts[r.how] += 1
        if r.how in ("fde-only", "missing", "ambiguous", "ambiguous-suffix") and len(examples[r.how]) < 5:
            examples[r.how].append(name)
        if r.link_name is None:
            out.append(r)
            continue
        key = (r.link_name, tuple(r.sections), tuple(r.objects))  # a local name in several objects: each
        if key in taken:
            counts["duplicate"] += 1
            continue
        taken.add(key)
        out.append(r)
    total = len(entries)
    unresolved = counts["fde-only"] + counts["missing"] + counts["ambiguous-suffix"]
    report = {
        "profiled": total,
        "matched": total - unresolved,
        "matched_fraction": (total - unresolved) / total if total else 0.0,
        "universe": universe.source if universe else None,
        "by_how": dict(sorted(counts.items())),
        "examples": {k: v for k, v in examples.items()},
    }
    return out, report


def _resolve_one(name: str, obj: str | None, u: Universe | None, section: str | None = None) -> Resolved:
    if not name:
        return Resolved(name, None, [], [], "missing")
    if u is None:
        if is_fde_only(name):
            return Resolved(name, None, [], [], "fde-only")
        return Resolved(name, name, [text_section_of(name)], [obj], "unverified")
    cands = u.symbols.get(name)
    how = "exact"
    link = name
    if not cands:
        if is_fde_only(name):
            return Resolved(name, None, [], [], "fde-only")
        base = clone_base(name)
        tgt = thunk_target(name)
        alias = ctor_alias(name)
        own = own_text_section(name, u.sections)
        if own:
            # its own section first: C1/C2 of a class with virtual bases are two functions,
            # each in its own section (lld maps print demangled names, so only the section
            # name says which)
            return Resolved(name, name, [own], [obj], "exact")
        if base != name and u.symbols.get(base):
            cands, how, link = u.symbols[base], "clone", base
        elif tgt and u.symbols.get(tgt):
            cands, how, link = u.symbols[tgt], "thunk", tgt
        elif alias and u.symbols.get(alias):
            cands, how, link = u.symbols[alias], "alias", alias
        elif alias and text_section_of(alias) in u.sections:
            return Resolved(name, alias, [text_section_of(alias)], [obj], "alias")
        elif section and obj and (section, obj) in u.object_section_symbols:
            # the input section the profile found it in, of the same object: a C++
            # function in plain .text, which an lld map lists only demangled
            return Resolved(name, name, [section], [obj], "exact")
        elif u.suffixed(name):
            found = u.suffixed(name)
            if len(found) > 1:
                return Resolved(name, None, [], [], "ambiguous-suffix")
            cands, how, link = u.symbols[found[0]], "suffix", found[0]
        else:
            return Resolved(name, None, [], [], "missing")
    if len(cands) > 1:
        mine = [c for c in cands if same_object(c[1], obj)]
        if mine:
            cands = mine
            how = "object" if how == "exact" else how
        elif len({c[0] for c in cands}) > 1 or len({c[1] for c in cands}) > 1:
            how = "ambiguous" if how == "exact" else how
    secs = list(dict.fromkeys(c[0] for c in cands if c[0])) or [text_section_of(link)]
    return Resolved(name, link, secs, [c[1] for c in cands], how)


def elf_symbols(img) -> tuple[np.ndarray, list[str]]:
    """Defined symbols of an ELF file (.symtab, else .dynsym): structured array + names.

    Fields: value (vaddr), size, offset (file offset; -1 if not file-backed), type
    (STT_*), bind, shndx. Read with numpy: libLLVM has ~100k symbols.
    """
    dt = np.dtype([("st_name", "<u4"), ("st_info", "u1"), ("st_other", "u1"), ("st_shndx", "<u2"),
                   ("st_value", "<u8"), ("st_size", "<u8")])
    sec = img.section(".symtab") or img.section(".dynsym")
    if sec is None or sec.size == 0 or img.elfclass != 64:
        return np.zeros(0, dtype=[("value", "<u8"), ("size", "<u8"), ("offset", "<i8"), ("type", "u1"),
                                  ("bind", "u1"), ("shndx", "<u2")]), []
    syms = np.frombuffer(img.mm, dtype=dt, count=sec.size // dt.itemsize, offset=sec.offset)
    strtab = img.sections[_link_of(img, sec)]
    keep = (syms["st_shndx"] != 0) & (syms["st_shndx"] < 0xFF00) & (syms["st_name"] != 0)
    syms = syms[keep]
    raw = bytes(img.mm[strtab.offset:strtab.offset + strtab.size])
    names = [raw[o:raw.index(b"\0", o)].decode("utf-8", "replace") for o in syms["st_name"].tolist()]
    out = np.zeros(len(syms), dtype=[("value", "<u8"), ("size", "<u8"), ("offset", "<i8"), ("type", "u1"),
                                     ("bind", "u1"), ("shndx", "<u2")])
    out["value"] = syms["st_value"]
    out["size"] = syms["st_size"]
    out["offset"] = img.vaddr_to_offset(syms["st_value"]) if len(syms) else []
    out["type"] = syms["st_info"] & 0xF
    out["bind"] = syms["st_info"] >> 4
    out["shndx"] = syms["st_shndx"]
    return out, names


def _link_of(img, sec) -> int:
    for s in img.elf.iter_sections():
        if s.name == sec.name:
            return s["sh_link"]
    raise ValueError(f"{img.path}: no section {sec.name}")


def same_objects(profiled: list, objects: list) -> list:
    """The profiled link's object names as the link to order names them: the same objects
    at another path (``link --split`` puts its split copies in a temporary directory) are
    matched by file name when that name is unique on both sides; others are kept."""
    def base(o):
        return o.rsplit("/", 1)[-1] if o else o

    have = set(objects)
    mine: dict = {}
    for o in objects:
        mine.setdefault(base(o), []).append(o)
    theirs: dict = {}
    for o in dict.fromkeys(profiled):
        theirs.setdefault(base(o), []).append(o)
    return [o if not o or o in have or len(mine.get(base(o), ())) != 1 or len(theirs[base(o)]) != 1
            else mine[base(o)][0] for o in profiled]
