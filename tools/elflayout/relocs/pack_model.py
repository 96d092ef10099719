"""pack-relocs report v1 (``elflayout-pack-relocs``, docs/formats/relocs.md): build,
parse, read.

``build`` makes the JSON document ``pack-relocs --json`` prints from ``pack()``'s
statistics and parses it before returning it, so what is printed is what a reader
accepts; ``parse``/``load`` give the typed ``PackReport`` every reader works on.
Key order in the document is the field order below (the CLI's output is unchanged).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from elflayout.errors import ElflayoutError
from elflayout.fileio import envelope, load_json

KIND = "pack-relocs"
VERSION = 1
PACKED, NOTHING_TO_DO = "packed", "nothing-to-do"
CHECK_FAILED, CHECK_REFUSED = "check-failed", "check-refused"  # --check: exit 1 / exit 2, OUT not written
STATUSES = (PACKED, NOTHING_TO_DO, CHECK_FAILED, CHECK_REFUSED)


@dataclass(frozen=True)
class Cut:
    """Whole freed pages taken out of the file; ``why`` when nothing was cut."""
    pages: int
    bytes: int
    program_header: str | None = None  # "in PT_PHDR's place" or "added"
    why: str | None = None


@dataclass(frozen=True)
class Applier:
    """The self form's routine: its address (the new DT_INIT), size, RELRO pages."""
    entry: int
    bytes: int
    relro: list


@dataclass(frozen=True)
class Packed:
    """What ``pack()`` did (``status == "packed"``); timings in seconds."""
    relocations: int
    relative: int
    packed: int
    kept: int
    kept_relative: int
    rela_dyn_bytes_before: int
    rela_dyn_bytes_after: int
    relr_bytes: int
    relr_words: int
    relr_addr: int
    rela_addr: int
    relacount: int
    dynamic: str
    version_need: str
    form: str
    applier: Applier | None
    moved_sections: dict
    freed_bytes: int
    encode_s: float
    strip_safe: bool = True          # False: the program header table moved (GNU strip breaks the output)
    cut: Cut | None = None           # absent with --keep-freed
    check: dict | None = None        # absent without --check (simload.check's document)
    plan_s: float = 0.0
    write_s: float = 0.0
    pack_s: float = 0.0
    total_s: float = 0.0
    min_glibc: str | None = None


@dataclass(frozen=True)
class PackReport:
    tool: str
    input: str
    output: str | None
    status: str
    message: str | None = None       # every status but packed: why
    packed: Packed | None = None     # packed: the statistics
    exit_status: int | None = None   # check-failed, check-refused: the exit status that follows

    def to_doc(self) -> dict:
        body = dict(input=self.input, output=self.output, status=self.status)
        if self.status == PACKED:
            body.update(_packed_dict(self.packed))
        else:
            body["message"] = self.message
        if self.status in (CHECK_FAILED, CHECK_REFUSED):
            body["exit_status"] = self.exit_status
        return envelope(KIND, VERSION, dict(tool=self.tool), **body)


def _packed_dict(p: Packed) -> dict:
    out = {}
    for f in dataclasses.fields(Packed):
        v = getattr(p, f.name)
        if f.name in ("cut", "check") and v is None:
            continue
        if f.name == "cut":
            v = {k: x for k, x in dataclasses.asdict(v).items() if x is not None}
        elif f.name == "applier" and v is not None:
            v = dataclasses.asdict(v)
        out[f.name] = v
    return out


def _typed(cls, raw, where: str):
    if not isinstance(raw, dict):
        raise ElflayoutError(f"{where} is not an object")
    names = {f.name for f in dataclasses.fields(cls)}
    need = [f.name for f in dataclasses.fields(cls)
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    missing = [k for k in need if k not in raw]
    if missing:
        raise ElflayoutError(f"{where} lacks {', '.join(missing)}")
    unknown = sorted(set(raw) - names)
    if unknown:
        raise ElflayoutError(f"{where} has unknown keys {', '.join(unknown)}")
    return raw


def _parse_packed(doc: dict, path) -> Packed:
    names = {f.name for f in dataclasses.fields(Packed)}
    kw = _typed(Packed, {k: v for k, v in doc.items() if k in names}, f"{path}: pack-relocs report")
    kw = dict(kw)
    if kw.get("cut") is not None:
        kw["cut"] = Cut(**_typed(Cut, kw["cut"], f"{path}: cut"))
    if kw.get("applier") is not None:
        kw["applier"] = Applier(**_typed(Applier, kw["applier"], f"{path}: applier"))
    if kw["form"] not in ("relr", "self"):
        raise ElflayoutError(f"{path}: unknown packed form {kw['form']!r}")
    for k in ("relocations", "packed", "kept", "relr_bytes", "freed_bytes"):
        if not isinstance(kw[k], int) or isinstance(kw[k], bool):
            raise ElflayoutError(f"{path}: {k} is not an integer")
    return Packed(**kw)


def parse(doc: dict, path="pack-relocs report") -> PackReport:
    """The typed report of a JSON document; ElflayoutError naming the problem."""
    meta = doc.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("tool"), str):
        raise ElflayoutError(f"{path}: pack-relocs report has no metadata.tool")
    status = doc.get("status")
    if status not in STATUSES:
        raise ElflayoutError(f"{path}: unknown status {status!r}")
    if not isinstance(doc.get("input"), str) or not isinstance(doc.get("output"), (str, type(None))):
        raise ElflayoutError(f"{path}: input/output are not paths")
    if status != PACKED and not isinstance(doc.get("message"), str):
        raise ElflayoutError(f"{path}: {status} report has no message")
    if status == NOTHING_TO_DO:
        return PackReport(meta["tool"], doc["input"], doc["output"], status, message=doc["message"])
    if status in (CHECK_FAILED, CHECK_REFUSED):
        if doc.get("exit_status") not in (1, 2):
            raise ElflayoutError(f"{path}: {status} report has no exit_status 1 or 2")
        return PackReport(meta["tool"], doc["input"], doc["output"], status, message=doc["message"],
                          exit_status=doc["exit_status"])
    return PackReport(meta["tool"], doc["input"], doc["output"], status, packed=_parse_packed(doc, path))


def build_packed(tool: str, input, output, stats: dict, min_glibc: str) -> dict:
    """The document of a packed file: ``pack()``'s statistics and the glibc it targets."""
    doc = envelope(KIND, VERSION, dict(tool=tool), input=str(input), output=str(output), status=PACKED,
                   **stats, min_glibc=min_glibc)
    parse(doc)
    return doc


def build_nothing(tool: str, input, output, message: str) -> dict:
    """The document when there was nothing to pack (``output``: None unless copied)."""
    doc = envelope(KIND, VERSION, dict(tool=tool), input=str(input), output=None if output is None else str(output),
                   status=NOTHING_TO_DO, message=message)
    parse(doc)
    return doc


def build_unchecked(tool: str, input, status: str, message: str, exit_status: int) -> dict:
    """The document when ``--check`` failed (CHECK_FAILED) or refused the input
    (CHECK_REFUSED): nothing was written."""
    doc = envelope(KIND, VERSION, dict(tool=tool), input=str(input), output=None, status=status, message=message,
                   exit_status=exit_status)
    parse(doc)
    return doc


def load(path) -> PackReport:
    return parse(load_json(path, KIND, (VERSION,)), path)
