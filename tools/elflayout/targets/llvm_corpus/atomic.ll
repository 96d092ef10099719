; elflayout training corpus: atomics (atomicrmw, cmpxchg loops, fences, atomic loads and
; stores of several orderings) and thread-local storage
target triple = "x86_64-pc-linux-gnu"

@counter = global i64 0
@flag = global i32 0
@tls_hits = thread_local global i32 0

define i64 @bump(i64 %n) {
entry:
  %old = atomicrmw add ptr @counter, i64 %n seq_cst
  %t = load i32, ptr @tls_hits
  %t1 = add i32 %t, 1
  store i32 %t1, ptr @tls_hits
  ret i64 %old
}

define i64 @max_update(i64 %v) {
entry:
  %cur0 = load atomic i64, ptr @counter acquire, align 8
  br label %loop
loop:
  %cur = phi i64 [ %cur0, %entry ], [ %seen, %retry ]
  %bigger = icmp sgt i64 %v, %cur
  br i1 %bigger, label %try, label %done
try:
  %pair = cmpxchg ptr @counter, i64 %cur, i64 %v acq_rel acquire
  %ok = extractvalue { i64, i1 } %pair, 1
  br i1 %ok, label %done, label %retry
retry:
  %seen = extractvalue { i64, i1 } %pair, 0
  br label %loop
done:
  %r = phi i64 [ %cur, %loop ], [ %v, %try ]
  ret i64 %r
}

define void @publish(i32 %x) {
entry:
  fence release
  store atomic i32 %x, ptr @flag release, align 4
  %o = atomicrmw or ptr @flag, i32 256 monotonic
  fence seq_cst
  ret void
}
