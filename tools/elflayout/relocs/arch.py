"""The per-machine relocation tables, for the relocs modules (they live in elflayout.arch,
which inspect and the core modules can import too)."""

from elflayout.arch import (ABS, ABS_NOADD, AARCH64, ARCHES, COPY, DTPMOD, DTPOFF, I386, IRELATIVE,  # noqa: F401
                            NONE, PCREL, RELATIVE, TPOFF, X86_64, Arch, RelType, arch_of)
