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
"""

from __future__ import annotations

import struct

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
MAGIC = b"ELRELR01"
BLOCK = struct.Struct("<8s6Q")  # magic, relr_start, relr_end, relro_page, relro_len, old_init, self_addr
ENTRY = BLOCK.size              # the routine starts right after the block
SIZE = len(CODE)


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


def decode(data: bytes) -> dict | None:
    """The parameters of a blob (``data`` starts at its block), or None if it is not one."""
    if len(data) < SIZE or data[ENTRY:SIZE] != CODE[ENTRY:]:
        return None
    magic, rs, re_, rp, rl, oi, sa = BLOCK.unpack_from(data)
    if magic != MAGIC:
        return None
    return dict(relr_start=rs, relr_end=re_, relro_page=rp, relro_len=rl, old_init=oi, entry=sa)
