/* qemutouch: a qemu-user TCG plugin recording, for a set of target files, the first
   execution of each instruction run and (data=on) the first read and first write of
   each file page, in one global sequence: the profile backend for programs of another
   machine (arm64 on x86-64), run as `qemu-aarch64 -L ROOT -plugin qemutouch.so,...`.

   Code: in user mode a block is translated just before its first execution, so the
   translation callback logs the block's instructions not seen before (a per-target
   bitmap of file bytes keeps re-translations after a cache flush out of the log).

   Mappings: the guest's mmaps are host mmaps (at guest address + guest_base): the
   target mappings are read from /proc/self/maps, matched by device and inode, first
   at the first translation and again after every mmap/munmap/mremap/mprotect.

   Output (out=FILE): the firsttouch raw log (docs/formats/profile.md, "raw log"), so
   the Python side reads both backends' logs alike.  Addresses are guest addresses.

   Arguments: out=FILE, target=PATH (repeated), exe=PATH (the guest executable: its
   first executed block is the 'E' record), mark=HEX (file offsets in the executable,
   repeated: 'M' records), data=on|off. */

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include <qemu-plugin.h>

QEMU_PLUGIN_EXPORT int qemu_plugin_version = QEMU_PLUGIN_VERSION;

#define MAX_TARGETS 32
#define MAX_MAPS 1024
#define MAX_MARKS 8
#define BUFREC 4096
#define PAGE 4096

typedef struct {
    uint64_t seq, t_ns, addr;
    uint32_t len;
    uint8_t kind, target;
    uint16_t flags;
} Rec;

typedef struct {
    const char *path;
    dev_t dev;
    ino_t ino;
    uint64_t size;
    uint8_t *xbits;          /* one bit per file byte executed (instruction starts) */
    uint8_t *rbits, *wbits;  /* one byte per file page read / written */
} Target;

typedef struct { uint64_t start, end, foff; int target, prot; } Map;

static Target targets[MAX_TARGETS];
static int n_targets;
static dev_t exe_dev;
static ino_t exe_ino;
static int exe_known, exe_seen;
static uint64_t marks[MAX_MARKS];
static int n_marks;
static uint8_t mark_seen[MAX_MARKS];
static int data_on;

static Map maps[MAX_MAPS], exe_maps[64];
static int n_maps, n_exe_maps;
static volatile int maps_dirty = 1;
static uint64_t span_lo = ~0ULL, span_hi;
static int64_t guest_base;
static int base_known;

static Rec buf[BUFREC];
static int nbuf, out_fd = -1;
static uint64_t seq, dropped_writes;
static pid_t my_pid;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
/* syscall numbers after which the mappings are read again (guest ABI) */
static int64_t map_calls[4];

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

static void flush(void)
{
    if (getpid() != my_pid) { nbuf = 0; return; }  /* a forked child: the parent owns the log */
    size_t n = nbuf * sizeof(Rec), done = 0;
    while (done < n) {
        ssize_t w = write(out_fd, (char *)buf + done, n - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) { dropped_writes += (n - done) / sizeof(Rec); break; }
        done += w;
    }
    nbuf = 0;
}

static void emit(uint8_t kind, uint64_t a, uint32_t len, int target, uint64_t t, uint16_t flags)
{
    if (nbuf == BUFREC) flush();
    Rec *r = &buf[nbuf++];
    r->seq = seq++;
    r->t_ns = t;
    r->addr = a;
    r->len = len;
    r->kind = kind;
    r->target = (uint8_t)(target < 0 ? 255 : target);
    r->flags = flags;
}

static int target_of(dev_t dev, ino_t ino)
{
    for (int i = 0; i < n_targets; i++)
        if (targets[i].dev == dev && targets[i].ino == ino) return i;
    return -1;
}

static int same_map(const Map *a, const Map *b)
{
    return a->start == b->start && a->end == b->end && a->foff == b->foff && a->target == b->target;
}

