# The table and the word of named_word.s, in another object as in a real library.
    .text
    .globl user
    .hidden f0, f1, f2
    .type user,@function
user:
    leaq tab(%rip), %rax
    ret
    .size user, .-user
    .section .data.rel.ro,"aw"
    .globl rel
    .type rel,@object
tab: .quad 0
rel:
    .long TARGET - .
    .long 0
    .size rel, .-rel
