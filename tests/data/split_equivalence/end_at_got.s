# `lea dirs+24(%rip)`, the end of a table: in the original order another object's data
# follows it, in the reversed order the GOT does (a static-style link: `movl $ext`).
# The address is the end of dirs in both. Assembled with -mrelax-relocations=no so the
# GOT load stays one.
    .section .data.rel.ro.local,"aw"
    .align 8
    .type dirs,@object
dirs: .quad 1, 2, 3
    .size dirs, .-dirs
    .text
    .globl user
    .type user,@function
user:
    leaq dirs+SIZE(%rip), %rax
    movq ext@GOTPCREL(%rip), %rcx
    movl $ext, %edx
    ret
    .size user, .-user
