/* firsttouch: a valgrind tool recording, for a set of target files, the first
   execution of each code block and (with --ft-data=yes) the first read and first
   write of each page of their mappings, in one global sequence.

   Code: a superblock may chase past conditional exits, so code after an Ist_Exit
   may never run although it was translated.  Each "group" (the IRSB start, and each
   point after an Ist_Exit) that contains target instructions gets one dirty call,
   guarded by a per-group 'done' byte: it fires on the group's first execution,
   logs the group's instruction runs and sets 'done'; afterwards the translation
   pays a load and a compare per group entry.

   Data: every load/store address is checked inline against the span of target
   mappings and a per-page "seen" byte; only a first touch calls the helper.

   Output (--ft-out=FILE): a text header, then 32-byte little-endian records
   (see docs/formats/profile.md, "raw log"), flushed in chunks and at exit/exec.

   Limits: the tables below have fixed sizes.  Whatever does not fit is counted
   (dropped[]) and reported in 'D' records just before the end record, so the
   profile can say what it is missing instead of silently lacking it. */

#include "pub_tool_basics.h"
#include "pub_tool_tooliface.h"
#include "pub_tool_libcassert.h"
#include "pub_tool_libcbase.h"
#include "pub_tool_libcfile.h"
#include "pub_tool_libcprint.h"
#include "pub_tool_libcproc.h"
#include "pub_tool_mallocfree.h"
#include "pub_tool_options.h"
#include "pub_tool_aspacemgr.h"
#include "pub_tool_clientstate.h"
#include "pub_tool_machine.h"
#include "pub_tool_vki.h"

#define MAX_TARGETS 32
#define MAX_MAPS 1024
#define BUFREC 4096   /* records per write: small, so a SIGKILLed run leaves most of its log */

/* record kinds */
#define K_EXEC 'x'
#define K_READ 'r'
#define K_WRITE 'w'
#define K_MAP 'm'      /* addr=start, len=size, t_ns=file offset, flags=prot */
#define K_UNMAP 'u'    /* addr=start, len=size */
#define K_ENTRY 'E'    /* first execution in the main executable: addr */
#define K_MARK 'M'     /* first execution of a --ft-mark offset of the executable: flags=index */
#define K_DROP 'D'     /* before the end record: flags=what (DROP_*), addr=how many */
#define K_END 'Z'      /* trailer: addr = exit code */
#define K_BYTES 'B'    /* --ft-bytes: target 0's bytes in [LO, HI) loaded: addr=file offset, len; at exit */

/* what a fixed cap or a failed write made us lose (K_DROP flags) */
#define DROP_MAPS 1        /* target mappings past MAX_MAPS: their accesses are lost */
#define DROP_RUNS 2        /* instruction runs past MAX_RUNS in one group: not logged */
#define DROP_GROUPS 3      /* superblock exits past MAX_GROUPS: later code logged with the last group */
#define DROP_MIXED 4       /* runs of a second target inside one group: not logged */
#define DROP_WRITE 5       /* records lost to failed writes of the log */
#define N_DROP 6
static ULong dropped[N_DROP];

typedef struct {
   ULong seq;
   ULong t_ns;      /* CLOCK_MONOTONIC */
   ULong addr;
   UInt  len;
   UChar kind;
   UChar target;
   UShort flags;
} Rec;

typedef struct {
   const HChar* path;
   ULong dev, ino;
   Bool stat_ok;
} Target;

typedef struct {
   Addr start, end;   /* [start, end) */
   ULong foff;
   Int target;
} Map;

typedef struct { Addr a; UInt len; } Run;
typedef struct {
   UChar done;
   UChar target;
   UShort nruns;
   Run runs[0];
} Group;

/* options */
static const HChar* clo_targets[MAX_TARGETS];
static Int n_clo_targets = 0;
static const HChar* clo_out = NULL;
static Bool clo_data = False;
static Int clo_max_maps = MAX_MAPS;  /* --ft-max-maps: a smaller table, to test the drop count */
#define MAX_MARKS 8
static ULong clo_marks[MAX_MARKS];
static Int n_marks = 0;
static UChar mark_seen[MAX_MARKS];
static Int marks_pending = 0;   /* marks not yet executed: exe code needs looking at */
/* --ft-bytes=LO:HI (hex file offsets of target 0): which of those bytes loads read, one
   bit a byte; watched from the first mapping of target 0 holding LO */
static ULong clo_bytes_lo = 0, clo_bytes_hi = 0;
static Addr bytes_base = 0;     /* address of file offset clo_bytes_lo */
static ULong bytes_len = 0;     /* bytes watched from bytes_base (0: none yet) */
static Bool bytes_exec = False; /* the watched mapping is executable */
static UChar* bbits = NULL;

static Target targets[MAX_TARGETS];
static Int n_targets = 0;
static ULong exe_dev = 0, exe_ino = 0;
static Bool exe_known = False;
static UChar exe_seen = 0;
static Addr exe_lo = 0, exe_hi = 0; /* the exe's mapped range, for a quick check */

static Map maps[MAX_MAPS];
static Int n_maps = 0;
static Addr span_lo = ~(Addr)0, span_hi = 0; /* union of target maps, for code */

