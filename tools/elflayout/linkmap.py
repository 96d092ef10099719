"""Link map files (``-Map``) of GNU ld (bfd), gold, lld and mold.

``parse(path)`` returns a :class:`LinkMap`: every input section placed in the output
(output section, input section name such as ``.text.foo``, object file as the linker
printed it — ``foo.o``, ``dir/libx.a(foo.o)`` or ``<internal>`` for linker-made
sections — virtual address and size) and the symbols the map lists inside them.
Symbol names are as the map prints them: all four linkers print C++ names demangled
(``ns::f(int, char)``); the input section name keeps the mangled one
(``.text._ZN2ns1fEic``). File offsets are not in any of these maps; ``attach(img)`` (or ``parse(path, img)``)
derives them from the linked file's section headers.

The flavour is detected from the text:

- GNU ld: a "Memory Configuration" / "Linker script and memory map" header; input
  sections are `` NAME 0xADDR 0xSIZE OBJECT`` (NAME on its own line when long);
  sections GNU ld makes itself (.dynsym, .rela.*, .plt, .got, ...) are printed under
  the first input file and reported here as ``<internal>``;
- gold: a "Memory map" header and the same line shapes, plus `` ** KIND`` lines for
  linker-made sections;
- lld: a column header ``VMA LMA Size Align Out In Symbol`` (older lld: ``Address Size
  Align Out In Symbol``), hex numbers without ``0x``, the level (output section, input
  section ``OBJECT:(NAME)``, symbol) given by the column the text starts in;
- mold: ``VMA Size Align Out In Symbol`` with ``0x`` addresses and decimal sizes.

A line that has the shape of a map entry but does not parse raises ElflayoutError
naming the file and the line number.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from elflayout.errors import ElflayoutError

FLAVOURS = ("bfd", "gold", "lld", "mold")
INTERNAL = "<internal>"

# GNU ld prints sections it creates itself under the first input file (usually crti.o);
# no object file of a final link contributes these, so they are reported as <internal>.
_LINKER_MADE = re.compile(r"^\.(dynsym|dynstr|gnu\.hash|hash|gnu\.version(_[dr])?|rela?\..*|plt(\..*)?|iplt|got(\.plt)?|"
                          r"igot(\.plt)?|dynamic|interp|eh_frame_hdr|dynbss|note\.gnu\.build-id|relr\.dyn)$")


@dataclass
class InputSection:
    output: str
    name: str
    object: str
    vaddr: int
    size: int
    offset: int  # file offset, -1 when not known (no image attached, or NOBITS)


@dataclass
class LinkMap:
    """Input sections in map order, as parallel columns (numpy for the numbers)."""

    path: Path
    flavour: str
    output_sections: list[dict]  # {name, vaddr, size} in map order
    output: list[str]  # per input section: output section name
    name: list[str]  # per input section: input section name
    object: list[str]  # per input section: object as printed by the linker
    vaddr: np.ndarray
    size: np.ndarray
    offset: np.ndarray  # -1 where unknown
    sym_name: list[str]
    sym_vaddr: np.ndarray
    sym_section: np.ndarray  # index of the input section listing the symbol (-1: none)
    discarded: int = 0  # input sections listed as discarded (GNU ld / gold)
    notes: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.name)

    def section(self, i: int) -> InputSection:
        return InputSection(self.output[i], self.name[i], self.object[i], int(self.vaddr[i]), int(self.size[i]),
                            int(self.offset[i]))

    def __iter__(self):
        return (self.section(i) for i in range(len(self)))

    @property
    def objects(self) -> list[str]:
        """Objects in first-placement order (``<internal>`` excluded)."""
        seen: dict = {}
        for o in self.object:
            if o != INTERNAL:
                seen.setdefault(o, None)
        return list(seen)

    def object_codes(self) -> tuple[np.ndarray, list[str]]:
        """(per input section: index into the returned names, names in first-placement order)."""
        ids: dict = {}
        codes = np.fromiter((ids.setdefault(o, len(ids)) for o in self.object), dtype=np.int64, count=len(self.object))
        return codes, list(ids)

    def object_summary(self) -> list[dict]:
        """Per object (first-placement order, ``<internal>`` and empty sections left out): input
        section count, bytes, and the lowest/highest vaddr and file offset (None when unknown)."""
        codes, names = self.object_codes()
        keep = self.size > 0
        if INTERNAL in names:
            keep &= codes != names.index(INTERNAL)
        c, v, sz, f = codes[keep], self.vaddr[keep], self.size[keep], self.offset[keep]
        n = len(names)
        big = np.iinfo(np.int64).max
        cnt = np.bincount(c, minlength=n)
        tot = np.bincount(c, weights=sz, minlength=n)
        vs = np.full(n, big, np.int64)
        ve = np.full(n, -1, np.int64)
        np.minimum.at(vs, c, v)
        np.maximum.at(ve, c, v + sz)
        fk = f >= 0
        fs = np.full(n, big, np.int64)
        fe = np.full(n, -1, np.int64)
        np.minimum.at(fs, c[fk], f[fk])
        np.maximum.at(fe, c[fk], (f + sz)[fk])
        first = np.full(n, big, np.int64)
        np.minimum.at(first, c, np.flatnonzero(keep))
        out = []
        for i in np.argsort(first, kind="stable").tolist():
            if cnt[i] == 0:
                continue
            has_f = fe[i] >= 0
            out.append({"object": names[i], "sections": int(cnt[i]), "bytes": int(tot[i]),
                        "vaddr_start": int(vs[i]), "vaddr_end": int(ve[i]),
                        "offset_start": int(fs[i]) if has_f else None, "offset_end": int(fe[i]) if has_f else None})
        return out

    def symbols(self) -> list[tuple[str, int, int]]:
        """(name, vaddr, input section index) in map order."""
        return list(zip(self.sym_name, self.sym_vaddr.tolist(), self.sym_section.tolist()))

    def lookup_vaddr(self, vaddrs) -> np.ndarray:
        """Index of the (non-empty, allocated) input section holding each address; -1: none."""
        v = np.asarray(vaddrs, dtype=np.int64)
        keep = np.flatnonzero((self.size > 0) & (self.vaddr > 0))
        order = keep[np.argsort(self.vaddr[keep], kind="stable")]
        st, en = self.vaddr[order], self.vaddr[order] + self.size[order]
        k = np.searchsorted(st, v, side="right") - 1
        kc = np.clip(k, 0, None)
        if order.size == 0:
            return np.full(v.shape, -1, dtype=np.int64)
        hit = (k >= 0) & (v < en[kc])
        return np.where(hit, order[kc], -1).astype(np.int64)

    def lookup_offsets(self, offsets) -> np.ndarray:
        """Index of the input section holding each file offset (needs ``attach``); -1: none."""
        o = np.asarray(offsets, dtype=np.int64)
        keep = np.flatnonzero((self.size > 0) & (self.offset >= 0))
        if keep.size == 0:
            return np.full(o.shape, -1, dtype=np.int64)
        order = keep[np.argsort(self.offset[keep], kind="stable")]
        st, en = self.offset[order], self.offset[order] + self.size[order]
        k = np.searchsorted(st, o, side="right") - 1
        kc = np.clip(k, 0, None)
        hit = (k >= 0) & (o < en[kc])
        return np.where(hit, order[kc], -1).astype(np.int64)

    def attach(self, img) -> "LinkMap":
        """Fill ``offset`` from the linked file ``img`` (an ElfImage) by output section."""
        secs = {s.name: s for s in img.sections}
        off = np.full(len(self), -1, dtype=np.int64)
        outs = np.array(self.output, dtype=object)
        for name in set(self.output):
            s = secs.get(name)
            if s is None or s.type == "SHT_NOBITS":
                continue
            m = outs == name
            rel = self.vaddr[m] - s.addr
            ok = (rel >= 0) & (rel <= s.size)
            o = np.where(ok, s.offset + rel, -1)
            off[m] = o
        self.offset = off
        return self


# -- parsing ------------------------------------------------------------------------------

_LLD_HEADER = re.compile(r"^\s*(VMA\s+LMA|Address)\s+Size\s+Align\s+Out\s+In\s+Symbol\s*$")
_MOLD_HEADER = re.compile(r"^\s*VMA\s+Size\s+Align\s+Out\s+In\s+Symbol\s*$")


def _err(path, lineno, what) -> ElflayoutError:
    return ElflayoutError(f"{path}:{lineno}: malformed link map: {what}")


def _read_lines(path: Path) -> list[str]:
    if not path.exists():
        raise ElflayoutError(f"{path}: no such file")
    if path.is_dir():
        raise ElflayoutError(f"{path}: is a directory, not a link map")
    if not path.is_file():
        raise ElflayoutError(f"{path}: not a regular file")
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise ElflayoutError(f"{path}: cannot read: {e.strerror}") from None
    if b"\0" in raw[:65536]:
        raise ElflayoutError(f"{path}: not a link map (binary data)")
    try:
        return raw.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        return raw.decode("latin-1").splitlines()


def detect(lines: list[str]) -> tuple[str, int] | None:
    """(flavour, index of the line where its memory map starts) or None."""
    for i, ln in enumerate(lines[:50]):
        if _LLD_HEADER.match(ln):
            return "lld", i
        if _MOLD_HEADER.match(ln):
            return "mold", i
    flavour = None
    for i, ln in enumerate(lines):
        if ln.startswith("Memory Configuration"):
            flavour = "bfd"
        elif ln.startswith("Linker script and memory map"):
            return "bfd", i
        elif ln.startswith("Memory map") and flavour is None:
            return "gold", i
    return None


_UNKNOWN_ADDR = (1 << 64) - 1


class _Builder:
    def __init__(self):
        self.outs: list[dict] = []
        self.output, self.name, self.object, self.vaddr, self.size = [], [], [], [], []
        self.sym_name, self.sym_vaddr, self.sym_section = [], [], []

    def out_section(self, name, vaddr, size):
        self.outs.append({"name": name, "vaddr": vaddr, "size": size})

    def in_section(self, name, obj, vaddr, size):
        cur = self.outs[-1]["name"] if self.outs else ""
        self.output.append(cur)
        self.name.append(name)
        self.object.append(obj)
        self.vaddr.append(vaddr)
        self.size.append(size)

    def symbol(self, name, vaddr):
        self.sym_name.append(name)
        self.sym_vaddr.append(vaddr)
        self.sym_section.append(len(self.name) - 1)

    def _unknown_addresses(self) -> None:
        """gold on AArch64 prints 0xffffffffffffffff as the address of some input sections
        (those of an output section it relaxed to place stubs). The symbols listed under
        one have their addresses: the section starts at its first (a function section's
        function starts it); one without symbols keeps no bytes (an address nothing maps to)."""
        first: dict[int, int] = {}
        for k, v in zip(self.sym_section, self.sym_vaddr):
            if k >= 0 and self.vaddr[k] == _UNKNOWN_ADDR:
                first[k] = min(first.get(k, v), v)
        for k, v in enumerate(self.vaddr):
            if v == _UNKNOWN_ADDR:
                prev = self.vaddr[k - 1] + self.size[k - 1] if k else 0
                self.vaddr[k], self.size[k] = (first[k], self.size[k]) if k in first else (prev, 0)

    def build(self, path, flavour, discarded=0) -> LinkMap:
        n = len(self.name)
        self._unknown_addresses()
        return LinkMap(
            path=path, flavour=flavour, output_sections=self.outs, output=self.output, name=self.name,
            object=self.object, vaddr=np.array(self.vaddr, dtype=np.int64), size=np.array(self.size, dtype=np.int64),
            offset=np.full(n, -1, dtype=np.int64), sym_name=self.sym_name,
            sym_vaddr=np.array(self.sym_vaddr, dtype=np.int64), sym_section=np.array(self.sym_section, dtype=np.int64),
            discarded=discarded,
        )


def _hex(tok: str, path, lineno) -> int:
    try:
        return int(tok, 16)
    except ValueError:
        raise _err(path, lineno, f"bad number {tok!r}") from None


def _is_assignment(text: str) -> bool:
    """Linker-script statements printed among symbols; C++ names (demangled by every
    linker here, e.g. ``ns::A::operator=(ns::A const&)``) never contain " = "."""
    t = text.strip()
    return " = " in t or t.startswith(("PROVIDE", "ASSERT", "HIDDEN"))


def _is_hex(tok: str) -> bool:
    return tok.startswith("0x")


def _parse_gnu(path: Path, lines: list[str], start: int, flavour: str) -> LinkMap:
    """GNU ld and gold: the "memory map" part, from ``start`` to the end.

    Kept as one loop: it is a line-by-line state machine (a wrapped output or input section
    name waits in ``pending_out``/``pending_in`` for its address line), clearer in one place."""
    b = _Builder()
    discarded = _count_discarded(lines[:start])
    pending_out = None  # output section name whose address is on the next line
    pending_in = None  # input section name (or gold "** kind") whose address is on the next line
    for i in range(start + 1, len(lines)):
        ln = lines[i]
        if not ln.strip():
            pending_out = pending_in = None
            continue
        lineno = i + 1
        if ln[0] != " ":
            tok = ln.split()
            if len(tok) >= 3 and _is_hex(tok[1]):
                b.out_section(tok[0], _hex(tok[1], path, lineno), _hex(tok[2], path, lineno))
                pending_out = None
            elif len(tok) == 1 and not tok[0].isupper() and "(" not in tok[0]:
                pending_out = tok[0]
            else:
                pending_out = None  # LOAD x.o, OUTPUT(...), START GROUP, ...
            pending_in = None
            continue
        tok = ln.split()
        if ln[1] != " ":
            # " NAME 0xADDR 0xSIZE OBJECT", " ** KIND ...", " *fill* ...", " *(pattern)"
            pending_out = None
            if ln.startswith(" **"):  # gold: linker-made section, e.g. " ** merge strings"
                m = re.match(r"^ \*\* (.*?)\s+(0x[0-9a-fA-F]+)\s+(0x[0-9a-fA-F]+)\s*$", ln)
                if m:
                    b.in_section("** " + m.group(1).strip(), INTERNAL, _hex(m.group(2), path, lineno),
                                 _hex(m.group(3), path, lineno))
                    pending_in = None
                else:
                    pending_in = ("** " + ln[4:].strip(), True)
                continue
            if tok[0].startswith("*") or tok[0] in ("KEEP", "SORT", "FILL", "ASSERT", "PROVIDE"):
                pending_in = None  # *fill*, input patterns, script commands
                continue
            if len(tok) >= 3 and _is_hex(tok[1]):
                obj = ln.split(None, 3)[3].strip() if len(tok) >= 4 else INTERNAL
                if flavour == "bfd" and _LINKER_MADE.match(tok[0]):
                    obj = INTERNAL
                b.in_section(tok[0], obj, _hex(tok[1], path, lineno), _hex(tok[2], path, lineno))
                pending_in = None
            elif len(tok) == 1:
                pending_in = (tok[0], False)
            elif len(tok) >= 2 and _is_hex(tok[1]):
                raise _err(path, lineno, "input section line without a size")
            else:
                pending_in = None  # e.g. " KEEP (*(.init))" with a space
            continue
        # deeper indentation: continuation of a wrapped name, a symbol, or script noise
        if "(size before relaxing)" in ln or tok[0].startswith("["):
            continue
        if not _is_hex(tok[0]):
            continue
        if pending_out is not None:
            if len(tok) >= 2 and _is_hex(tok[1]):
                b.out_section(pending_out, _hex(tok[0], path, lineno), _hex(tok[1], path, lineno))
            else:
                raise _err(path, lineno, f"expected the address and size of output section {pending_out}")
            pending_out = None
            continue
        if pending_in is not None:
            name, internal = pending_in
            pending_in = None
            if len(tok) >= 2 and _is_hex(tok[1]):
                obj = INTERNAL if internal or len(tok) < 3 else ln.split(None, 2)[2].strip()
                if flavour == "bfd" and _LINKER_MADE.match(name):
                    obj = INTERNAL
                b.in_section(name, obj, _hex(tok[0], path, lineno), _hex(tok[1], path, lineno))
                continue
            if not internal:
                raise _err(path, lineno, f"expected the address and size of input section {name}")
        if len(tok) >= 2 and not _is_hex(tok[1]):
            rest = ln.split(None, 1)[1]
            if _is_assignment(rest):
                continue  # ". = ALIGN(...)", "PROVIDE (x = .)"
            b.symbol(rest.strip(), _hex(tok[0], path, lineno))
    if not b.outs:
        raise _err(path, start + 1, "no output sections found")
    return b.build(path, flavour, discarded)


def _count_discarded(lines: list[str]) -> int:
    """Input sections listed under "Discarded input sections" (before the memory map)."""
    discarded, in_disc = 0, False
    for ln in lines:
        if ln and ln[0] != " ":
            in_disc = ln.startswith("Discarded input sections")
        elif in_disc and len(ln) > 1 and ln[1] != " ":
            discarded += 1
    return discarded


def _parse_columns(path: Path, lines: list[str], start: int, flavour: str) -> LinkMap:
    """lld and mold: a table whose text column (Out/In/Symbol) gives the nesting level."""
    hdr = lines[start]
    cols = hdr.split()
    nnum = cols.index("Out")
    in_col, sym_col = hdr.index(" In ") + 1, hdr.index("Symbol")
    vcol = cols.index("VMA") if "VMA" in cols else cols.index("Address")
    scol = cols.index("Size")
    size_base = 10 if flavour == "mold" else 16
    b = _Builder()
    # hot loop (400k lines for a relinked libLLVM): local names, no per-line method calls
    out_l, name_l, obj_l, vaddr_l, size_l = b.output, b.name, b.object, b.vaddr, b.size
    sname_l, svaddr_l, ssec_l = b.sym_name, b.sym_vaddr, b.sym_section
    cur_out = ""
    for i in range(start + 1, len(lines)):
        ln = lines[i]
        parts = ln.split(None, nnum)
        if len(parts) <= nnum:
            if not parts:
                continue  # blank line
            raise _err(path, i + 1, f"expected {nnum} numbers and a name")
        rest = parts[nnum]
        col = len(ln) - len(rest)
        try:
            vaddr = int(parts[vcol], 16)
            size = int(parts[scol], size_base)
        except ValueError:
            raise _err(path, i + 1, f"bad number in {ln.strip()[:60]!r}") from None
        if rest[-1] == " ":
            rest = rest.rstrip()
        if col >= sym_col:
            if " = " in rest and _is_assignment(rest):
                continue
            sname_l.append(rest)
            svaddr_l.append(vaddr)
            ssec_l.append(len(name_l) - 1)
        elif col >= in_col:
            k = rest.rfind(":(")
            if k < 0 or rest[-1] != ")":
                continue  # linker-script command (". = ALIGN(...)") printed at this level
            name = rest[k + 2:-1]
            p = name.find("+0x")  # lld: ".eh_frame+0x34" (a piece of a merged section)
            if p > 0:
                name = name[:p]
            out_l.append(cur_out)
            name_l.append(name)
            obj_l.append(rest[:k])
            vaddr_l.append(vaddr)
            size_l.append(size)
        else:
            b.out_section(rest, vaddr, size)
            cur_out = rest
    if not b.outs:
        raise _err(path, start + 1, "no output sections found")
    return b.build(path, flavour)


def parse(path: str | os.PathLike, img=None) -> LinkMap:
    """Parse a GNU ld, gold, lld or mold map file; with ``img`` also derive file offsets."""
    p = Path(path)
    lines = _read_lines(p)
    got = detect(lines)
    if got is None:
        raise ElflayoutError(f"{p}:1: not a link map of GNU ld, gold, lld or mold (no memory map header found)")
    flavour, start = got
    lm = _parse_columns(p, lines, start, flavour) if flavour in ("lld", "mold") else _parse_gnu(p, lines, start, flavour)
    if img is not None:
        lm.attach(img)
    return lm
