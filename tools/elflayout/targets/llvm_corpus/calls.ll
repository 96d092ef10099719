; elflayout training corpus: calls (external and indirect calls through a function-pointer
; table, varargs, tail calls, recursion, a string constant)
target triple = "x86_64-pc-linux-gnu"

@fmt = private unnamed_addr constant [8 x i8] c"%d: %s\0A\00"
@name = private unnamed_addr constant [6 x i8] c"hello\00"
@handlers = internal constant [3 x ptr] [ptr @h_inc, ptr @h_dbl, ptr @h_neg]

declare i32 @printf(ptr, ...)
declare i64 @strlen(ptr)
declare ptr @malloc(i64)
declare void @free(ptr)

define internal i32 @h_inc(i32 %x) {
  %r = add i32 %x, 1
  ret i32 %r
}
define internal i32 @h_dbl(i32 %x) {
  %r = shl i32 %x, 1
  ret i32 %r
}
define internal i32 @h_neg(i32 %x) {
  %r = sub i32 0, %x
  ret i32 %r
}

define i32 @dispatch(i32 %op, i32 %x) {
entry:
  %k = urem i32 %op, 3
  %p = getelementptr [3 x ptr], ptr @handlers, i32 0, i32 %k
  %f = load ptr, ptr %p
  %r = call i32 %f(i32 %x)
  ret i32 %r
}

define i64 @fib(i64 %n) {
entry:
  %small = icmp ult i64 %n, 2
  br i1 %small, label %base, label %rec
base:
  ret i64 %n
rec:
  %a = sub i64 %n, 1
  %b = sub i64 %n, 2
  %fa = call i64 @fib(i64 %a)
  %fb = call i64 @fib(i64 %b)
  %s = add i64 %fa, %fb
  ret i64 %s
}

define i32 @greet(i32 %n) {
entry:
  %len = call i64 @strlen(ptr @name)
  %buf = call ptr @malloc(i64 %len)
  %r = call i32 (ptr, ...) @printf(ptr @fmt, i32 %n, ptr @name)
  call void @free(ptr %buf)
  ret i32 %r
}

define i32 @forward(i32 %op, i32 %x) {
entry:
  %r = tail call i32 @dispatch(i32 %op, i32 %x)
  ret i32 %r
}