/* data filter: pages [dspan_lo, dspan_lo + dspan_np*4096); byte i+1 for page i;
   byte 0 is a sentinel that is always 1. */
static Addr dspan_lo = 0;
static ULong dspan_np = 0;
static UChar* rbits = NULL;
static UChar* wbits = NULL;
static UChar sentinel_bits[1] = {1};

static Rec* buf = NULL;
static Int nbuf = 0;
static Int out_fd = -1;
static ULong seq = 0;
static ULong n_records = 0;
static Bool recording = True;
static ULong groups_made = 0;

static ULong now_ns(void)
{
   struct vki_timespec ts;
   VG_(clock_gettime)(&ts, VKI_CLOCK_MONOTONIC);
   return (ULong)ts.tv_sec * 1000000000ULL + (ULong)ts.tv_nsec;
}

/* Write LEN bytes; the bytes left unwritten when a write fails (0: all written). */
static Int write_all(Int fd, const void* data, Int len)
{
   const HChar* p = data;
   while (len > 0) {
      Int w = VG_(write)(fd, p, len);
      if (w <= 0) return len;
      p += w; len -= w;
   }
   return 0;
}

static void flush(void)
{
   if (out_fd >= 0 && nbuf > 0) {
      Int left = write_all(out_fd, buf, nbuf * (Int)sizeof(Rec));
      if (left > 0)
         dropped[DROP_WRITE] += (ULong)(left + (Int)sizeof(Rec) - 1) / sizeof(Rec);
   }
   nbuf = 0;
}

static void emit(UChar kind, Addr a, UInt len, Int target, ULong t, UShort flags)
{
   if (!recording) return;
   if (nbuf == BUFREC) flush();
   Rec* r = &buf[nbuf++];
   r->seq = seq++;
   r->t_ns = t;
   r->addr = a;
   r->len = len;
   r->kind = kind;
   r->target = (UChar)(target < 0 ? 255 : target);
   r->flags = flags;
   n_records++;
}

/* ---------------------------------------------------------------- maps */

static Int find_map(Addr a)
{
   if (a < span_lo || a >= span_hi) return -1;
   for (Int i = 0; i < n_maps; i++)
      if (a >= maps[i].start && a < maps[i].end) return i;
   return -1;
}

static void recompute_spans(void)
{
   span_lo = ~(Addr)0; span_hi = 0;
   for (Int i = 0; i < n_maps; i++) {
      if (maps[i].start < span_lo) span_lo = maps[i].start;
      if (maps[i].end > span_hi) span_hi = maps[i].end;
   }
   if (!clo_data) return;
   /* Rebuild the page filter, keeping what was already seen. */
   Addr lo = span_lo & ~(Addr)4095;
   ULong np = n_maps ? ((span_hi + 4095) & ~(Addr)4095) / 4096 - lo / 4096 : 0;
   if (np == 0) {
      dspan_np = 0;
      return;
   }
   UChar* nr = VG_(malloc)("ft.rbits", np + 1);
   UChar* nw = VG_(malloc)("ft.wbits", np + 1);
   VG_(memset)(nr, 1, np + 1);  /* pages outside target maps never call out */
   VG_(memset)(nw, 1, np + 1);
   for (Int i = 0; i < n_maps; i++) {
      for (Addr p = maps[i].start & ~(Addr)4095; p < maps[i].end; p += 4096) {
         ULong k = (p - lo) / 4096 + 1;
         ULong ok = (p >= dspan_lo && dspan_np && (p - dspan_lo) / 4096 < dspan_np)
                       ? (p - dspan_lo) / 4096 + 1 : 0;
         nr[k] = ok ? rbits[ok] : 0;
         nw[k] = ok ? wbits[ok] : 0;
      }
   }
   /* Order matters little: the client is stopped while we are here. */
   UChar* oldr = rbits; UChar* oldw = wbits;
   rbits = nr; wbits = nw; dspan_lo = lo; dspan_np = np;
   if (oldr && oldr != sentinel_bits) VG_(free)(oldr);
   if (oldw && oldw != sentinel_bits) VG_(free)(oldw);
}

/* Remove [a, a+len) from the target map table. */
static Bool cut_maps(Addr a, SizeT len)
{
   Addr e = a + len;
   Bool changed = False;
   for (Int i = 0; i < n_maps; ) {
      Map* m = &maps[i];
      if (m->end <= a || m->start >= e) { i++; continue; }
      changed = True;
      if (m->start < a && m->end > e) {       /* split */
         if (n_maps < clo_max_maps) {
            Map tail = *m;
            tail.foff += e - m->start;
            tail.start = e;
            maps[n_maps++] = tail;
         } else {
            dropped[DROP_MAPS]++;
         }
         m->end = a;
         i++;
      } else if (m->start < a) {
         m->end = a; i++;
      } else if (m->end > e) {
         m->foff += e - m->start;
         m->start = e; i++;
      } else {
         maps[i] = maps[--n_maps];
      }
   }
   return changed;
}

static Int target_of_segment(NSegment const* seg)
{
   if (!seg || seg->kind != SkFileC) return -1;
   for (Int i = 0; i < n_targets; i++)
      if (targets[i].stat_ok && seg->dev == targets[i].dev && seg->ino == targets[i].ino)
         return i;
   const HChar* fn = VG_(am_get_filename)(seg);
   if (fn)
      for (Int i = 0; i < n_targets; i++)
         if (VG_(strcmp)(fn, targets[i].path) == 0) return i;
   return -1;
}

