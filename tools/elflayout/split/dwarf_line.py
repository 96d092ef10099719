"""``.debug_line`` of an object to split: decode each line program into sequences of
rows, and encode a split section's sequence again as one sequence per new section.

The assembler writes one sequence per code section: ``DW_LNE_set_address`` (a
relocation against the section) and rows whose addresses advance by constants. A new
section gets its own sequence: its rows, and first a row at its start carrying the
state of the row that covered that address (so every address keeps its file:line),
ended by ``DW_LNE_end_sequence`` at the section's end.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from elflayout.split.dwarf import Refused, Reloc, enc_sleb, enc_uleb, sleb, uleb

# DWARF 5 §6.2.5.2/§6.2.5.3 opcodes
COPY, ADVANCE_PC, ADVANCE_LINE, SET_FILE, SET_COLUMN, NEGATE_STMT, SET_BASIC_BLOCK, CONST_ADD_PC, \
    FIXED_ADVANCE_PC, SET_PROLOGUE_END, SET_EPILOGUE_BEGIN, SET_ISA = range(1, 13)
END_SEQUENCE, SET_ADDRESS, DEFINE_FILE, SET_DISCRIMINATOR = 1, 2, 3, 4


@dataclass
class Row:
    addr: int
    file: int
    line: int
    column: int
    is_stmt: bool
    basic_block: bool
    prologue_end: bool
    epilogue_begin: bool
    isa: int
    discriminator: int
    # DW_LNS_set_file seen in the sequence: binutils (2.40) reads rows before it as file
    # 0, not DWARF 5's initial 1, so a new sequence sets the file just where the original did
    file_set: bool = False


@dataclass
class Sequence:
    begin: int                  # byte span in the section
    end: int
    sec: int                    # section of its DW_LNE_set_address (-1: none)
    rows: list[Row] = field(default_factory=list)
    end_addr: int = 0
    set_address_at: int = -1    # offset of the first relocated address field
    address_fields: list[int] = field(default_factory=list)    # every DW_LNE_set_address's field


@dataclass
class Unit:
    offset: int
    program: int                # offset of the first opcode
    end: int
    line_base: int
    line_range: int
    opcode_base: int
    default_is_stmt: bool
    sequences: list[Sequence] = field(default_factory=list)


def parse(data: bytes, rel: dict[int, Reloc], split: set[int]) -> list[Unit]:
    units, p = [], 0
    while p < len(data):
        u = _header(data, p)
        _program(data, u, rel, split)
        units.append(u)
        p = u.end
    return units


def _header(data: bytes, p: int) -> Unit:
    if p + 12 > len(data):
        raise Refused(f".debug_line: truncated header at {p:#x}")
    length = int.from_bytes(data[p:p + 4], "little")
    version = int.from_bytes(data[p + 4:p + 6], "little")
    if length >= 0xFFFFFFF0 or version not in (4, 5) or (version == 5 and data[p + 6] != 8):
        raise Refused(f".debug_line: table at {p:#x} is not 32-bit DWARF 4 or 5 with 8-byte addresses")
    end = p + 4 + length
    at = p + 6 if version == 4 else p + 8      # (DWARF 5 adds address and selector sizes)
    hlen = int.from_bytes(data[at:at + 4], "little")
    h = at + 4
    if end > len(data) or h + 6 > end or h + hlen > end:
        raise Refused(f".debug_line: table at {p:#x} runs past the end of the section")
    min_inst, max_ops, default_is_stmt, line_base, line_range, opcode_base = data[h:h + 6]
    if min_inst != 1 or max_ops != 1 or line_range == 0 or opcode_base != 13:
        raise Refused(f".debug_line: table at {p:#x} has an encoding split does not rewrite "
                      f"(minimum instruction length {min_inst}, {max_ops} operations, opcode base {opcode_base})")
    return Unit(p, h + hlen, end, line_base - 256 if line_base > 127 else line_base, line_range, opcode_base,
                bool(default_is_stmt))


def _fresh(u: Unit) -> Row:
    return Row(0, 1, 1, 0, u.default_is_stmt, False, False, False, 0, 0)


def _program(data: bytes, u: Unit, rel: dict[int, Reloc], split: set[int]) -> None:
    p, st = u.program, _fresh(u)
    seq = Sequence(p, p, -1)
    while p < u.end:
        op, at = data[p], p
        p += 1
        if op >= u.opcode_base:
            adj = op - u.opcode_base
            st.addr += adj // u.line_range
            st.line += u.line_base + adj % u.line_range
            _row(seq, st, at)
        elif op == 0:
            n, q = uleb(data, p)
            p = q + n
            if n == 0 or p > u.end:
                raise Refused(f".debug_line+{at:#x}: malformed extended opcode")
            sub = data[q]
            if sub == END_SEQUENCE:
                seq.end, seq.end_addr = p, st.addr
                _closed(seq, rel, split)
                u.sequences.append(seq)
                st, seq = _fresh(u), Sequence(p, p, -1)
            elif sub == SET_ADDRESS and n == 9:
                r = rel.get(q + 1)
                if r is None or int.from_bytes(data[q + 1:q + 9], "little"):
                    raise Refused(f".debug_line+{at:#x}: DW_LNE_set_address without a relocation")
                if seq.set_address_at >= 0 and (seq.sec in split or r.sec in split):
                    # The assembler sets the address again after alignment padding: forward only,
                    # in the same section, or the rows cannot be read as one section's.
                    if r.sec != seq.sec or r.addend < st.addr:
                        raise Refused(f".debug_line+{at:#x}: address set again inside a sequence, "
                                      "to another section or backwards")
                    seq.address_fields.append(q + 1)
                    st.addr = r.addend
                else:
                    seq.sec, seq.set_address_at, st.addr = r.sec, q + 1, r.addend
                    seq.address_fields.append(q + 1)
            elif sub == SET_DISCRIMINATOR:
                st.discriminator, _ = uleb(data, q + 1)
            else:
                raise Refused(f".debug_line+{at:#x}: extended opcode {sub} (not rewritten by split)")
        else:
            p = _standard(data, op, p, st, u, seq, at)
    if seq.begin != u.end:
        raise Refused(f".debug_line: sequence at {seq.begin:#x} has no DW_LNE_end_sequence")


def _standard(data: bytes, op: int, p: int, st: Row, u: Unit, seq: Sequence, at: int) -> int:
    if op == COPY:
        _row(seq, st, at)
    elif op == ADVANCE_PC:
        v, p = uleb(data, p)
        st.addr += v
    elif op == ADVANCE_LINE:
        v, p = sleb(data, p)
        st.line += v
    elif op == SET_FILE:
        st.file, p = uleb(data, p)
        st.file_set = True
    elif op == SET_COLUMN:
        st.column, p = uleb(data, p)
    elif op == NEGATE_STMT:
        st.is_stmt = not st.is_stmt
    elif op == SET_BASIC_BLOCK:
        st.basic_block = True
    elif op == CONST_ADD_PC:
        st.addr += (255 - u.opcode_base) // u.line_range
    elif op == FIXED_ADVANCE_PC:
        st.addr += int.from_bytes(data[p:p + 2], "little")
        p += 2
    elif op == SET_PROLOGUE_END:
        st.prologue_end = True
    elif op == SET_EPILOGUE_BEGIN:
        st.epilogue_begin = True
    elif op == SET_ISA:
        st.isa, p = uleb(data, p)
    return p


def _row(seq: Sequence, st: Row, at: int) -> None:
    if seq.set_address_at < 0:
        raise Refused(f".debug_line+{at:#x}: a row before DW_LNE_set_address")
    if seq.rows and st.addr < seq.rows[-1].addr:
        raise Refused(f".debug_line+{at:#x}: addresses of a sequence go backwards")
    seq.rows.append(Row(**vars(st)))
    st.basic_block = st.prologue_end = st.epilogue_begin = False
    st.discriminator = 0


def _closed(seq: Sequence, rel: dict[int, Reloc], split: set[int]) -> None:
    """A sequence to re-encode may hold no relocation but its DW_LNE_set_address."""
    if seq.sec not in split:
        return
    if seq.rows and seq.end_addr < seq.rows[-1].addr:
        raise Refused(f".debug_line+{seq.begin:#x}: sequence ends before its last row")
    if any(seq.begin <= o < seq.end and o not in seq.address_fields for o in rel):
        raise Refused(f".debug_line+{seq.begin:#x}: relocation inside a line program")


def encode(u: Unit, seq: Sequence, lo: int, hi: int) -> tuple[bytes, int, int] | None:
    """The sequence for ``[lo, hi)`` of ``seq``'s section: (bytes, offset of the
    address field to relocate, the address it designates); None when it has no rows."""
    before = [r for r in seq.rows if r.addr <= lo]
    rows = [r for r in seq.rows if lo <= r.addr < hi]
    hi = min(hi, seq.end_addr)
    if before and (not rows or rows[0].addr > lo):
        rows.insert(0, Row(**{**vars(before[-1]), "addr": lo, "basic_block": False, "prologue_end": False,
                              "epilogue_begin": False}))
    if not rows or lo >= hi:
        return None
    out = bytearray(b"\0" + enc_uleb(9) + bytes([SET_ADDRESS]))
    field_at, start = len(out), rows[0].addr
    out += bytes(8)
    st = _fresh(u)
    st.addr = start
    for r in rows:
        out += _state(st, r)
        st = Row(**{**vars(r), "basic_block": False, "prologue_end": False, "epilogue_begin": False,
                    "discriminator": 0})
    if hi > st.addr:
        out += bytes([ADVANCE_PC]) + enc_uleb(hi - st.addr)
    out += b"\0" + enc_uleb(1) + bytes([END_SEQUENCE])
    return bytes(out), field_at, start


def _state(st: Row, r: Row) -> bytes:
    """Opcodes taking the registers from ``st`` to row ``r``, then DW_LNS_copy."""
    out = bytearray()
    if r.file != st.file or (r.file_set and not st.file_set):
        out += bytes([SET_FILE]) + enc_uleb(r.file)
    if r.column != st.column:
        out += bytes([SET_COLUMN]) + enc_uleb(r.column)
    if r.is_stmt != st.is_stmt:
        out.append(NEGATE_STMT)
    if r.isa != st.isa:
        out += bytes([SET_ISA]) + enc_uleb(r.isa)
    if r.basic_block:
        out.append(SET_BASIC_BLOCK)
    if r.prologue_end:
        out.append(SET_PROLOGUE_END)
    if r.epilogue_begin:
        out.append(SET_EPILOGUE_BEGIN)
    if r.discriminator:
        d = enc_uleb(r.discriminator)
        out += b"\0" + enc_uleb(len(d) + 1) + bytes([SET_DISCRIMINATOR]) + d
    if r.line != st.line:
        out += bytes([ADVANCE_LINE]) + enc_sleb(r.line - st.line)
    if r.addr != st.addr:
        if r.addr < st.addr:
            raise AssertionError("rows out of order")
        out += bytes([ADVANCE_PC]) + enc_uleb(r.addr - st.addr)
    out.append(COPY)
    return bytes(out)
