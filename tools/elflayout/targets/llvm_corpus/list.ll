; elflayout training corpus: pointer-linked data (a list node type, heap allocation,
; traversal, insertion and deletion, null checks)
target triple = "x86_64-pc-linux-gnu"

%struct.node = type { ptr, i64 }

declare noalias ptr @malloc(i64)
declare void @free(ptr)

define ptr @push(ptr %head, i64 %v) {
entry:
  %n = call ptr @malloc(i64 16)
  %isnull = icmp eq ptr %n, null
  br i1 %isnull, label %fail, label %ok
ok:
  store ptr %head, ptr %n
  %pv = getelementptr %struct.node, ptr %n, i32 0, i32 1
  store i64 %v, ptr %pv
  ret ptr %n
fail:
  ret ptr %head
}

define i64 @total(ptr %head) {
entry:
  br label %loop
loop:
  %p = phi ptr [ %head, %entry ], [ %next, %body ]
  %s = phi i64 [ 0, %entry ], [ %s.next, %body ]
  %end = icmp eq ptr %p, null
  br i1 %end, label %exit, label %body
body:
  %pv = getelementptr %struct.node, ptr %p, i32 0, i32 1
  %v = load i64, ptr %pv
  %s.next = add i64 %s, %v
  %next = load ptr, ptr %p
  br label %loop
exit:
  ret i64 %s
}

define ptr @remove_value(ptr %head, i64 %v) {
entry:
  %e = icmp eq ptr %head, null
  br i1 %e, label %none, label %check
check:
  %pv = getelementptr %struct.node, ptr %head, i32 0, i32 1
  %x = load i64, ptr %pv
  %next = load ptr, ptr %head
  %hit = icmp eq i64 %x, %v
  br i1 %hit, label %drop, label %keep
drop:
  call void @free(ptr %head)
  ret ptr %next
keep:
  %rest = call ptr @remove_value(ptr %next, i64 %v)
  store ptr %rest, ptr %head
  ret ptr %head
none:
  ret ptr null
}