static void note_exe(NSegment const* seg, Addr a, SizeT len)
{
   if (exe_known && seg && seg->kind == SkFileC && seg->dev == exe_dev && seg->ino == exe_ino) {
      if (exe_lo == 0 || a < exe_lo) exe_lo = a;
      if (a + len > exe_hi) exe_hi = a + len;
   }
}

static void new_mapping(Addr a, SizeT len, Bool rr, Bool ww, Bool xx)
{
   if (len == 0) return;
   Bool changed = cut_maps(a, len);
   NSegment const* seg = VG_(am_find_nsegment)(a);
   note_exe(seg, a, len);
   Int t = target_of_segment(seg);
   if (t >= 0 && n_maps >= clo_max_maps) dropped[DROP_MAPS]++;
   if (t >= 0 && n_maps < clo_max_maps) {
      Map m;
      m.start = a; m.end = a + len;
      m.foff = seg->offset + (a - seg->start);
      m.target = t;
      maps[n_maps++] = m;
      changed = True;
      emit(K_MAP, a, (UInt)len, t, m.foff, (rr ? 1 : 0) | (ww ? 2 : 0) | (xx ? 4 : 0));
      flush();  /* mappings are rare and needed to read everything else */
      /* the latest read-only mapping of LO wins: ld.so maps the whole file first, then
         each segment over it where its vaddr (not its file offset) says; a writable
         segment's first page may hold LO's file page too, and so may the code segment's
         when segments share pages (lld -z noseparate-code): an executable mapping is
         taken only while no other holds LO (.rodata inside the code segment) */
      if (t == 0 && rr && !ww && (!xx || bytes_len == 0 || bytes_exec) && clo_bytes_hi > clo_bytes_lo
          && m.foff <= clo_bytes_lo && clo_bytes_lo < m.foff + len) {
         bytes_exec = xx;
         ULong end = m.foff + len < clo_bytes_hi ? m.foff + len : clo_bytes_hi;
         if (!bbits) bbits = VG_(calloc)("ft.bbits", (clo_bytes_hi - clo_bytes_lo + 7) / 8, 1);
         bytes_base = a + (clo_bytes_lo - m.foff);
         bytes_len = end - clo_bytes_lo;
      }
   }
   if (changed) recompute_spans();
}

static void ft_new_mem_startup(Addr a, SizeT len, Bool rr, Bool ww, Bool xx, ULong di)
{
   new_mapping(a, len, rr, ww, xx);
}

static void ft_new_mem_mmap(Addr a, SizeT len, Bool rr, Bool ww, Bool xx, ULong di)
{
   new_mapping(a, len, rr, ww, xx);
}

static void ft_die_mem_munmap(Addr a, SizeT len)
{
   if (cut_maps(a, len)) {
      emit(K_UNMAP, a, (UInt)len, -1, 0, 0);
      recompute_spans();
   }
}

static void ft_copy_mem_remap(Addr from, Addr to, SizeT len)
{
   /* mremap of a library is rare; treat the old range as gone. */
   ft_die_mem_munmap(from, len);
}

/* ---------------------------------------------------------------- helpers */

static VG_REGPARM(1) void ft_code_hit(Group* g)
{
   if (g->done) return;
   g->done = 1;
   ULong t = now_ns();
   for (Int i = 0; i < g->nruns; i++)
      emit(K_EXEC, g->runs[i].a, g->runs[i].len, g->target, t, 0);
}

static VG_REGPARM(1) void ft_exe_hit(Addr a)
{
   if (exe_seen) return;
   exe_seen = 1;
   emit(K_ENTRY, a, 0, -1, now_ns(), 0);
}

static VG_REGPARM(2) void ft_mark_hit(Addr a, UWord j)
{
   if (mark_seen[j]) return;
   mark_seen[j] = 1;
   marks_pending--;
   emit(K_MARK, a, 0, -1, now_ns(), (UShort)j);
}

static VG_REGPARM(2) void ft_data_hit(Addr a, UWord isw)
{
   if (!dspan_np || a < dspan_lo) return;
   ULong k = (a - dspan_lo) / 4096 + 1;
   if (k > dspan_np) return;
   UChar* bits = isw ? wbits : rbits;
   if (bits[k]) return;
   bits[k] = 1;
   Int m = find_map(a);
   if (m < 0) return;
   /* the exact address: Python attributes the first access to a section/object */
   emit(isw ? K_WRITE : K_READ, a, 1, maps[m].target, now_ns(), 0);
}

static VG_REGPARM(2) void ft_byte_hit(Addr a, UWord size)
{
   ULong off = a - bytes_base;
   for (UWord i = 0; i < size && off + i < bytes_len; i++)
      bbits[(off + i) >> 3] |= (UChar)(1 << ((off + i) & 7));
}

/* runs of watched bytes that were loaded, as K_BYTES records */
static void emit_bytes(void)
{
   ULong i = 0;
   while (i < bytes_len) {
      if (!(bbits[i >> 3] & (1 << (i & 7)))) { i++; continue; }
      ULong j = i;
      while (j < bytes_len && (bbits[j >> 3] & (1 << (j & 7))) && j - i < 0xFFFFFFFFULL) j++;
      emit(K_BYTES, clo_bytes_lo + i, (UInt)(j - i), 0, 0, 0);
      i = j;
   }
}

