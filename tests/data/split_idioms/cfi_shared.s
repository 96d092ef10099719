# One .cfi region (one FDE) spanning two global functions, each called with a 32-bit
# call: the unwind entry's length is a constant covering both. Expected: 1 2 4 5.
    .text
    .globl idiom, lo, hi
    .type lo,@function
lo: .cfi_startproc
    leal 1(%rdi), %eax
    ret
    .size lo, .-lo
    .type hi,@function
hi: leal 2(%rdi), %eax
    ret
    .cfi_endproc
    .size hi, .-hi
    .type idiom,@function
idiom:
    .cfi_startproc
    subq $8, %rsp
    .cfi_def_cfa_offset 16
    cmpl $2, %edi
    jge 1f
    call lo
    jmp 2f
1:  call hi
2:  addq $8, %rsp
    .cfi_def_cfa_offset 8
    ret
    .cfi_endproc
    .size idiom, .-idiom
    .section .note.GNU-stack,"",@progbits
