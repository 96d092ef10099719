"""The dynamic array, read the way ld.so reads it: through PT_DYNAMIC.

glibc's loader (elf/dl-load.c, ``_dl_map_object_from_fd``) takes the array from the
PT_DYNAMIC program header and never looks at section headers, so every stage reads it
here, the same way: a file whose ``.dynamic`` section header disagrees with PT_DYNAMIC
gives the inspector, the packer and the simulated loader the one table ld.so uses.

Tags are the ints of ``layouts.DT_*`` (pyelftools' names): a misspelt constant fails
with AttributeError, a missing tag with KeyError (``dyn[tag]``) or the default
(``dyn.get(tag)``), and a tag given as a string is refused (TypeError) rather than
silently never found.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from elflayout import layouts as L
from elflayout.errors import ElflayoutError


def _check_tag(tag) -> int:
    if isinstance(tag, bool) or not isinstance(tag, (int, np.integer)):
        raise TypeError(f"a dynamic tag is an int (layouts.DT_*), not {tag!r}")
    return int(tag)


@dataclass(frozen=True, eq=False)
class Dynamic:
    """The entries of a file's PT_DYNAMIC (a copy), and where the segment is."""
    array: np.ndarray        # every entry PT_DYNAMIC's file bytes hold, DT_NULL padding included
    count: int               # entries before the first DT_NULL (all of them without one)
    offset: int | None       # file offset of the array; None: the file has no PT_DYNAMIC
    vaddr: int = 0
    memsz: int = 0
    filesz: int = 0
    segments: int = 0        # PT_DYNAMIC program headers in the file (ld.so expects one)

    @classmethod
    def read(cls, buf, segments, *, elfclass: int = 64, little: bool = True, path="ELF file") -> "Dynamic":
        """The array of the PT_DYNAMIC among ``segments`` (``elfcore.Segment``s) in the file
        bytes ``buf``; an empty array without one. ElflayoutError when it lies outside the
        file. With several PT_DYNAMIC the first is read (``segments`` says how many)."""
        dt = (L.DYN64 if elfclass == 64 else L.DYN32).newbyteorder("<" if little else ">")
        dyn = [s for s in segments if s.type == "PT_DYNAMIC"]
        if not dyn:
            return cls(np.zeros(0, dt), 0, None)
        p = dyn[0]
        if p.offset < 0 or p.filesz < 0 or p.offset + p.filesz > len(buf):
            raise ElflayoutError(f"{path}: inconsistent PT_DYNAMIC (outside the file or not a whole number "
                                 "of entries)")
        arr = np.frombuffer(buf, dt, count=p.filesz // dt.itemsize, offset=p.offset).copy()
        null = np.flatnonzero(arr["d_tag"] == L.DT_NULL)
        return cls(arr, int(null[0]) if null.size else arr.size, p.offset, p.vaddr, p.memsz, p.filesz, len(dyn))

    @property
    def present(self) -> bool:
        return self.offset is not None

    @property
    def live(self) -> np.ndarray:
        """The entries ld.so reads (before the first DT_NULL)."""
        return self.array[:self.count]

    @property
    def terminated(self) -> bool:
        return self.count < self.array.size

    @property
    def whole(self) -> bool:
        """PT_DYNAMIC's file size is a whole number of entries."""
        return self.filesz % max(self.array.dtype.itemsize, 1) == 0

    @property
    def spare(self) -> int:
        """DT_NULL entries after the terminator (slots a tool may fill)."""
        return self.array.size - self.count - 1

    @property
    def range(self) -> tuple[int, int]:
        """Link-time address range of the segment."""
        return self.vaddr, self.vaddr + self.memsz

    def get(self, tag, default=None) -> int | None:
        """The value of the first entry with ``tag`` (``default`` when there is none)."""
        m = np.flatnonzero(self.live["d_tag"] == _check_tag(tag))
        return int(self.live["d_val"][m[0]]) if m.size else default

    def values(self, tag) -> list[int]:
        """Values of every entry with ``tag``, in order (DT_NEEDED)."""
        live = self.live
        return [int(v) for v in live["d_val"][live["d_tag"] == _check_tag(tag)]]

    def __getitem__(self, tag) -> int:
        v = self.get(tag)
        if v is None:
            raise KeyError(tag)
        return v

    def __contains__(self, tag) -> bool:
        return bool(np.any(self.live["d_tag"] == _check_tag(tag)))

    def __iter__(self):
        """(tag, value) of the entries ld.so reads, as ints."""
        live = self.live
        return iter(zip(live["d_tag"].tolist(), live["d_val"].tolist()))

    def __len__(self) -> int:
        return self.count