/* ---------------------------------------------------------------- instrumentation */

static IRExpr* load_word(IRSB* sb, void* addr)
{
   IRTemp t = newIRTemp(sb->tyenv, Ity_I64);
   addStmtToIRSB(sb, IRStmt_WrTmp(t, IRExpr_Load(Iend_LE, Ity_I64, mkIRExpr_HWord((HWord)addr))));
   return IRExpr_RdTmp(t);
}

static IRTemp assign(IRSB* sb, IRType ty, IRExpr* e)
{
   IRTemp t = newIRTemp(sb->tyenv, ty);
   addStmtToIRSB(sb, IRStmt_WrTmp(t, e));
   return t;
}

/* if (page of addr not yet seen for this kind [and guard]) ft_data_hit(addr, isw) */
static void add_data_check(IRSB* sb, IRExpr* addr, Bool isw, IRExpr* guard)
{
   if (addr->tag == Iex_Const) {
      /* constant addresses are rare on amd64; keep one code path */
      IRTemp ta = assign(sb, Ity_I64, addr);
      addr = IRExpr_RdTmp(ta);
   }
   IRExpr* lo = load_word(sb, &dspan_lo);
   IRExpr* np = load_word(sb, &dspan_np);
   IRTemp off = assign(sb, Ity_I64, IRExpr_Binop(Iop_Sub64, addr, lo));
   IRTemp pg = assign(sb, Ity_I64, IRExpr_Binop(Iop_Shr64, IRExpr_RdTmp(off), IRExpr_Const(IRConst_U8(12))));
   IRTemp in = assign(sb, Ity_I1, IRExpr_Binop(Iop_CmpLT64U, IRExpr_RdTmp(pg), np));
   IRTemp pg1 = assign(sb, Ity_I64, IRExpr_Binop(Iop_Add64, IRExpr_RdTmp(pg), IRExpr_Const(IRConst_U64(1))));
   IRTemp idx = assign(sb, Ity_I64, IRExpr_ITE(IRExpr_RdTmp(in), IRExpr_RdTmp(pg1), IRExpr_Const(IRConst_U64(0))));
   IRExpr* base = load_word(sb, isw ? (void*)&wbits : (void*)&rbits);
   IRTemp p = assign(sb, Ity_I64, IRExpr_Binop(Iop_Add64, base, IRExpr_RdTmp(idx)));
   IRTemp b = assign(sb, Ity_I8, IRExpr_Load(Iend_LE, Ity_I8, IRExpr_RdTmp(p)));
   IRTemp g = assign(sb, Ity_I1, IRExpr_Binop(Iop_CmpEQ8, IRExpr_RdTmp(b), IRExpr_Const(IRConst_U8(0))));
   if (guard) {
      IRTemp g2 = assign(sb, Ity_I1, IRExpr_Binop(Iop_And1, IRExpr_RdTmp(g), guard));
      g = g2;
   }
   IRDirty* di = unsafeIRDirty_0_N(2, "ft_data_hit", VG_(fnptr_to_fnentry)(&ft_data_hit),
                                   mkIRExprVec_2(addr, mkIRExpr_HWord(isw ? 1 : 0)));
   di->guard = IRExpr_RdTmp(g);
   addStmtToIRSB(sb, IRStmt_Dirty(di));
}

/* if (addr - bytes_base < bytes_len [and guard]) ft_byte_hit(addr, size) */
static void add_byte_check(IRSB* sb, IRExpr* addr, Int size, IRExpr* guard)
{
   if (!clo_bytes_hi || size <= 0) return;
   if (addr->tag == Iex_Const) {
      IRTemp ta = assign(sb, Ity_I64, addr);
      addr = IRExpr_RdTmp(ta);
   }
   IRTemp off = assign(sb, Ity_I64, IRExpr_Binop(Iop_Sub64, addr, load_word(sb, &bytes_base)));
   IRTemp in = assign(sb, Ity_I1, IRExpr_Binop(Iop_CmpLT64U, IRExpr_RdTmp(off), load_word(sb, &bytes_len)));
   if (guard) in = assign(sb, Ity_I1, IRExpr_Binop(Iop_And1, IRExpr_RdTmp(in), guard));
   IRDirty* di = unsafeIRDirty_0_N(2, "ft_byte_hit", VG_(fnptr_to_fnentry)(&ft_byte_hit),
                                   mkIRExprVec_2(addr, mkIRExpr_HWord((HWord)size)));
   di->guard = IRExpr_RdTmp(in);
   addStmtToIRSB(sb, IRStmt_Dirty(di));
}

static Int loadg_size(IRLoadGOp op)
{
   switch (op) {
   case ILGop_IdentV128: return 16;
   case ILGop_Ident64: return 8;
   case ILGop_Ident32: return 4;
   case ILGop_16Uto32: case ILGop_16Sto32: return 2;
   case ILGop_8Uto32: case ILGop_8Sto32: return 1;
   default: return 8;
   }
}

