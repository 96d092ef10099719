"""The self-applying form of packed relocations, for glibc < 2.36 (no DT_RELR there).

Prior art: Mozilla's elfhack (Hommey 2011, build/unix/elfhack) and relrhack: the library
carries its packed RELATIVE relocations in a table the loader ignores, and a small
routine, run as the library's ``DT_INIT``, applies them before any of its initializers
(``DT_INIT`` runs before ``DT_INIT_ARRAY``; glibc elf/dl-init.c ``call_init``), then
chains to the original ``DT_INIT``.

The routine (``SOURCE``, GNU as, x86-64) is position-independent and reads its
parameters from a 56-byte block placed right before it (``BLOCK``: magic, the table's
link-time start/end, the RELRO pages glibc made read-only after relocating, the original
``DT_INIT``, its own link-time address). It computes the load base from its own address,
makes the RELRO pages writable (mprotect, a raw system call: no libc needed), applies
the table (the DT_RELR encoding: even word = address, odd word = bitmap of the next 63
words), makes them read-only again and jumps to the original ``DT_INIT``.

``CODE`` is ``SOURCE`` assembled (``as --64``, ``objcopy -O binary``; a test re-assembles
it and compares), so packing needs no assembler.

AArch64 (``SOURCE_A64``/``CODE_A64``, same block): arm64 kernels run 4, 16 or 64 KiB
pages and glibc re-protects RELRO at the run-time page size, so the block holds the
PT_GNU_RELRO's link-time start and size and the routine aligns them itself. It finds the
page size without libc or the auxiliary vector: ``mprotect(addr, 0, ...)`` fails with
EINVAL when ``addr`` is not page-aligned (mm/mprotect.c checks alignment first, then
returns 0 for a zero length; qemu-user returns ENOMEM there: only EINVAL counts), so an
address aligned to 4 KiB but not 16 KiB, then one aligned to 16 KiB but not 64 KiB,
tell the three apart. System calls by ``svc #0`` (x8 = 226, mprotect); DT_INIT's
arguments (x0-x2) are kept for the original DT_INIT, reached by ``br``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from elflayout.layouts import PT_GNU_RELRO

SOURCE = r"""	.text
blob:
magic:	.ascii "ELRELR01"
relr_start: .quad 0
relr_end:   .quad 0
relro_page: .quad 0
relro_len:  .quad 0
old_init:   .quad 0
self_addr:  .quad 0
entry:
	push %rbx
	push %rdi
	push %rsi
	push %rdx
	lea entry(%rip), %rbx
	sub self_addr(%rip), %rbx
	mov relro_len(%rip), %rsi
	test %rsi, %rsi
	jz 1f
	mov relro_page(%rip), %rdi
	add %rbx, %rdi
	mov $3, %edx
	mov $10, %eax
	syscall
	test %rax, %rax
	jz 1f
	ud2
1:	mov relr_start(%rip), %rsi
	add %rbx, %rsi
	mov relr_end(%rip), %rcx
	add %rbx, %rcx
	xor %r8d, %r8d
2:	cmp %rcx, %rsi
	jae 7f
	mov (%rsi), %rax
	add $8, %rsi
	test $1, %al
	jnz 3f
	lea (%rbx,%rax), %r8
	add %rbx, (%r8)
	add $8, %r8
	jmp 2b
3:	shr $1, %rax
	mov %r8, %rdx
4:	test %rax, %rax
	jz 6f
	test $1, %al
	jz 5f
	add %rbx, (%rdx)
5:	shr $1, %rax
	add $8, %rdx
	jmp 4b
6:	add $504, %r8
	jmp 2b
7:	mov relro_len(%rip), %rsi
	test %rsi, %rsi
	jz 8f
	mov relro_page(%rip), %rdi
	add %rbx, %rdi
	mov $1, %edx
	mov $10, %eax
	syscall
8:	mov old_init(%rip), %rax
	pop %rdx
	pop %rsi
	pop %rdi
	test %rax, %rax
	jz 9f
	add %rbx, %rax
	pop %rbx
	jmp *%rax
9:	pop %rbx
	ret
