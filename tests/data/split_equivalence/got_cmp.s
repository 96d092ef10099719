# A GOT load compared against (`cmp f1@GOTPCREL(%rip), %rdi`): in a non-PIC link the
# linker relaxes it to `cmp $f1, %rdi`, an immediate that is f1's address in each order.
# The absolute `movl $f0` makes the object unlinkable with -shared (a static-style link).
    .text
    .globl f0, f1, f2, user
    .type f0,@function
f0: movl $1, %eax
    ret
    .size f0, .-f0
    .type f1,@function
f1: movl $2, %eax
    ret
    .size f1, .-f1
    .type f2,@function
f2: movl $3, %eax
    ret
    .size f2, .-f2
    .type user,@function
user:
    movl $f0, %eax
    cmpq TARGET@GOTPCREL(%rip), %rdi
    sete %al
    ret
    .size user, .-user