static void add_guarded_call(IRSB* sb, UChar* flag, const HChar* name, void* fn, IRExpr* arg)
{
   IRTemp b = assign(sb, Ity_I8, IRExpr_Load(Iend_LE, Ity_I8, mkIRExpr_HWord((HWord)flag)));
   IRTemp g = assign(sb, Ity_I1, IRExpr_Binop(Iop_CmpEQ8, IRExpr_RdTmp(b), IRExpr_Const(IRConst_U8(0))));
   IRDirty* di = unsafeIRDirty_0_N(1, name, VG_(fnptr_to_fnentry)(fn), mkIRExprVec_1(arg));
   di->guard = IRExpr_RdTmp(g);
   addStmtToIRSB(sb, IRStmt_Dirty(di));
}

#define MAX_GROUPS 256
#define MAX_RUNS 128

static IRSB* ft_instrument(VgCallbackClosure* closure, IRSB* sbIn, const VexGuestLayout* layout,
                           const VexGuestExtents* vge, const VexArchInfo* archinfo_host,
                           IRType gWordTy, IRType hWordTy)
{
   if (!recording) return sbIn;
   Int n = sbIn->stmts_used;

   /* Pass 1: the target instruction runs of each group. */
   static Run runs[MAX_GROUPS][MAX_RUNS];
   static Int nruns[MAX_GROUPS];
   static Int gtarget[MAX_GROUPS];
   Int ng = 0, cur = 0;
   Bool any = False, any_exe = False;
   nruns[0] = 0; gtarget[0] = -1;
   for (Int i = 0; i < n; i++) {
      IRStmt* st = sbIn->stmts[i];
      if (st->tag == Ist_Exit) {
         if (cur + 1 < MAX_GROUPS) { cur++; nruns[cur] = 0; gtarget[cur] = -1; }
         else dropped[DROP_GROUPS]++;
      } else if (st->tag == Ist_IMark) {
         Addr a = (Addr)st->Ist.IMark.addr;
         UInt len = st->Ist.IMark.len;
         if (a >= exe_lo && a < exe_hi) any_exe = True;
         Int m = find_map(a);
         if (m < 0) continue;
         Int t = maps[m].target;
         any = True;
         if (gtarget[cur] >= 0 && gtarget[cur] != t) { dropped[DROP_MIXED]++; continue; } /* keep the first target */
         gtarget[cur] = t;
         Int k = nruns[cur];
         if (k > 0 && runs[cur][k - 1].a + runs[cur][k - 1].len == a) {
            runs[cur][k - 1].len += len;
         } else if (k < MAX_RUNS) {
            runs[cur][k].a = a; runs[cur][k].len = len; nruns[cur] = k + 1;
         } else {
            dropped[DROP_RUNS]++;
         }
      }
   }
   ng = cur + 1;
   Bool want_exe = exe_known && !exe_seen;
   /* most superblocks (other libraries, once the marks were hit) are left untouched */
   if (!any && !clo_data && !clo_bytes_hi && !(any_exe && (want_exe || marks_pending > 0))) return sbIn;

   IRSB* sbOut = deepCopyIRSBExceptStmts(sbIn);
   Int i = 0;
   while (i < n && sbIn->stmts[i]->tag != Ist_IMark) {
      addStmtToIRSB(sbOut, sbIn->stmts[i]);
      i++;
   }
   cur = 0;
   Bool group_called = False, group_exe = False;
   for (; i < n; i++) {
      IRStmt* st = sbIn->stmts[i];
      switch (st->tag) {
      case Ist_IMark: {
         addStmtToIRSB(sbOut, st);
         Addr a = (Addr)st->Ist.IMark.addr;
         if (!group_called && cur < ng && nruns[cur] > 0 && find_map(a) >= 0) {
            Int k = nruns[cur];
            Group* g = VG_(malloc)("ft.group", sizeof(Group) + k * sizeof(Run));
            g->done = 0; g->target = (UChar)gtarget[cur]; g->nruns = (UShort)k;
            for (Int j = 0; j < k; j++) g->runs[j] = runs[cur][j];
            groups_made++;
            add_guarded_call(sbOut, &g->done, "ft_code_hit", &ft_code_hit, mkIRExpr_HWord((HWord)g));
            group_called = True;
         }
         if (marks_pending > 0 && a >= exe_lo && a < exe_hi) {
            NSegment const* seg = VG_(am_find_nsegment)(a);
            if (seg && seg->kind == SkFileC) {
               ULong off = seg->offset + (a - seg->start);
               for (Int j = 0; j < n_marks; j++)
                  if (off == clo_marks[j] && !mark_seen[j]) {
                     IRDirty* di;
                     IRTemp b = assign(sbOut, Ity_I8, IRExpr_Load(Iend_LE, Ity_I8, mkIRExpr_HWord((HWord)&mark_seen[j])));
                     IRTemp g = assign(sbOut, Ity_I1, IRExpr_Binop(Iop_CmpEQ8, IRExpr_RdTmp(b), IRExpr_Const(IRConst_U8(0))));
                     di = unsafeIRDirty_0_N(2, "ft_mark_hit", VG_(fnptr_to_fnentry)(&ft_mark_hit),
                                            mkIRExprVec_2(mkIRExpr_HWord((HWord)a), mkIRExpr_HWord((HWord)j)));
                     di->guard = IRExpr_RdTmp(g);
                     addStmtToIRSB(sbOut, IRStmt_Dirty(di));
                  }
            }
         }
         if (want_exe && !group_exe && a >= exe_lo && a < exe_hi) {
            add_guarded_call(sbOut, &exe_seen, "ft_exe_hit", &ft_exe_hit, mkIRExpr_HWord((HWord)a));
            group_exe = True;
         }
         break;
      }
      case Ist_Exit:
         addStmtToIRSB(sbOut, st);
         if (cur + 1 < MAX_GROUPS) cur++;
         group_called = False; group_exe = False;
         break;
      case Ist_WrTmp:
         if (clo_data && st->Ist.WrTmp.data->tag == Iex_Load)
            add_data_check(sbOut, st->Ist.WrTmp.data->Iex.Load.addr, False, NULL);
         if (st->Ist.WrTmp.data->tag == Iex_Load)
            add_byte_check(sbOut, st->Ist.WrTmp.data->Iex.Load.addr,
                           sizeofIRType(st->Ist.WrTmp.data->Iex.Load.ty), NULL);
         addStmtToIRSB(sbOut, st);
         break;
      case Ist_Store:
         if (clo_data) add_data_check(sbOut, st->Ist.Store.addr, True, NULL);
         addStmtToIRSB(sbOut, st);
         break;
      case Ist_StoreG:
         if (clo_data) add_data_check(sbOut, st->Ist.StoreG.details->addr, True, st->Ist.StoreG.details->guard);
         addStmtToIRSB(sbOut, st);
         break;
      case Ist_LoadG:
         if (clo_data) add_data_check(sbOut, st->Ist.LoadG.details->addr, False, st->Ist.LoadG.details->guard);
         add_byte_check(sbOut, st->Ist.LoadG.details->addr, loadg_size(st->Ist.LoadG.details->cvt),
                        st->Ist.LoadG.details->guard);
         addStmtToIRSB(sbOut, st);
         break;
      case Ist_CAS:
         if (clo_data) {
            add_data_check(sbOut, st->Ist.CAS.details->addr, False, NULL);
            add_data_check(sbOut, st->Ist.CAS.details->addr, True, NULL);
         }
         addStmtToIRSB(sbOut, st);
         break;
      case Ist_LLSC:
         if (clo_data) add_data_check(sbOut, st->Ist.LLSC.addr, st->Ist.LLSC.storedata != NULL, NULL);
         addStmtToIRSB(sbOut, st);
         break;
      case Ist_Dirty: {
         IRDirty* d = st->Ist.Dirty.details;
         if (clo_data && d->mFx != Ifx_None && d->mAddr) {
            if (d->mFx == Ifx_Read || d->mFx == Ifx_Modify) add_data_check(sbOut, d->mAddr, False, NULL);
            if (d->mFx == Ifx_Read || d->mFx == Ifx_Modify) add_byte_check(sbOut, d->mAddr, d->mSize, NULL);
            if (d->mFx == Ifx_Write || d->mFx == Ifx_Modify) add_data_check(sbOut, d->mAddr, True, NULL);
         }
         addStmtToIRSB(sbOut, st);
         break;
      }
      default:
         addStmtToIRSB(sbOut, st);
      }
   }
   return sbOut;
}

