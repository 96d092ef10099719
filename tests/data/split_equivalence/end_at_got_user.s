# Data that follows end_at_got.s's table in the original order, and the GOT's symbol.
    .section .data.rel.ro,"aw"
    .align 8
    .globl other, ext
    .type other,@object
other: .quad 7
    .size other, .-other
    .text
    .type ext,@function
ext: ret
    .size ext, .-ext
