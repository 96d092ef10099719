; elflayout training module for held-out evaluation: not the held-out example module
target triple = "x86_64-pc-linux-gnu"

%struct.point = type { i32, i32, double }

@counts = global [16 x i64] zeroinitializer
@weights = internal constant [6 x double] [double 0.5, double 1.5, double 2.0, double 3.25, double 4.0, double 8.0]
@msg = private unnamed_addr constant [12 x i8] c"total: %ld\0A\00"

declare i32 @printf(ptr, ...)
declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)

define internal i64 @cube(i64 %x) {
entry:
  %a = mul i64 %x, %x
  %b = mul i64 %a, %x
  ret i64 %b
}

define i64 @histogram(ptr %data, i32 %n) {
entry:
  %empty = icmp sle i32 %n, 0
  br i1 %empty, label %done, label %loop
loop:
  %i = phi i32 [ 0, %entry ], [ %i.next, %loop ]
  %sum = phi i64 [ 0, %entry ], [ %sum.next, %loop ]
  %p = getelementptr i32, ptr %data, i32 %i
  %v = load i32, ptr %p
  %bucket = and i32 %v, 15
  %slot = getelementptr [16 x i64], ptr @counts, i32 0, i32 %bucket
  %c = load i64, ptr %slot
  %c1 = add i64 %c, 1
  store i64 %c1, ptr %slot
  %w = sext i32 %v to i64
  %cu = call i64 @cube(i64 %w)
  %sum.next = add i64 %sum, %cu
  %i.next = add nsw i32 %i, 1
  %more = icmp slt i32 %i.next, %n
  br i1 %more, label %loop, label %done
done:
  %r = phi i64 [ 0, %entry ], [ %sum.next, %loop ]
  ret i64 %r
}

define i32 @opcode_cost(i32 %op) {
entry:
  switch i32 %op, label %default [
    i32 0, label %add
    i32 1, label %sub
    i32 2, label %mul
    i32 3, label %div
    i32 4, label %load
    i32 5, label %store
    i32 7, label %call
  ]
add:
  ret i32 1
sub:
  ret i32 1
mul:
  ret i32 3
div:
  ret i32 20
load:
  ret i32 4
store:
  ret i32 4
call:
  %h = call i64 @histogram(ptr null, i32 0)
  %t = trunc i64 %h to i32
  ret i32 %t
default:
  ret i32 0
}

define double @weighted(ptr %pts, i32 %n) {
entry:
  br label %loop
loop:
  %i = phi i32 [ 0, %entry ], [ %i.next, %loop ]
  %acc = phi double [ 0.0, %entry ], [ %acc.next, %loop ]
  %pt = getelementptr %struct.point, ptr %pts, i32 %i
  %zp = getelementptr %struct.point, ptr %pt, i32 0, i32 2
  %z = load double, ptr %zp
  %k = urem i32 %i, 6
  %wp = getelementptr [6 x double], ptr @weights, i32 0, i32 %k
  %wt = load double, ptr %wp
  %m = fmul double %z, %wt
  %neg = fcmp olt double %m, 0.0
  %abs = fneg double %m
  %v = select i1 %neg, double %abs, double %m
  %acc.next = fadd double %acc, %v
  %i.next = add i32 %i, 1
  %done = icmp eq i32 %i.next, %n
  br i1 %done, label %exit, label %loop
exit:
  ret double %acc.next
}

define void @copy_points(ptr %dst, ptr %src, i64 %n) {
entry:
  %bytes = mul i64 %n, 16
  call void @llvm.memcpy.p0.p0.i64(ptr %dst, ptr %src, i64 %bytes, i1 false)
  ret void
}

define i32 @report(ptr %data, i32 %n) {
entry:
  %t = call i64 @histogram(ptr %data, i32 %n)
  %r = call i32 (ptr, ...) @printf(ptr @msg, i64 %t)
  ret i32 %r
}