/* ---------------------------------------------------------------- debug info

   The profile names functions from the targets' symbol tables (in Python), never from
   valgrind's debug info.  valgrind's core still reads every mapped object's DWARF line
   tables, and 3.19's reader does not know DWARF 5 forms clang emits (DW_FORM_strx1 ...,
   also in -gsplit-dwarf skeletons): it runs off the section and exits ("I can't
   recover").  The tool is linked with --wrap (Makefile) so those readers do nothing:
   the mapped code is the real file's, symbols and call-frame info are still read.
   --ft-read-dwarf=yes restores valgrind's own readers (to reproduce its failure).

   When valgrind gives up while reading an object's symbols or debug info anyway, the
   file and valgrind's last message go to OUT.giveup, so the profile names the file
   instead of blaming the workload. */

Bool clo_read_dwarf = False;   /* read by the assembly wrappers below */
static const HChar* reading_di = NULL;   /* object whose debug info is being read */
static HChar giveup_path[4200];
static HChar last_msg[512];

struct _DebugInfo;
extern Bool __real_vgModuleLocal_read_elf_debug_info(struct _DebugInfo* di);
extern void __real_vgPlain_exit(Int status);

/* Both DWARF readers take a dozen DiSlice structs by value, passed on the stack: a
   tail jump forwards them untouched when --ft-read-dwarf=yes, a return skips them. */
#define SKIP_UNLESS_READ_DWARF(fn) \
   __asm__(".text\n.globl __wrap_" fn "\n.type __wrap_" fn ", @function\n__wrap_" fn ":\n" \
           "\tcmpb $0, clo_read_dwarf(%rip)\n\tjne __real_" fn "\n\tret\n" \
           ".size __wrap_" fn ", .-__wrap_" fn "\n")
SKIP_UNLESS_READ_DWARF("vgModuleLocal_read_debuginfo_dwarf3");
SKIP_UNLESS_READ_DWARF("vgModuleLocal_new_dwarf3_reader");

