; elflayout training corpus: a state machine (a scanner loop dispatching on the
; character class of each byte through a switch, with a state variable)
target triple = "x86_64-pc-linux-gnu"

define i32 @count_tokens(ptr %s) {
entry:
  br label %loop
loop:
  %p = phi ptr [ %s, %entry ], [ %p.next, %next ]
  %state = phi i32 [ 0, %entry ], [ %st, %next ]
  %n = phi i32 [ 0, %entry ], [ %n.next, %next ]
  %c = load i8, ptr %p
  %p.next = getelementptr i8, ptr %p, i64 1
  switch i8 %c, label %word [
    i8 0, label %end
    i8 32, label %space
    i8 9, label %space
    i8 10, label %space
    i8 40, label %punct
    i8 41, label %punct
    i8 44, label %punct
    i8 59, label %punct
  ]
space:
  br label %next
punct:
  br label %next
word:
  %was = icmp eq i32 %state, 1
  br label %next
next:
  %st = phi i32 [ 0, %space ], [ 2, %punct ], [ 1, %word ]
  %add = phi i32 [ 0, %space ], [ 1, %punct ], [ 0, %word ]
  %new = phi i1 [ false, %space ], [ false, %punct ], [ %was, %word ]
  %w = select i1 %new, i32 0, i32 1
  %w2 = select i1 %new, i32 0, i32 %w
  %isw = icmp eq i32 %st, 1
  %addw = select i1 %isw, i32 %w2, i32 0
  %n1 = add i32 %n, %add
  %n.next = add i32 %n1, %addw
  br label %loop
end:
  ret i32 %n
}
