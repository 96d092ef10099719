# A PC-relative word against a named symbol (`.long f1 - .`, as a type-table entry
# `DW.ref._ZTI... - .`) in data after a table that code loads with lea: it designates
# f1, not an entry relative to that table.
    .text
    .globl f0, f1, f2
    .hidden f0, f1, f2
    .type f0,@function
f0: .skip 10, 0x90
    movl $1, %eax
    ret
    .size f0, .-f0
    .type f1,@function
f1: .skip 10, 0x90
    movl $2, %eax
    ret
    .size f1, .-f1
    .type f2,@function
f2: .skip 10, 0x90
    movl $3, %eax
    ret
    .size f2, .-f2