Bool __wrap_vgModuleLocal_read_elf_debug_info(struct _DebugInfo* di)
{
   reading_di = VG_(DebugInfo_get_filename)((const DebugInfo*)di);
   last_msg[0] = 0;
   Bool ok = __real_vgModuleLocal_read_elf_debug_info(di);
   reading_di = NULL;
   return ok;
}

static void keep_msg(const HChar* format, va_list vargs)
{
   if (!reading_di) return;
   HChar m[sizeof last_msg];
   VG_(vsnprintf)(m, sizeof m, format, vargs);
   for (HChar* c = m; *c; c++) if (*c == '\n') *c = ' ';
   /* the closing "I can't recover" says nothing about the cause: keep the one before */
   if (!VG_(strstr)(m, "can't recover") && VG_(strlen)(m) > 1) VG_(strcpy)(last_msg, m);
}

UInt __wrap_vgPlain_umsg(const HChar* format, ...)
{
   va_list vargs;
   va_start(vargs, format);
   keep_msg(format, vargs);
   va_end(vargs);
   va_start(vargs, format);
   UInt n = VG_(vmessage)(Vg_UserMsg, format, vargs);
   va_end(vargs);
   return n;
}

UInt __wrap_vgPlain_printf(const HChar* format, ...)
{
   va_list vargs;
   va_start(vargs, format);
   keep_msg(format, vargs);
   va_end(vargs);
   va_start(vargs, format);
   UInt n = VG_(vprintf)(format, vargs);
   va_end(vargs);
   return n;
}

void __wrap_vgPlain_exit(Int status)
{
   if (reading_di && giveup_path[0]) {
      Int fd = VG_(fd_open)(giveup_path, VKI_O_CREAT | VKI_O_TRUNC | VKI_O_WRONLY, 0644);
      if (fd >= 0) {
         HChar line[4800];
         VG_(snprintf)(line, sizeof line, "%s\n%s\n", reading_di, last_msg);
         write_all(fd, line, VG_(strlen)(line));
         VG_(close)(fd);
      }
      flush();
   }
   __real_vgPlain_exit(status);
}

/* ---------------------------------------------------------------- options, init, fini */

static Bool ft_process_cmd_line_option(const HChar* arg)
{
   const HChar* s;
   if VG_STR_CLO(arg, "--ft-target", s) {
      if (n_clo_targets >= MAX_TARGETS) VG_(fmsg_bad_option)(arg, "at most 32 targets\n");
      clo_targets[n_clo_targets++] = s;
   }
   else if VG_STR_CLO(arg, "--ft-mark", s) {
      if (n_marks >= MAX_MARKS) VG_(fmsg_bad_option)(arg, "at most 8 marks\n");
      clo_marks[n_marks++] = VG_(strtoull16)(s, NULL);
      marks_pending = n_marks;
   }
   else if VG_STR_CLO(arg, "--ft-out", clo_out) {}
   else if VG_BOOL_CLO(arg, "--ft-data", clo_data) {}
   else if VG_STR_CLO(arg, "--ft-bytes", s) {
      HChar* end;
      clo_bytes_lo = VG_(strtoull16)(s, &end);
      if (*end != ':') VG_(fmsg_bad_option)(arg, "give LO:HI, hex file offsets\n");
      clo_bytes_hi = VG_(strtoull16)(end + 1, NULL);
      if (clo_bytes_hi <= clo_bytes_lo) VG_(fmsg_bad_option)(arg, "HI must be above LO\n");
   }
   else if VG_BINT_CLO(arg, "--ft-max-maps", clo_max_maps, 1, MAX_MAPS) {}
   else if VG_BOOL_CLO(arg, "--ft-read-dwarf", clo_read_dwarf) {}
   else return False;
   return True;
}

static void ft_print_usage(void)
{
   VG_(printf)(
"    --ft-target=PATH          record first accesses to this file's mappings (repeatable)\n"
"    --ft-out=FILE             write the log here [firsttouch.out.<pid>]\n"
"    --ft-mark=HEXOFF          log the first execution of this file offset of the executable\n"
"    --ft-data=no|yes          also record first read/write of each data page [no]\n"
"    --ft-bytes=LO:HI          also record which bytes of the first target's file offsets\n"
"                              [LO, HI) (hex) loads read (at exit, as runs) [none]\n"
"    --ft-max-maps=N           size of the target mapping table (1..1024) [1024]\n"
"    --ft-read-dwarf=no|yes    let valgrind read DWARF line and variable info (3.19 gives up\n"
"                              on clang's DWARF 5; the profile never needs it) [no]\n");
}

static void ft_print_debug_usage(void) {}

