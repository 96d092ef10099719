# Three tables; operand_user.s loads `lea t4-0xc0(%rip)` (a compiler folding `t4[c - 0xc0]`):
# in the original order that lands on gb, in another on whatever precedes t4 then. Its
# meaning is t4-0xc0 in every order.
    .section .rodata
    .globl gb, t4, pad
    .hidden gb, t4, pad
    .type gb,@object
gb: .fill 0xc0, 1, 1
    .size gb, .-gb
    .type t4,@object
t4: .fill 0x40, 1, 2
    .size t4, .-t4
    .type pad,@object
pad: .fill 0x100, 1, 3
    .size pad, .-pad
    .text
    .globl other
    .type other,@function
other:
    leaq gb(%rip), %rax
    ret
    .size other, .-other
