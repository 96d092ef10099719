# As jt_text.s with the handlers global: their names are referenced from outside, so
# only the table says they must stay together. Expected: 10 21 32 43.
    .text
    .globl idiom, h0, h1, h2, h3
    .type idiom,@function
idiom:
    movslq %edi, %rdi
    leaq table(%rip), %rdx
    movslq (%rdx,%rdi,4), %rax
    addq %rdx, %rax
    jmp *%rax
table:
    .long h0 - table, h1 - table, h2 - table, h3 - table
    .size idiom, .-idiom
    .type h0,@function
h0: leal 10(%rdi), %eax
    ret
    .size h0, .-h0
    .type h1,@function
h1: leal 20(%rdi), %eax
    ret
    .size h1, .-h1
    .type h2,@function
h2: leal 30(%rdi), %eax
    ret
    .size h2, .-h2
    .type h3,@function
h3: leal 40(%rdi), %eax
    ret
    .size h3, .-h3
    .section .note.GNU-stack,"",@progbits