/* The log's text header; False when a write failed (a log without it cannot be read). */
static Bool write_header(void)
{
   HChar line[4352];
   Int pos = 0;   /* counted, not asked with lseek: a device (/dev/full) has no position */
   VG_(snprintf)(line, sizeof line, "FIRSTTOUCH 1\nrecsize %d\ndata %d\npid %d\nt0 %llu\nexe %s\n",
                 (Int)sizeof(Rec), clo_data ? 1 : 0, VG_(getpid)(), now_ns(),
                 VG_(args_the_exename) ? VG_(args_the_exename) : "?");
   if (write_all(out_fd, line, VG_(strlen)(line))) return False;
   pos += VG_(strlen)(line);
   for (Int i = 0; i < n_targets; i++) {
      VG_(snprintf)(line, sizeof line, "target %d %llu %llu %s\n", i, targets[i].dev, targets[i].ino,
                    targets[i].path);
      if (write_all(out_fd, line, VG_(strlen)(line))) return False;
      pos += VG_(strlen)(line);
   }
   /* pad the header to a multiple of the record size so records stay aligned */
   Int pad = (Int)sizeof(Rec) - ((pos + 4) % (Int)sizeof(Rec));
   if (pad == (Int)sizeof(Rec)) pad = 0;
   VG_(memset)(line, ' ', pad);
   VG_(memcpy)(line + pad, "\n--\n", 4);
   return write_all(out_fd, line, pad + 4) == 0;
}

static void ft_child_after_fork(ThreadId tid)
{
   /* The parent owns the log: a forked child stops recording. */
   recording = False;
   nbuf = 0;
   if (out_fd >= 0) VG_(close)(out_fd);
   out_fd = -1;
}

static void ft_pre_syscall(ThreadId tid, UInt sysno, UWord* args, UInt nArgs)
{
   if (sysno == 59 /* execve */ || sysno == 322 /* execveat */) {
      /* exec replaces the process without running fini: flush what we have */
      flush();
   }
}

static void ft_post_syscall(ThreadId tid, UInt sysno, UWord* args, UInt nArgs, SysRes res) {}

static void ft_post_clo_init(void)
{
   HChar* out;
   if (clo_out) {
      out = VG_(expand_file_name)("--ft-out", clo_out);
   } else {
      out = VG_(malloc)("ft.out", 64);
      VG_(sprintf)(out, "firsttouch.out.%d", VG_(getpid)());
   }
   VG_(snprintf)(giveup_path, sizeof giveup_path, "%s.giveup", out);
   out_fd = VG_(fd_open)(out, VKI_O_CREAT | VKI_O_TRUNC | VKI_O_WRONLY, 0644);
   if (out_fd < 0) {
      VG_(fmsg)("firsttouch: cannot open %s for writing\n", out);
      VG_(exit)(1);
   }
   for (Int i = 0; i < n_clo_targets; i++) {
      struct vg_stat st;
      targets[i].path = clo_targets[i];
      SysRes r = VG_(stat)(clo_targets[i], &st);
      targets[i].stat_ok = !sr_isError(r);
      if (targets[i].stat_ok) { targets[i].dev = st.dev; targets[i].ino = st.ino; }
      else { targets[i].dev = 0; targets[i].ino = 0; }
   }
   n_targets = n_clo_targets;
   if (VG_(args_the_exename)) {
      struct vg_stat st;
      SysRes r = VG_(stat)(VG_(args_the_exename), &st);
      if (!sr_isError(r)) { exe_known = True; exe_dev = st.dev; exe_ino = st.ino; }
   }
   buf = VG_(malloc)("ft.buf", BUFREC * sizeof(Rec));
   rbits = wbits = sentinel_bits;
   if (!write_header()) {
      VG_(fmsg)("firsttouch: cannot write the log header to %s\n", out);
      VG_(exit)(1);
   }
   VG_(atfork)(NULL, NULL, ft_child_after_fork);
   /* Mappings made before the client starts (exe, ld.so) arrive through
      track_new_mem_startup, which runs after this. */
}

static void ft_fini(Int exitcode)
{
   if (out_fd < 0) return;
   /* counted before the final flush: a write failing now cannot be reported */
   if (bytes_len) emit_bytes();
   for (Int k = 1; k < N_DROP; k++)
      if (dropped[k]) emit(K_DROP, dropped[k], 0, -1, now_ns(), (UShort)k);
   emit(K_END, 0, 0, -1, now_ns(), 0);
   /* trailer: exit code in addr */
   buf[nbuf - 1].addr = (ULong)(Long)exitcode;
   flush();
   VG_(close)(out_fd);
   out_fd = -1;
   if (VG_(clo_verbosity) > 1)
      VG_(umsg)("firsttouch: %llu records, %llu groups instrumented\n", n_records, groups_made);
}

static void ft_pre_clo_init(void)
{
   VG_(details_name)("firsttouch");
   VG_(details_version)("1");
   VG_(details_description)("first-access order of target files (elflayout)");
   VG_(details_copyright_author)("elflayout authors");
   VG_(details_bug_reports_to)("elflayout issue tracker");
   VG_(details_avg_translation_sizeB)(275);

   VG_(basic_tool_funcs)(ft_post_clo_init, ft_instrument, ft_fini);
   VG_(needs_command_line_options)(ft_process_cmd_line_option, ft_print_usage, ft_print_debug_usage);
   VG_(needs_syscall_wrapper)(ft_pre_syscall, ft_post_syscall);
   VG_(track_new_mem_startup)(ft_new_mem_startup);
   VG_(track_new_mem_mmap)(ft_new_mem_mmap);
   VG_(track_die_mem_munmap)(ft_die_mem_munmap);
   VG_(track_copy_mem_remap)(ft_copy_mem_remap);
}

VG_DETERMINE_INTERFACE_VERSION(ft_pre_clo_init)
