# f1 falls through into f2; f3 reaches f4 with an 8-bit jump. Expected: 2 5 4 3.
    .text
    .globl idiom, f1, f2, f3, f4
    .type idiom,@function
idiom:
    cmpl $0, %edi
    je f1
    cmpl $1, %edi
    je f3
    cmpl $2, %edi
    je f4
    movl $2, %eax
    jmp f2
    .size idiom, .-idiom
    .type f1,@function
f1: movl $1, %eax
    .size f1, .-f1
    .type f2,@function
f2: addl $1, %eax
    ret
    .size f2, .-f2
    .type f3,@function
f3: movl $1, %eax
    jmp f4b
    .size f3, .-f3
    .type f4,@function
f4: movl $0, %eax
f4b: addl $4, %eax
    ret
    .size f4, .-f4
    .section .note.GNU-stack,"",@progbits