"""

CODE = bytes.fromhex(
    "454c52454c52303100000000000000000000000000000000000000000000000000000000000000000000000000000000"
    "000000000000000053575652488d1df5ffffff482b1de6ffffff488b35cfffffff4885f6741d488b3dbbffffff4801df"
    "ba03000000b80a0000000f054885c074020f0b488b358effffff4801de488b0d8cffffff4801d94531c04839ce733c48"
    "8b064883c608a801750d4c8d04034901184983c008ebe348d1e84c89c24885c07410a801740348011a48d1e84883c208"
    "ebeb4981c0f8010000ebbf488b354effffff4885f67416488b3d3affffff4801dfba01000000b80a0000000f05488b05"
    "34ffffff5a5e5f4885c074064801d85bffe05bc3"
)
SOURCE_A64 = r"""	.text
blob:
magic:	.ascii "ELRELR01"
relr_start: .quad 0
relr_end:   .quad 0
relro_start: .quad 0
relro_size: .quad 0
old_init:   .quad 0
self_addr:  .quad 0
entry:
	mov x12, x0
	mov x13, x1
	mov x14, x2
	adr x9, entry
	ldr x10, self_addr
	sub x9, x9, x10
	and x15, x9, #0xffffffffffff0000
	mov x16, #0x1000
	orr x0, x15, #0x1000
	mov x1, #0
	mov x2, #1
	mov x8, #226
	svc #0
	cmn x0, #22
	b.ne 1f
	mov x16, #0x4000
	orr x0, x15, #0x4000
	mov x1, #0
	mov x2, #1
	mov x8, #226
	svc #0
	cmn x0, #22
	b.ne 1f
	mov x16, #0x10000
1:	ldr x10, relro_start
	ldr x11, relro_size
	add x10, x10, x9
	add x11, x11, x10
	sub x17, x16, #1
	bic x10, x10, x17
	bic x11, x11, x17
	sub x11, x11, x10
	cbz x11, 2f
	mov x0, x10
	mov x1, x11
	mov x2, #3
	mov x8, #226
	svc #0
	cbz x0, 2f
	brk #0
2:	ldr x3, relr_start
	add x3, x3, x9
	ldr x4, relr_end
	add x4, x4, x9
	mov x5, #0
3:	cmp x3, x4
	b.hs 7f
	ldr x6, [x3], #8
	tbnz x6, #0, 4f
	add x5, x9, x6
	ldr x7, [x5]
	add x7, x7, x9
	str x7, [x5], #8
	b 3b
4:	lsr x6, x6, #1
	mov x15, x5
5:	cbz x6, 6f
	tbz x6, #0, 55f
	ldr x7, [x15]
	add x7, x7, x9
	str x7, [x15]
55:	lsr x6, x6, #1
	add x15, x15, #8
	b 5b
6:	add x5, x5, #504
	b 3b
7:	cbz x11, 8f
	mov x0, x10
	mov x1, x11
	mov x2, #1
	mov x8, #226
	svc #0
8:	ldr x16, old_init
	mov x0, x12
	mov x1, x13
	mov x2, x14
	cbz x16, 9f
	add x16, x16, x9
	br x16
