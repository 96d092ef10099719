; elflayout training corpus: floating point (float/double arithmetic, conversions,
; compares, math intrinsics, a constant-pool table)
target triple = "x86_64-pc-linux-gnu"

@coef = internal constant [4 x double] [double 1.0, double -0.5, double 0.25, double -0.125]

declare double @llvm.sqrt.f64(double)
declare double @llvm.fabs.f64(double)
declare float @llvm.floor.f32(float)
declare double @llvm.fma.f64(double, double, double)

define double @poly(double %x) {
entry:
  br label %loop
loop:
  %i = phi i32 [ 0, %entry ], [ %i.next, %loop ]
  %acc = phi double [ 0.0, %entry ], [ %acc.next, %loop ]
  %p = getelementptr [4 x double], ptr @coef, i32 0, i32 %i
  %c = load double, ptr %p
  %acc.next = call double @llvm.fma.f64(double %acc, double %x, double %c)
  %i.next = add i32 %i, 1
  %done = icmp eq i32 %i.next, 4
  br i1 %done, label %exit, label %loop
exit:
  ret double %acc.next
}

define double @norm(ptr %v, i32 %n) {
entry:
  %z = icmp sle i32 %n, 0
  br i1 %z, label %out, label %loop
loop:
  %i = phi i32 [ 0, %entry ], [ %i.next, %loop ]
  %s = phi double [ 0.0, %entry ], [ %s.next, %loop ]
  %p = getelementptr double, ptr %v, i32 %i
  %x = load double, ptr %p
  %sq = fmul double %x, %x
  %s.next = fadd double %s, %sq
  %i.next = add nsw i32 %i, 1
  %more = icmp slt i32 %i.next, %n
  br i1 %more, label %loop, label %out
out:
  %t = phi double [ 0.0, %entry ], [ %s.next, %loop ]
  %r = call double @llvm.sqrt.f64(double %t)
  ret double %r
}

define i32 @quantize(float %f, double %scale) {
entry:
  %d = fpext float %f to double
  %m = fdiv double %d, %scale
  %a = call double @llvm.fabs.f64(double %m)
  %big = fcmp ogt double %a, 1.0e6
  %t = fptrunc double %m to float
  %fl = call float @llvm.floor.f32(float %t)
  %i = fptosi float %fl to i32
  %r = select i1 %big, i32 -1, i32 %i
  ret i32 %r
}

define float @lerp(float %a, float %b, i32 %step, i32 %steps) {
entry:
  %s = sitofp i32 %step to float
  %n = uitofp i32 %steps to float
  %t = fdiv float %s, %n
  %d = fsub float %b, %a
  %m = fmul float %d, %t
  %r = fadd float %a, %m
  %nan = fcmp uno float %r, %r
  %o = select i1 %nan, float 0.0, float %r
  ret float %o
}
