# Computed targets: `mov $(h2-h0)` and `lea (h1-h0)(%rax)` (an 8-bit displacement),
# handlers global. Expected: 10 21 32 43.
    .text
    .globl idiom, h0, h1, h2, h3
    .type idiom,@function
idiom:
    leaq h0(%rip), %rax
    cmpl $1, %edi
    jl 9f
    je 1f
    cmpl $2, %edi
    je 2f
    movl $(h3 - h0), %ecx
    addq %rcx, %rax
    jmp *%rax
1:  leaq (h1 - h0)(%rax), %rax
    jmp *%rax
2:  movl $(h2 - h0), %ecx
    addq %rcx, %rax
9:  jmp *%rax
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
