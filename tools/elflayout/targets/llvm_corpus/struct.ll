; elflayout training corpus: aggregates (struct fields, arrays of structs, memcpy,
; memset, struct return, a byval argument)
target triple = "x86_64-pc-linux-gnu"

%struct.rec = type { i64, i32, i16, i8, [5 x i8] }
%struct.pair = type { i64, i64 }

declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)
declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)
declare void @consume(ptr byval(%struct.rec) align 8)

define void @init(ptr %r, i64 %id) {
entry:
  call void @llvm.memset.p0.i64(ptr %r, i8 0, i64 24, i1 false)
  %f0 = getelementptr %struct.rec, ptr %r, i32 0, i32 0
  store i64 %id, ptr %f0
  %f2 = getelementptr %struct.rec, ptr %r, i32 0, i32 2
  store i16 7, ptr %f2
  ret void
}

define void @clone_all(ptr %dst, ptr %src, i64 %n) {
entry:
  %bytes = mul i64 %n, 24
  call void @llvm.memcpy.p0.p0.i64(ptr %dst, ptr %src, i64 %bytes, i1 false)
  ret void
}

define %struct.pair @minmax(ptr %recs, i32 %n) {
entry:
  br label %loop
loop:
  %i = phi i32 [ 0, %entry ], [ %i.next, %loop ]
  %lo = phi i64 [ 9223372036854775807, %entry ], [ %lo.next, %loop ]
  %hi = phi i64 [ 0, %entry ], [ %hi.next, %loop ]
  %p = getelementptr %struct.rec, ptr %recs, i32 %i, i32 0
  %v = load i64, ptr %p
  %l = icmp slt i64 %v, %lo
  %lo.next = select i1 %l, i64 %v, i64 %lo
  %h = icmp sgt i64 %v, %hi
  %hi.next = select i1 %h, i64 %v, i64 %hi
  %i.next = add i32 %i, 1
  %done = icmp eq i32 %i.next, %n
  br i1 %done, label %exit, label %loop
exit:
  %a = insertvalue %struct.pair undef, i64 %lo.next, 0
  %b = insertvalue %struct.pair %a, i64 %hi.next, 1
  ret %struct.pair %b
}

define void @pass_copy(ptr %r) {
entry:
  %tmp = alloca %struct.rec, align 8
  call void @llvm.memcpy.p0.p0.i64(ptr %tmp, ptr %r, i64 24, i1 false)
  %f1 = getelementptr %struct.rec, ptr %tmp, i32 0, i32 1
  %x = load i32, ptr %f1
  %y = add i32 %x, 1
  store i32 %y, ptr %f1
  call void @consume(ptr byval(%struct.rec) align 8 %tmp)
  ret void
}
