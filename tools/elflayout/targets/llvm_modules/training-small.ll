; elflayout small training module for held-out evaluation: not the held-out example module
target triple = "x86_64-pc-linux-gnu"

@limit = global i32 100

define internal i32 @gcd(i32 %a, i32 %b) {
entry:
  %z = icmp eq i32 %b, 0
  br i1 %z, label %done, label %rec
rec:
  %r = urem i32 %a, %b
  %g = call i32 @gcd(i32 %b, i32 %r)
  ret i32 %g
done:
  ret i32 %a
}

define i32 @count_coprime(i32 %n) {
entry:
  %lim = load i32, ptr @limit
  %m = icmp slt i32 %n, %lim
  %top = select i1 %m, i32 %n, i32 %lim
  br label %loop
loop:
  %i = phi i32 [ 1, %entry ], [ %i.next, %loop ]
  %c = phi i32 [ 0, %entry ], [ %c.next, %loop ]
  %g = call i32 @gcd(i32 %i, i32 %top)
  %one = icmp eq i32 %g, 1
  %inc = zext i1 %one to i32
  %c.next = add i32 %c, %inc
  %i.next = add i32 %i, 1
  %more = icmp sle i32 %i.next, %top
  br i1 %more, label %loop, label %exit
exit:
  ret i32 %c.next
}
