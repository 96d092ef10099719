# 8-byte label differences in writable .data, handlers global. Expected: 10 21 32 43.
    .text
    .globl idiom, h0, h1, h2, h3
    .type idiom,@function
idiom:
    movslq %edi, %rdi
    leaq h0(%rip), %rdx
    leaq table(%rip), %rcx
    movq (%rcx,%rdi,8), %rax
    addq %rdx, %rax
    jmp *%rax
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
    .data
    .p2align 3
    .type table,@object
table:
    .quad 0, h1 - h0, h2 - h0, h3 - h0
    .size table, .-table
    .section .note.GNU-stack,"",@progbits
