; elflayout training corpus: byte and string processing (an FNV-1a hash over a
; NUL-terminated string, a bucket lookup with unsigned remainder, byte compares)
target triple = "x86_64-pc-linux-gnu"

@buckets = global [64 x ptr] zeroinitializer

declare i32 @strcmp(ptr, ptr)

define i64 @fnv1a(ptr %s) {
entry:
  br label %loop
loop:
  %p = phi ptr [ %s, %entry ], [ %p.next, %body ]
  %h = phi i64 [ -3750763034362895579, %entry ], [ %h.next, %body ]
  %c = load i8, ptr %p
  %end = icmp eq i8 %c, 0
  br i1 %end, label %exit, label %body
body:
  %cz = zext i8 %c to i64
  %x = xor i64 %h, %cz
  %h.next = mul i64 %x, 1099511628211
  %p.next = getelementptr i8, ptr %p, i64 1
  br label %loop
exit:
  ret i64 %h
}

define ptr @lookup(ptr %key) {
entry:
  %h = call i64 @fnv1a(ptr %key)
  %b = urem i64 %h, 64
  %slot = getelementptr [64 x ptr], ptr @buckets, i64 0, i64 %b
  %name = load ptr, ptr %slot
  %empty = icmp eq ptr %name, null
  br i1 %empty, label %miss, label %cmp
cmp:
  %r = call i32 @strcmp(ptr %name, ptr %key)
  %same = icmp eq i32 %r, 0
  br i1 %same, label %hit, label %miss
hit:
  ret ptr %name
miss:
  ret ptr null
}

define i32 @count_upper(ptr %s, i64 %n) {
entry:
  %z = icmp eq i64 %n, 0
  br i1 %z, label %exit, label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i.next, %loop ]
  %c = phi i32 [ 0, %entry ], [ %c.next, %loop ]
  %p = getelementptr i8, ptr %s, i64 %i
  %b = load i8, ptr %p
  %ge = icmp uge i8 %b, 65
  %le = icmp ule i8 %b, 90
  %up = and i1 %ge, %le
  %inc = zext i1 %up to i32
  %c.next = add i32 %c, %inc
  %i.next = add i64 %i, 1
  %done = icmp eq i64 %i.next, %n
  br i1 %done, label %exit, label %loop
exit:
  %r = phi i32 [ 0, %entry ], [ %c.next, %loop ]
  ret i32 %r
}
