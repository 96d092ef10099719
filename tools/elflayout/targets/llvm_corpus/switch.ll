; elflayout training corpus: control flow (a dense switch lowered to a jump table, a sparse
; one lowered to compares and bit tests, a table of string pointers, bit intrinsics)
target triple = "x86_64-pc-linux-gnu"

@s0 = private unnamed_addr constant [5 x i8] c"zero\00"
@s1 = private unnamed_addr constant [4 x i8] c"one\00"
@s2 = private unnamed_addr constant [4 x i8] c"two\00"
@other = private unnamed_addr constant [6 x i8] c"other\00"
@names = internal constant [3 x ptr] [ptr @s0, ptr @s1, ptr @s2]

declare i32 @llvm.ctpop.i32(i32)
declare i64 @llvm.bswap.i64(i64)

define i32 @weekday_len(i32 %d) {
entry:
  switch i32 %d, label %bad [
    i32 0, label %six
    i32 1, label %seven
    i32 2, label %nine
    i32 3, label %eight
    i32 4, label %six
    i32 5, label %eight
    i32 6, label %six
  ]
six:
  ret i32 6
seven:
  ret i32 7
eight:
  ret i32 8
nine:
  ret i32 9
bad:
  ret i32 -1
}

define i1 @is_space(i8 %c) {
entry:
  switch i8 %c, label %no [
    i8 32, label %yes
    i8 9, label %yes
    i8 10, label %yes
    i8 13, label %yes
    i8 11, label %yes
    i8 12, label %yes
  ]
yes:
  ret i1 true
no:
  ret i1 false
}

define ptr @name_of(i32 %k) {
entry:
  %in = icmp ult i32 %k, 3
  br i1 %in, label %look, label %out
look:
  %p = getelementptr [3 x ptr], ptr @names, i32 0, i32 %k
  %s = load ptr, ptr %p
  ret ptr %s
out:
  ret ptr @other
}

define i64 @mangle(i64 %x, i32 %bits) {
entry:
  %c = call i32 @llvm.ctpop.i32(i32 %bits)
  %odd = and i32 %c, 1
  %z = icmp eq i32 %odd, 0
  %b = call i64 @llvm.bswap.i64(i64 %x)
  %r = select i1 %z, i64 %x, i64 %b
  %sh = zext i32 %c to i64
  %rot = shl i64 %r, %sh
  ret i64 %rot
}
