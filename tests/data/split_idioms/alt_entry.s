# Alternate entry points: `entry2` starts inside entry1's code and both share one
# .cfi region (one FDE); entry1 jumps to a label inside entry2. Expected: 100 101 203 204.
    .text
    .globl idiom, entry1, entry2
    .type entry1,@function
entry1:
    .cfi_startproc
    movl %edi, %eax
    jmp .Lcommon
    .type entry2,@function
entry2:
    leal 1(%rdi), %eax
.Lcommon:
    addl $100, %eax
    ret
    .cfi_endproc
    .size entry2, .-entry2
    .size entry1, .-entry1
    .type idiom,@function
idiom:
    .cfi_startproc
    cmpl $2, %edi
    jl entry1
    subq $8, %rsp
    .cfi_def_cfa_offset 16
    call entry2
    addl $100, %eax
    addq $8, %rsp
    .cfi_def_cfa_offset 8
    ret
    .cfi_endproc
    .size idiom, .-idiom
    .section .note.GNU-stack,"",@progbits