/* Read the target (and executable) mappings again; log what appeared and went. */
static void refresh_maps(void)
{
    static Map fresh[MAX_MAPS];
    int nf = 0;
    n_exe_maps = 0;
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) return;
    char line[4352];
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi, off, ino;
        unsigned maj, mnr;
        char perms[8];
        if (sscanf(line, "%lx-%lx %7s %lx %x:%x %lu", &lo, &hi, perms, &off, &maj, &mnr, &ino) != 7 || !ino)
            continue;
        dev_t dev = makedev(maj, mnr);
        Map m = {lo - guest_base, hi - guest_base, off, target_of(dev, ino),
                 (perms[0] == 'r') | (perms[1] == 'w') << 1 | (perms[2] == 'x') << 2};
        if (exe_known && dev == exe_dev && ino == exe_ino && n_exe_maps < 64) exe_maps[n_exe_maps++] = m;
        if (m.target >= 0 && nf < MAX_MAPS) fresh[nf++] = m;
    }
    fclose(f);
    for (int i = 0; i < n_maps; i++) {
        int kept = 0;
        for (int j = 0; j < nf && !kept; j++) kept = same_map(&maps[i], &fresh[j]);
        if (!kept) emit('u', maps[i].start, (uint32_t)(maps[i].end - maps[i].start), -1, 0, 0);
    }
    for (int j = 0; j < nf; j++) {
        int old = 0;
        for (int i = 0; i < n_maps && !old; i++) old = same_map(&maps[i], &fresh[j]);
        /* a map record's t_ns holds the file offset (firsttouch's layout) */
        if (!old) emit('m', fresh[j].start, (uint32_t)(fresh[j].end - fresh[j].start), fresh[j].target,
                       fresh[j].foff, (uint16_t)fresh[j].prot);
    }
    memcpy(maps, fresh, nf * sizeof(Map));
    n_maps = nf;
    span_lo = ~0ULL; span_hi = 0;
    for (int i = 0; i < n_maps; i++) {
        if (maps[i].start < span_lo) span_lo = maps[i].start;
        if (maps[i].end > span_hi) span_hi = maps[i].end;
    }
    maps_dirty = 0;
}

static const Map *find_map(uint64_t a)
{
    static int last;
    if (last < n_maps && a >= maps[last].start && a < maps[last].end) return &maps[last];
    for (int i = 0; i < n_maps; i++)
        if (a >= maps[i].start && a < maps[i].end) { last = i; return &maps[i]; }
    return NULL;
}

static void exe_check(uint64_t a, uint64_t end, uint64_t t)
{
    for (int i = 0; i < n_exe_maps; i++) {
        const Map *m = &exe_maps[i];
        if (a >= m->end || end <= m->start) continue;
        if (!exe_seen) { exe_seen = 1; emit('E', a, 0, -1, t, 0); }
        for (int j = 0; j < n_marks; j++) {
            uint64_t v = m->start + marks[j] - m->foff;
            if (!mark_seen[j] && marks[j] >= m->foff && v >= a && v < end) {
                mark_seen[j] = 1;
                emit('M', v, 0, -1, t, (uint16_t)j);
            }
        }
    }
}

/* Log the not-yet-seen instructions of a block as runs of file bytes. */
static void code_runs(struct qemu_plugin_tb *tb, uint64_t t)
{
    size_t n = qemu_plugin_tb_n_insns(tb);
    uint64_t run_a = 0, run_end = 0;
    int run_t = -1;
    for (size_t i = 0; i <= n; i++) {
        int tg = -1;
        uint64_t a = 0, sz = 0;
        if (i < n) {
            struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
            a = qemu_plugin_insn_vaddr(insn);
            sz = qemu_plugin_insn_size(insn);
            const Map *m = find_map(a);
            if (m) {
                uint64_t fo = a - m->start + m->foff;
                Target *T = &targets[m->target];
                if (fo < T->size && !(T->xbits[fo >> 3] & (1 << (fo & 7)))) {
                    T->xbits[fo >> 3] |= 1 << (fo & 7);
                    tg = m->target;
                }
            }
        }
        if (run_t >= 0 && (tg != run_t || a != run_end)) {
            emit('x', run_a, (uint32_t)(run_end - run_a), run_t, t, 0);
            run_t = -1;
        }
        if (tg >= 0) {
            if (run_t < 0) { run_t = tg; run_a = a; }
            run_end = a + sz;
        }
    }
}

static void data_hit(uint64_t a, int store)
{
    pthread_mutex_lock(&lock);
    if (maps_dirty) refresh_maps();
    const Map *m = find_map(a);
    if (m) {
        uint64_t pg = (a - m->start + m->foff) / PAGE;
        Target *T = &targets[m->target];
        uint8_t *bits = store ? T->wbits : T->rbits;
        if (pg * PAGE < T->size + PAGE && !bits[pg]) {
            bits[pg] = 1;
            emit(store ? 'w' : 'r', a & ~(uint64_t)(PAGE - 1), PAGE, m->target, now_ns(), 0);
        }
    }
    pthread_mutex_unlock(&lock);
}

static void mem_cb(unsigned int vcpu, qemu_plugin_meminfo_t info, uint64_t vaddr, void *ud)
{
    if (!maps_dirty && (vaddr < span_lo || vaddr >= span_hi)) return;
    data_hit(vaddr, qemu_plugin_mem_is_store(info));
}

