; elflayout training corpus: exceptions (invoke, landing pads with a C++ personality,
; cleanups, resume)
target triple = "x86_64-pc-linux-gnu"

@_ZTIi = external constant ptr

declare i32 @__gxx_personality_v0(...)
declare void @may_throw(i32)
declare void @release(ptr)
declare ptr @__cxa_begin_catch(ptr)
declare void @__cxa_end_catch()
declare i32 @llvm.eh.typeid.for(ptr)

define i32 @guarded(i32 %x, ptr %res) personality ptr @__gxx_personality_v0 {
entry:
  invoke void @may_throw(i32 %x)
          to label %ok unwind label %lpad
ok:
  invoke void @may_throw(i32 1)
          to label %done unwind label %cleanup
done:
  call void @release(ptr %res)
  ret i32 0
cleanup:
  %c = landingpad { ptr, i32 } cleanup
  call void @release(ptr %res)
  resume { ptr, i32 } %c
lpad:
  %lp = landingpad { ptr, i32 } catch ptr @_ZTIi
  %sel = extractvalue { ptr, i32 } %lp, 1
  %tid = call i32 @llvm.eh.typeid.for(ptr @_ZTIi)
  %match = icmp eq i32 %sel, %tid
  br i1 %match, label %catch, label %rethrow
catch:
  %exn = extractvalue { ptr, i32 } %lp, 0
  %obj = call ptr @__cxa_begin_catch(ptr %exn)
  %v = load i32, ptr %obj
  call void @__cxa_end_catch()
  ret i32 %v
rethrow:
  resume { ptr, i32 } %lp
}
