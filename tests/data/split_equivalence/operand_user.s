# The user of operand.s's t4, in another object as in a real library.
    .text
    .globl user
    .hidden t4
    .type user,@function
user:
    leaq t4-OFFSET(%rip), %r9
    movzbl (%r9,%rdi), %eax
    ret
    .size user, .-user
