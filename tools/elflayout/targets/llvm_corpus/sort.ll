; elflayout training corpus: array algorithms (an insertion sort with nested loops, a
; binary search, signed and unsigned compares, swaps through pointers)
target triple = "x86_64-pc-linux-gnu"

define void @insertion_sort(ptr %a, i32 %n) {
entry:
  %few = icmp slt i32 %n, 2
  br i1 %few, label %done, label %outer
outer:
  %i = phi i32 [ 1, %entry ], [ %i.next, %place ]
  %pi = getelementptr i32, ptr %a, i32 %i
  %key = load i32, ptr %pi
  br label %inner
inner:
  %j = phi i32 [ %i, %outer ], [ %jm, %shift ]
  %jpos = icmp sgt i32 %j, 0
  br i1 %jpos, label %cmp, label %place
cmp:
  %jm = add nsw i32 %j, -1
  %pprev = getelementptr i32, ptr %a, i32 %jm
  %prev = load i32, ptr %pprev
  %gt = icmp sgt i32 %prev, %key
  br i1 %gt, label %shift, label %place
shift:
  %pj = getelementptr i32, ptr %a, i32 %j
  store i32 %prev, ptr %pj
  br label %inner
place:
  %jj = phi i32 [ %j, %inner ], [ %j, %cmp ]
  %pd = getelementptr i32, ptr %a, i32 %jj
  store i32 %key, ptr %pd
  %i.next = add nuw nsw i32 %i, 1
  %more = icmp slt i32 %i.next, %n
  br i1 %more, label %outer, label %done
done:
  ret void
}

define i32 @bsearch_u(ptr %a, i32 %n, i32 %x) {
entry:
  br label %loop
loop:
  %lo = phi i32 [ 0, %entry ], [ %lo.next, %step ]
  %hi = phi i32 [ %n, %entry ], [ %hi.next, %step ]
  %empty = icmp uge i32 %lo, %hi
  br i1 %empty, label %miss, label %probe
probe:
  %sum = add i32 %lo, %hi
  %mid = lshr i32 %sum, 1
  %p = getelementptr i32, ptr %a, i32 %mid
  %v = load i32, ptr %p
  %eq = icmp eq i32 %v, %x
  br i1 %eq, label %hit, label %step
step:
  %less = icmp ult i32 %v, %x
  %mid1 = add i32 %mid, 1
  %lo.next = select i1 %less, i32 %mid1, i32 %lo
  %hi.next = select i1 %less, i32 %hi, i32 %mid
  br label %loop
hit:
  ret i32 %mid
miss:
  ret i32 -1
}

define void @swap(ptr %x, ptr %y) {
entry:
  %a = load i64, ptr %x
  %b = load i64, ptr %y
  store i64 %b, ptr %x
  store i64 %a, ptr %y
  ret void
}
