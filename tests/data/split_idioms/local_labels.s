# Local labels between functions: a constant table under a plain label (no symbol
# type) after f, read by g; `.L` labels jumped to across a function boundary.
# Expected: 7 8 17 19.
    .text
    .globl idiom, f, g
    .type f,@function
f:  movl $7, %eax
    ret
    .size f, .-f
consts:
    .long 7, 8, 9, 10
    .type g,@function
g:  leaq consts(%rip), %rdx
    movslq %edi, %rdi
    movl (%rdx,%rdi,4), %eax
.Lg_out:
    ret
    .size g, .-g
    .type idiom,@function
idiom:
    cmpl $2, %edi
    jl g
    call g
    addl $8, %eax
    cmpl $3, %edi
    jne .Lg_out
    incl %eax
    jmp .Lg_out
    .size idiom, .-idiom
    .section .note.GNU-stack,"",@progbits