static void tb_trans(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
    size_t n = qemu_plugin_tb_n_insns(tb);
    if (!n) return;
    pthread_mutex_lock(&lock);
    if (!base_known) {
        struct qemu_plugin_insn *i0 = qemu_plugin_tb_get_insn(tb, 0);
        guest_base = (int64_t)((uint64_t)(uintptr_t)qemu_plugin_insn_haddr(i0) - qemu_plugin_insn_vaddr(i0));
        base_known = 1;
        maps_dirty = 1;
    }
    if (maps_dirty) refresh_maps();
    uint64_t t = now_ns();
    uint64_t a = qemu_plugin_tb_vaddr(tb);
    struct qemu_plugin_insn *last = qemu_plugin_tb_get_insn(tb, n - 1);
    exe_check(a, qemu_plugin_insn_vaddr(last) + qemu_plugin_insn_size(last), t);
    code_runs(tb, t);
    pthread_mutex_unlock(&lock);
    if (data_on)
        for (size_t i = 0; i < n; i++)
            qemu_plugin_register_vcpu_mem_cb(qemu_plugin_tb_get_insn(tb, i), mem_cb, QEMU_PLUGIN_CB_NO_REGS,
                                             QEMU_PLUGIN_MEM_RW, NULL);
}

static void syscall_ret(qemu_plugin_id_t id, unsigned int vcpu, int64_t num, int64_t ret)
{
    for (int i = 0; i < 4; i++)
        if (num == map_calls[i]) maps_dirty = 1;
}

static void at_exit(qemu_plugin_id_t id, void *p)
{
    pthread_mutex_lock(&lock);
    if (dropped_writes) emit('D', dropped_writes, 0, -1, now_ns(), 5);
    emit('Z', 0, 0, -1, now_ns(), 0);
    flush();
    pthread_mutex_unlock(&lock);
}

static int write_header(const char *exe)
{
    char line[4352];
    int pos = snprintf(line, sizeof line, "FIRSTTOUCH 1\nrecsize %d\ndata %d\npid %d\nt0 %llu\nexe %s\nbackend qemu\n",
                       (int)sizeof(Rec), data_on, (int)my_pid, (unsigned long long)now_ns(), exe ? exe : "?");
    for (int i = 0; i < n_targets; i++)
        pos += snprintf(line + pos, sizeof line - pos, "target %d %llu %llu %s\n", i,
                        (unsigned long long)targets[i].dev, (unsigned long long)targets[i].ino, targets[i].path);
    if (pos + 40 >= (int)sizeof line) return -1;
    int pad = (int)sizeof(Rec) - ((pos + 4) % (int)sizeof(Rec));
    if (pad == (int)sizeof(Rec)) pad = 0;
    memset(line + pos, ' ', pad);
    memcpy(line + pos + pad, "\n--\n", 4);
    pos += pad + 4;
    return write(out_fd, line, pos) == pos ? 0 : -1;
}

static int add_target(const char *path)
{
    struct stat st;
    if (n_targets == MAX_TARGETS || stat(path, &st) != 0) return -1;
    Target *T = &targets[n_targets++];
    T->path = path;
    T->dev = st.st_dev;
    T->ino = st.st_ino;
    T->size = st.st_size;
    T->xbits = calloc(st.st_size / 8 + 1, 1);
    T->rbits = calloc(st.st_size / PAGE + 2, 1);
    T->wbits = calloc(st.st_size / PAGE + 2, 1);
    return T->xbits && T->rbits && T->wbits ? 0 : -1;
}

QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc, char **argv)
{
    const char *out = NULL, *exe = NULL;
    my_pid = getpid();
    for (int i = 0; i < argc; i++) {
        char *v = strchr(argv[i], '=');
        if (!v) { fprintf(stderr, "qemutouch: bad argument %s\n", argv[i]); return -1; }
        *v++ = 0;
        if (!strcmp(argv[i], "out")) out = v;
        else if (!strcmp(argv[i], "exe")) exe = v;
        else if (!strcmp(argv[i], "data")) data_on = !strcmp(v, "on");
        else if (!strcmp(argv[i], "mark") && n_marks < MAX_MARKS) marks[n_marks++] = strtoull(v, NULL, 16);
        else if (!strcmp(argv[i], "target")) {
            if (add_target(v)) { fprintf(stderr, "qemutouch: %s: %s\n", v, strerror(errno)); return -1; }
        } else { fprintf(stderr, "qemutouch: unknown argument %s\n", argv[i]); return -1; }
    }
    if (!out || !n_targets) { fprintf(stderr, "qemutouch: give out=FILE and target=PATH\n"); return -1; }
    struct stat st;
    if (exe && stat(exe, &st) == 0) { exe_known = 1; exe_dev = st.st_dev; exe_ino = st.st_ino; }
    if (!strcmp(info->target_name, "x86_64")) {
        int64_t c[4] = {9, 10, 11, 25};       /* mmap mprotect munmap mremap */
        memcpy(map_calls, c, sizeof c);
    } else {
        int64_t c[4] = {222, 226, 215, 216};  /* asm-generic: aarch64, riscv64 */
        memcpy(map_calls, c, sizeof c);
    }
    out_fd = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out_fd < 0 || write_header(exe)) { fprintf(stderr, "qemutouch: cannot write %s\n", out); return -1; }
    qemu_plugin_register_vcpu_tb_trans_cb(id, tb_trans);
    qemu_plugin_register_vcpu_syscall_ret_cb(id, syscall_ret);
    qemu_plugin_register_atexit_cb(id, at_exit, NULL);
    return 0;
}
