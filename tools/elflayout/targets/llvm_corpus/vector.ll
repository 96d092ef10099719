; elflayout training corpus: SIMD vectors (vector arithmetic, shuffles, reductions,
; a loop the loop vectorizer and SLP vectorizer can work on)
target triple = "x86_64-pc-linux-gnu"

declare i32 @llvm.vector.reduce.add.v4i32(<4 x i32>)
declare <4 x float> @llvm.maxnum.v4f32(<4 x float>, <4 x float>)

define <4 x i32> @mix(<4 x i32> %a, <4 x i32> %b) {
entry:
  %s = add <4 x i32> %a, %b
  %m = mul <4 x i32> %s, <i32 3, i32 5, i32 7, i32 9>
  %sh = shufflevector <4 x i32> %m, <4 x i32> %a, <4 x i32> <i32 0, i32 4, i32 2, i32 6>
  %x = xor <4 x i32> %sh, <i32 -1, i32 0, i32 -1, i32 0>
  ret <4 x i32> %x
}

define i32 @dot(ptr %a, ptr %b, i32 %n) {
entry:
  br label %loop
loop:
  %i = phi i32 [ 0, %entry ], [ %i.next, %loop ]
  %acc = phi <4 x i32> [ zeroinitializer, %entry ], [ %acc.next, %loop ]
  %pa = getelementptr <4 x i32>, ptr %a, i32 %i
  %pb = getelementptr <4 x i32>, ptr %b, i32 %i
  %va = load <4 x i32>, ptr %pa, align 16
  %vb = load <4 x i32>, ptr %pb, align 16
  %p = mul <4 x i32> %va, %vb
  %acc.next = add <4 x i32> %acc, %p
  %i.next = add i32 %i, 1
  %done = icmp uge i32 %i.next, %n
  br i1 %done, label %exit, label %loop
exit:
  %r = call i32 @llvm.vector.reduce.add.v4i32(<4 x i32> %acc.next)
  ret i32 %r
}

define <4 x float> @clampv(<4 x float> %v, float %lo) {
entry:
  %i = insertelement <4 x float> poison, float %lo, i32 0
  %splat = shufflevector <4 x float> %i, <4 x float> poison, <4 x i32> zeroinitializer
  %m = call <4 x float> @llvm.maxnum.v4f32(<4 x float> %v, <4 x float> %splat)
  %c = fcmp olt <4 x float> %m, <float 1.0, float 1.0, float 1.0, float 1.0>
  %r = select <4 x i1> %c, <4 x float> %m, <4 x float> <float 1.0, float 1.0, float 1.0, float 1.0>
  ret <4 x float> %r
}

define void @saxpy(ptr noalias %y, ptr noalias %x, float %a, i64 %n) {
entry:
  %z = icmp eq i64 %n, 0
  br i1 %z, label %exit, label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i.next, %loop ]
  %px = getelementptr float, ptr %x, i64 %i
  %py = getelementptr float, ptr %y, i64 %i
  %vx = load float, ptr %px
  %vy = load float, ptr %py
  %m = fmul fast float %vx, %a
  %s = fadd fast float %m, %vy
  store float %s, ptr %py
  %i.next = add nuw i64 %i, 1
  %done = icmp eq i64 %i.next, %n
  br i1 %done, label %exit, label %loop
exit:
  ret void
}
