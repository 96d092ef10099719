# perlasm style (OpenSSL's x86_64 modules): a capability test jumping to another global
# variant, a constant table in .text read by one variant, `.long .Lx-.Ly` tables inside a
# function and a SEH-like `.rva`-free table in .rodata of differences within functions.
# Expected: 5 106 9 110.
    .text
    .globl idiom, impl_plain, impl_fast
    .type idiom,@function
idiom:
    testl $1, %edi
    jnz impl_fast
    jmp impl_plain
    .size idiom, .-idiom
    .type impl_plain,@function
impl_plain:
.cfi_startproc
    leaq .Lsw(%rip), %rdx
    movl %edi, %ecx
    andl $2, %ecx
    shrl $1, %ecx
    movslq (%rdx,%rcx,4), %rax
    addq %rdx, %rax
    jmp *%rax
.Lp0: leal 5(%rdi), %eax
    ret
.Lp1: leal 7(%rdi), %eax
    ret
.align 4
.Lsw:
    .long .Lp0-.Lsw, .Lp1-.Lsw
.cfi_endproc
    .size impl_plain, .-impl_plain
    .type impl_fast,@function
impl_fast:
.cfi_startproc
    leaq .Lconst(%rip), %rdx
    movl %edi, %ecx
    shrl $1, %ecx
    movl (%rdx,%rcx,4), %eax
    addl %edi, %eax
    ret
.cfi_endproc
    .size impl_fast, .-impl_fast
.align 64
.Lconst:
    .long 105, 107
    .section .rodata
.Linfo:
    .long .Lp1-impl_plain, .Lconst-impl_fast
    .section .note.GNU-stack,"",@progbits
