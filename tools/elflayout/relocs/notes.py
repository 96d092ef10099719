"""Notes that may slide with the dynamic-linking tables (pack_plan._layout makes room
for program headers after the table that way): only those whose bytes do not depend
on where they are and that readers find through PT_NOTE. Any other stays, and so do
the tables: Crashpad's note, for one, holds the offset from itself to the program's
CrashpadInfo (crashpad/client/crashpad_info_note.S), and code may read a note from
its own address, which no relocation shows."""

from __future__ import annotations

from elflayout import layouts as L

# owner -> note types whose bytes say nothing about their place (GNU: ABI tag, hwcap,
# build-id, gold version, properties; FDO: package metadata, JSON)
POSITION_FREE = {b"GNU": {1, 2, 3, 4, 5}, b"FDO": {0xCAFE1A7E}}


def _walk(buf: bytes, align: int):
    """(name, type, descriptor offset, descriptor size) of each note in ``buf``; raises
    ValueError on a note that runs past the end."""
    align = max(align, 4)
    at = 0
    while at + 12 <= len(buf):
        namesz, descsz, typ = (int.from_bytes(buf[at + k:at + k + 4], "little") for k in (0, 4, 8))
        desc = L.align_up(at + 12 + namesz, align)
        end = L.align_up(desc + descsz, align)
        if desc + descsz > len(buf):
            raise ValueError("note runs past its section")
        yield bytes(buf[at + 12:at + 12 + namesz]).rstrip(b"\0"), typ, desc, descsz
        at = end


def slide_problem(buf: bytes, align: int) -> str | None:
    """Why the notes in ``buf`` may not slide, or None."""
    try:
        for name, typ, _, _ in _walk(buf, align):
            if typ not in POSITION_FREE.get(name, ()):
                return f"a note of owner {name.decode('latin-1')!r}, type {typ:#x}, may depend on its place"
    except ValueError as e:
        return str(e)
    return None
