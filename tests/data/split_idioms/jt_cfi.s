# Every function in its own .cfi region, as compilers write them (declared extents), the
# handlers global and h1 also called directly; the table of differences in .rodata is all
# that says h0..h3 must stay together. Expected: 10 21 32 43.
    .text
    .globl idiom, h0, h1, h2, h3
    .type idiom,@function
idiom:
    .cfi_startproc
    cmpl $1, %edi
    je .Ldirect
    movslq %edi, %rdi
    leaq h0(%rip), %rdx
    leaq table(%rip), %rcx
    movslq (%rcx,%rdi,4), %rax
    addq %rdx, %rax
    jmp *%rax
.Ldirect:
    leaq h1(%rip), %rax
    jmp *%rax
    .cfi_endproc
    .size idiom, .-idiom
    .type h0,@function
h0: .cfi_startproc
    leal 10(%rdi), %eax
    ret
    .cfi_endproc
    .size h0, .-h0
    .type h1,@function
h1: .cfi_startproc
    leal 20(%rdi), %eax
    ret
    .cfi_endproc
    .size h1, .-h1
    .type h2,@function
h2: .cfi_startproc
    leal 30(%rdi), %eax
    ret
    .cfi_endproc
    .size h2, .-h2
    .type h3,@function
h3: .cfi_startproc
    leal 40(%rdi), %eax
    ret
    .cfi_endproc
    .size h3, .-h3
    .section .rodata
    .p2align 2
table:
    .long 0, h1 - h0, h2 - h0, h3 - h0
    .section .note.GNU-stack,"",@progbits