9:	ret
"""

CODE_A64 = bytes.fromhex(
    "454c52454c52303100000000000000000000000000000000000000000000000000000000000000000000000000000000"
    "0000000000000000ec0300aaed0301aaee0302aaa9ffff104affff5829010acb2fbd7092100082d2e00174b2010080d2"
    "220080d2481c80d2010000d41f5800b141010054100088d2e00172b2010080d2220080d2481c80d2010000d41f5800b1"
    "410000543000a0d20afcff582bfcff584a01098b6b010a8b110600d14a01318a6b01318a6b010acb0b0100b4e0030aaa"
    "e1030baa620080d2481c80d2010000d4400000b4000020d483f9ff586300098b84f9ff588400098b050080d27f0004eb"
    "82020054668440f8c60000372501068ba70040f9e700098ba78400f8f8ffff17c6fc41d3ef0305aa060100b486000036"
    "e70140f9e700098be70100f9c6fc41d3ef210091f9ffff17a5e00791ecffff17cb0000b4e0030aaae1030baa220080d2"
    "481c80d2010000d490f6ff58e0030caae1030daae2030eaa700000b41002098b00021fd6c0035fd6"
)
MAGIC = b"ELRELR01"
BLOCK = struct.Struct("<8s6Q")  # magic, relr_start, relr_end, relro_page, relro_len, old_init, self_addr
ENTRY = BLOCK.size              # the routine starts right after the block
SIZE = len(CODE)


def relro_segment(phdrs) -> tuple[int, int]:
    """(link-time start, size) of the last PT_GNU_RELRO (AArch64: aligned at run time)."""
    relro = (0, 0)
    for q in phdrs[phdrs["p_type"] == PT_GNU_RELRO]:
        relro = (int(q["p_vaddr"]), int(q["p_memsz"]))
    return relro


def relro_pages(phdrs, page: int = 4096) -> tuple[int, int]:
    """(start, length) of the whole pages glibc's _dl_protect_relro makes read-only after
    relocation (the last PT_GNU_RELRO of the numpy program headers ``phdrs``): the routine
    makes them writable while it applies the table."""
    relro = (0, 0)
    for q in phdrs[phdrs["p_type"] == PT_GNU_RELRO]:
        lo, hi = int(q["p_vaddr"]) // page * page, int(q["p_vaddr"] + q["p_memsz"]) // page * page
        relro = (lo, hi - lo)
    return relro


def blob(relr_start: int, relr_end: int, relro_page: int, relro_len: int, old_init: int, entry: int) -> bytes:
    """Block + routine, for a routine whose entry is at link-time address ``entry``."""
    return BLOCK.pack(MAGIC, relr_start, relr_end, relro_page, relro_len, old_init, entry) + CODE[ENTRY:]


@dataclass(frozen=True)
class Applier:
    """One machine's routine: its code, and what its block's RELRO fields hold."""
    machine: str
    code: bytes

    @property
    def size(self) -> int:
        return len(self.code)

    def relro(self, phdrs, page: int = 4096) -> tuple[int, int]:
        """The block's RELRO fields: whole 4 KiB pages (x86-64), or the segment itself
        (AArch64, aligned by the routine at the run-time page size)."""
        return relro_segment(phdrs) if self.machine == "EM_AARCH64" else relro_pages(phdrs, page)

    def blob(self, relr_start: int, relr_end: int, relro_a: int, relro_b: int, old_init: int, entry: int) -> bytes:
        return BLOCK.pack(MAGIC, relr_start, relr_end, relro_a, relro_b, old_init, entry) + self.code[ENTRY:]


APPLIERS = {"EM_X86_64": Applier("EM_X86_64", CODE), "EM_AARCH64": Applier("EM_AARCH64", CODE_A64)}
MAX_SIZE = max(a.size for a in APPLIERS.values())


def for_machine(machine: str) -> Applier:
    return APPLIERS[machine]


def decode(data: bytes) -> dict | None:
    """The parameters of a blob (``data`` starts at its block; at least the routine's
    size, up to ``MAX_SIZE`` bytes), or None if it is not one. ``size``: the blob's bytes."""
    for ap in APPLIERS.values():
        if len(data) >= ap.size and data[ENTRY:ap.size] == ap.code[ENTRY:]:
            magic, rs, re_, rp, rl, oi, sa = BLOCK.unpack_from(data)
            if magic != MAGIC:
                return None
            return dict(relr_start=rs, relr_end=re_, relro_page=rp, relro_len=rl, old_init=oi, entry=sa,
                        size=ap.size, machine=ap.machine)
    return None


def decode_at(img, entry) -> dict | None:
    """``decode`` of the blob whose routine starts at link-time address ``entry`` in the
    ``elfcore.ElfImage`` ``img``, or None (no such address in the file, not a blob)."""
    if entry is None or entry < ENTRY:
        return None
    off = int(img.vaddr_to_offset(entry - ENTRY))
    if off < 0 or off + min(a.size for a in APPLIERS.values()) > img.size:
        return None
    return decode(bytes(img.mm[off:off + MAX_SIZE]))
