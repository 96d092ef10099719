; elflayout example module for opt-16 -O2 / llc-16
target triple = "x86_64-pc-linux-gnu"

@table = global [8 x i32] [i32 3, i32 1, i32 4, i32 1, i32 5, i32 9, i32 2, i32 6]

define internal i32 @square(i32 %x) {
entry:
  %m = mul i32 %x, %x
  ret i32 %m
}

define i32 @sum_squares(i32 %n) {
entry:
  br label %loop
loop:
  %i = phi i32 [ 0, %entry ], [ %i.next, %loop ]
  %acc = phi i32 [ 0, %entry ], [ %acc.next, %loop ]
  %idx = and i32 %i, 7
  %p = getelementptr [8 x i32], ptr @table, i32 0, i32 %idx
  %v = load i32, ptr %p
  %s = call i32 @square(i32 %v)
  %acc.next = add i32 %acc, %s
  %i.next = add i32 %i, 1
  %done = icmp eq i32 %i.next, %n
  br i1 %done, label %exit, label %loop
exit:
  ret i32 %acc.next
}

define i32 @classify(i32 %x) {
entry:
  switch i32 %x, label %other [
    i32 0, label %a
    i32 1, label %b
    i32 2, label %c
    i32 3, label %d
    i32 4, label %e
  ]
a:
  ret i32 10
b:
  ret i32 27
c:
  ret i32 31
d:
  ret i32 44
e:
  ret i32 59
other:
  %r = call i32 @sum_squares(i32 %x)
  ret i32 %r
}
