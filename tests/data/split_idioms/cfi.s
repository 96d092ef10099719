# Ordinary functions, each with its own .cfi region, calling each other: every one may
# part. Expected: 3 4 7 12.
    .text
    .globl idiom
    .type sq,@function
sq: .cfi_startproc
    movl %edi, %eax
    imull %edi, %eax
    ret
    .cfi_endproc
    .size sq, .-sq
    .type add3,@function
add3:
    .cfi_startproc
    pushq %rbx
    .cfi_def_cfa_offset 16
    .cfi_offset %rbx, -16
    call sq
    addl $3, %eax
    popq %rbx
    .cfi_def_cfa_offset 8
    ret
    .cfi_endproc
    .size add3, .-add3
    .type idiom,@function
idiom:
    .cfi_startproc
    jmp add3
    .cfi_endproc
    .size idiom, .-idiom
    .section .note.GNU-stack,"",@progbits
