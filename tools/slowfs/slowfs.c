/*
 * slowfs — read-only FUSE passthrough that serves a directory as if it sat on a slow
 * disk.  Part of elflayout (tools/elflayout/storage drives it; see docs/storage.md).
 *
 * Device model (one queue, one request at a time, like a disk head):
 *
 *   latency = seek(d) + size / bandwidth
 *   d       = offset - end of the previous request (same file); another file: far
 *   seek(d) = 0                                   d == 0 (sequential)
 *           = min(d / bandwidth, seekfn(d))       0 < d (forward gap: read through it)
 *           = seekfn(|d|)                         d < 0 or another file (seekfn(inf) = seek)
 *   seekfn(x) = short_seek + (seek - short_seek) * min(1, sqrt(x / seek_span))
 *
 * The loop is single-threaded, so requests are served one after the other; each reply
 * is held back until (time the request was taken + latency), with the real read of the
 * backing file done inside that window.  The page cache of the mount is the kernel's:
 * files are opened with keep_cache and without direct_io, so hot reads never reach us,
 * mmap works, and read-ahead/read-around (bdi read_ahead_kb) shape the requests.
 *
 * A request that was already waiting in /dev/fuse when the previous one was answered
 * starts at the modelled completion of its predecessor (a disk's queue), so our own
 * reply overhead and wake-up lateness do not accumulate over a stream of requests.
 * --realtime (SCHED_FIFO) makes the wake-ups punctual in the first place.
 *
 * Counters live in a small shared file (--stats) so the controller can read them live;
 * --log appends one binary record per read request (struct slowfs_rec).
 */
#define FUSE_USE_VERSION 35
#define _GNU_SOURCE
#include <fuse.h>
#include <fuse_lowlevel.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#define SLOWFS_MAGIC 0x53464c4f57465331ULL /* "SFLOWFS1" */
#define SLOWFS_VERSION 1

/* Shared with tools/elflayout/storage/server.py (_STATS, _STATS_FIELDS): keep in sync. */
struct slowfs_stats {
	uint64_t magic;
	uint32_t version;
	uint32_t ready;          /* 1 once FUSE_INIT was answered */
	uint64_t pid;
	uint32_t proto_major, proto_minor;
	uint32_t max_read, max_readahead, max_write, max_background;
	uint32_t capable, want;
	double seek_s, short_seek_s, seek_span, bandwidth; /* bytes, bytes/s */
	uint64_t requests, bytes, delay_ns, overrun_ns;
	uint64_t sequential, seeks, files_switched, max_request;
	uint64_t opens, errors;
	uint32_t realtime;       /* SCHED_FIFO priority, 0 = normal scheduling */
	uint32_t pad;
	uint64_t late_ns;        /* overhead not passed on to queued requests (see serve) */
};

struct slowfs_rec {          /* --log record, 48 bytes, native endian */
	uint64_t t_ns;           /* CLOCK_MONOTONIC when the request was taken */
	uint64_t ino;            /* backing file inode */
	uint64_t offset;
	uint32_t size;           /* bytes asked */
	uint32_t got;            /* bytes returned */
	uint64_t latency_ns;     /* modelled latency */
	uint64_t done_ns;        /* CLOCK_MONOTONIC when the reply was sent */
};

struct handle { int fd; uint64_t ino; };

static int src_fd = -1;
static unsigned max_read_opt = 0;
static int follow = 0;   /* --follow-symlinks: serve what symlinks point to, as regular files */
static struct slowfs_stats *st;
static int log_fd = -1;
static double p_seek, p_short, p_span, p_bw;  /* seconds, seconds, bytes, bytes/s */
static uint64_t prev_ino = 0, prev_end = 0;
/* The device's own timeline: when the previous read completed in the model, and whether
 * the request being served was already waiting in /dev/fuse when we became free. */
static uint64_t last_deadline = 0;
static int queued = 0;

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

/* Timer wake-ups in a VM arrive tens of microseconds late (more from an idle CPU), a
 * third of an SSD's whole latency.  So: sleep until a little before the deadline (the
 * margin follows the lateness seen so far), then spin.  Spinning is bounded by
 * max_spin_ns per request. */
static uint64_t max_spin_ns = 200000;
static double late_ewma = 20000; /* ns */

static void wait_until(uint64_t deadline)
{
	uint64_t spin = (uint64_t)(2 * late_ewma) + 10000;
	if (spin > max_spin_ns)
		spin = max_spin_ns;
	uint64_t wake = deadline > spin ? deadline - spin : 0;
	uint64_t t = now_ns();
	if (wake > t) {
		struct timespec ts = { .tv_sec = wake / 1000000000ULL, .tv_nsec = wake % 1000000000ULL };
		while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
			;
		t = now_ns();
		late_ewma = 0.9 * late_ewma + 0.1 * (double)(t - wake);
	}
	while (t < deadline) {
#if defined(__x86_64__) || defined(__i386__)
		__builtin_ia32_pause();
#endif
		t = now_ns();
	}
}

static const char *rel(const char *path)
{
	while (*path == '/')
		path++;
	return *path ? path : ".";
}

static double seekfn(double dist)
{
	if (p_span <= 0 || dist >= p_span)
		return p_seek;
	return p_short + (p_seek - p_short) * sqrt(dist / p_span);
}

/* Modelled service time (seconds) of a read of `size` bytes at `off` of file `ino`. */
static double model(uint64_t ino, uint64_t off, uint64_t size)
{
	double s;
	if (prev_ino != ino) {
		s = p_seek;
		if (st) st->files_switched++, st->seeks++;
	} else if (off == prev_end) {
		s = 0;
		if (st) st->sequential++;
	} else if (off > prev_end) {
		double d = (double)(off - prev_end);
		double through = p_bw > 0 ? d / p_bw : 0;
		double sk = seekfn(d);
		s = through < sk ? through : sk;
		if (st) st->seeks++;
	} else {
		s = seekfn((double)(prev_end - off));
		if (st) st->seeks++;
	}
	return s + (p_bw > 0 ? (double)size / p_bw : 0);
}

static void *sf_init(struct fuse_conn_info *conn, struct fuse_config *cfg)
{
	cfg->kernel_cache = 1;     /* keep_cache on every open: the page cache survives opens */
	cfg->direct_io = 0;
	cfg->auto_cache = 0;
	cfg->use_ino = 1;          /* st_ino of the backing file */
	cfg->entry_timeout = 86400; /* read-only, static tree: metadata never changes */
	cfg->attr_timeout = 86400;
	cfg->negative_timeout = 10;
	cfg->nullpath_ok = 1;
	if (max_read_opt)
		conn->max_read = max_read_opt; /* libfuse wants init() to agree with -o max_read */
	if (st) {
		st->proto_major = conn->proto_major;
		st->proto_minor = conn->proto_minor;
		st->max_read = conn->max_read;
		st->max_readahead = conn->max_readahead;
		st->max_write = conn->max_write;
		st->max_background = conn->max_background;
		st->capable = conn->capable;
		st->want = conn->want;
		__atomic_store_n(&st->ready, 1, __ATOMIC_RELEASE);
	}
	return NULL;
}

static int sf_getattr(const char *path, struct stat *sb, struct fuse_file_info *fi)
{
	int r = fi ? fstat(((struct handle *)(uintptr_t)fi->fh)->fd, sb)
		   : fstatat(src_fd, rel(path), sb, (follow ? 0 : AT_SYMLINK_NOFOLLOW) | AT_EMPTY_PATH);
	return r < 0 ? -errno : 0;
}

static int sf_readlink(const char *path, char *buf, size_t size)
{
	ssize_t n = readlinkat(src_fd, rel(path), buf, size - 1);
	if (n < 0)
		return -errno;
	buf[n] = 0;
	return 0;
}

static int sf_open(const char *path, struct fuse_file_info *fi)
{
	if ((fi->flags & O_ACCMODE) != O_RDONLY)
		return -EROFS;
	int fd = openat(src_fd, rel(path), O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	struct stat sb;
	struct handle *h = malloc(sizeof *h);
	if (!h || fstat(fd, &sb) < 0) {
		int e = h ? errno : ENOMEM;
		free(h);
		close(fd);
		return -e;
	}
	h->fd = fd;
	h->ino = sb.st_ino;
	fi->fh = (uintptr_t)h;
	fi->keep_cache = 1;
	fi->direct_io = 0;
	if (st) st->opens++;
	return 0;
}

static int sf_read(const char *path, char *buf, size_t size, off_t off, struct fuse_file_info *fi)
{
	(void)path;
	struct handle *h = (struct handle *)(uintptr_t)fi->fh;
	uint64_t t0 = now_ns();
	ssize_t got = pread(h->fd, buf, size, off);
	if (got < 0) {
		if (st) st->errors++;
		return -errno;
	}
	double lat = model(h->ino, (uint64_t)off, (uint64_t)got);
	uint64_t lat_ns = (uint64_t)(lat * 1e9 + 0.5);
	uint64_t start = t0;
	if (queued && last_deadline && last_deadline < t0) {
		/* Waiting when the device became free: it starts at the modelled completion of
		 * its predecessor; our reply overhead and wake-up lateness are not passed on. */
		start = last_deadline;
		if (st) st->late_ns += t0 - last_deadline;
	}
	uint64_t deadline = start + lat_ns;
	wait_until(deadline);
	uint64_t t1 = now_ns();
	last_deadline = deadline;
	prev_ino = h->ino;
	prev_end = (uint64_t)off + (uint64_t)got;
	if (st) {
		st->requests++;
		st->bytes += (uint64_t)got;
		st->delay_ns += lat_ns;
		if (t1 > deadline + 1000000ULL)   /* backing read slower than the model */
			st->overrun_ns += t1 - deadline;
		if (size > st->max_request)
			st->max_request = size;
	}
	if (log_fd >= 0) {
		struct slowfs_rec r = { t0, h->ino, (uint64_t)off, (uint32_t)size, (uint32_t)got, lat_ns, t1 };
		if (write(log_fd, &r, sizeof r) != (ssize_t)sizeof r && st)
			st->errors++;
	}
	return (int)got;
}

static int sf_release(const char *path, struct fuse_file_info *fi)
{
	(void)path;
	struct handle *h = (struct handle *)(uintptr_t)fi->fh;
	close(h->fd);
	free(h);
	return 0;
}

static int sf_opendir(const char *path, struct fuse_file_info *fi)
{
	int fd = openat(src_fd, rel(path), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	DIR *d = fdopendir(fd);
	if (!d) {
		int e = errno;
		close(fd);
		return -e;
	}
	fi->fh = (uintptr_t)d;
	return 0;
}

static int sf_readdir(const char *path, void *buf, fuse_fill_dir_t fill, off_t off,
		      struct fuse_file_info *fi, enum fuse_readdir_flags flags)
{
	(void)path; (void)off; (void)flags;
	DIR *d = (DIR *)(uintptr_t)fi->fh;
	struct dirent *e;
	rewinddir(d);
	while ((e = readdir(d))) {
		struct stat sb = { .st_ino = e->d_ino, .st_mode = (mode_t)DTTOIF(e->d_type) };
		if (follow && e->d_type == DT_LNK && fstatat(dirfd(d), e->d_name, &sb, 0) != 0)
			continue; /* dangling */
		if (fill(buf, e->d_name, &sb, 0, 0))
			break;
	}
	return 0;
}

static int sf_releasedir(const char *path, struct fuse_file_info *fi)
{
	(void)path;
	closedir((DIR *)(uintptr_t)fi->fh);
	return 0;
}

static int sf_statfs(const char *path, struct statvfs *sv)
{
	(void)path;
	return fstatvfs(src_fd, sv) < 0 ? -errno : 0;
}

static int sf_access(const char *path, int mask)
{
	if (mask & W_OK)
		return -EROFS;
	return faccessat(src_fd, rel(path), mask, 0) < 0 ? -errno : 0;
}

static const struct fuse_operations ops = {
	.init = sf_init,
	.getattr = sf_getattr,
	.readlink = sf_readlink,
	.open = sf_open,
	.read = sf_read,
	.release = sf_release,
	.opendir = sf_opendir,
	.readdir = sf_readdir,
	.releasedir = sf_releasedir,
	.statfs = sf_statfs,
	.access = sf_access,
};

/* fuse_session_loop, plus: note whether the next request was already queued. */
static int serve(struct fuse_session *se)
{
	struct fuse_buf fbuf = { .mem = NULL };
	struct pollfd pfd = { .fd = fuse_session_fd(se), .events = POLLIN };
	int res = 0;
	while (!fuse_session_exited(se)) {
		pfd.revents = 0;
		int ready = poll(&pfd, 1, 0) > 0 && (pfd.revents & POLLIN);
		res = fuse_session_receive_buf(se, &fbuf);
		if (res == -EINTR)
			continue;
		if (res <= 0)
			break;
		queued = ready;
		fuse_session_process_buf(se, &fbuf);
	}
	free(fbuf.mem);
	return res < 0 && res != -ENODEV ? res : 0; /* ENODEV: unmounted */
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: slowfs [options] SRC MNT\n"
		"  --seek-ms X         average (far) seek time, ms            [0]\n"
		"  --short-seek-ms X   shortest non-sequential seek, ms       [= seek]\n"
		"  --seek-span-mb X    distance (MiB) at which a seek costs the full seek [0]\n"
		"  --bandwidth-mb-s X  transfer rate, MB/s (10^6 B/s); 0 = infinite [0]\n"
		"  --max-read-kb N     mount option max_read (largest read request)\n"
		"  --stats FILE        shared counters (struct slowfs_stats)\n"
		"  --log FILE          append one 48-byte record per read request\n"
		"  --follow-symlinks   serve the targets of symlinks (e.g. a farm of links to files)\n"
		"  --die-with-parent   unmount and exit when the parent process dies\n"
		"  --spin-us N         spin at most N us before each deadline (timer lateness) [200]\n"
		"  --realtime PRIO     serve with SCHED_FIFO priority PRIO (root): punctual wake-ups\n"
		"  -d                  FUSE debug output\n"
		"Runs in the foreground; SIGINT/SIGTERM unmount.  A crashed server is unmounted\n"
		"by fusermount3 (auto_unmount).\n");
}

static double num(const char *opt, const char *v)
{
	char *end;
	double x = v ? strtod(v, &end) : NAN;
	if (!v || *end || !(x >= 0) || isinf(x)) {
		fprintf(stderr, "slowfs: %s needs a number >= 0, got %s\n", opt, v ? v : "nothing");
		exit(2);
	}
	return x;
}

int main(int argc, char **argv)
{
	double seek_ms = 0, short_ms = -1, span_mb = 0, bw = 0, max_read_kb = 0;
	const char *stats_path = NULL, *log_path = NULL, *src = NULL, *mnt = NULL;
	int debug = 0, die_with_parent = 0, rt_prio = 0;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--seek-ms")) seek_ms = num(a, v), i++;
		else if (!strcmp(a, "--short-seek-ms")) short_ms = num(a, v), i++;
		else if (!strcmp(a, "--seek-span-mb")) span_mb = num(a, v), i++;
		else if (!strcmp(a, "--bandwidth-mb-s")) bw = num(a, v), i++;
		else if (!strcmp(a, "--max-read-kb")) max_read_kb = num(a, v), i++;
		else if (!strcmp(a, "--stats") && v) stats_path = v, i++;
		else if (!strcmp(a, "--log") && v) log_path = v, i++;
		else if (!strcmp(a, "--die-with-parent")) die_with_parent = 1;
		else if (!strcmp(a, "--follow-symlinks")) follow = 1;
		else if (!strcmp(a, "--realtime")) rt_prio = (int)num(a, v), i++;
		else if (!strcmp(a, "--spin-us")) max_spin_ns = (uint64_t)(num(a, v) * 1000), i++;
		else if (!strcmp(a, "-d")) debug = 1;
		else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
		else if (a[0] == '-') { fprintf(stderr, "slowfs: unknown option %s\n", a); usage(stderr); return 2; }
		else if (!src) src = a;
		else if (!mnt) mnt = a;
		else { usage(stderr); return 2; }
	}
	if (!src || !mnt) {
		usage(stderr);
		return 2;
	}
	if (short_ms < 0)
		short_ms = seek_ms;
	if (short_ms > seek_ms) {
		fprintf(stderr, "slowfs: --short-seek-ms must not exceed --seek-ms\n");
		return 2;
	}
	p_seek = seek_ms / 1e3;
	p_short = short_ms / 1e3;
	p_span = span_mb * 1048576.0;
	p_bw = bw * 1e6;

	if (die_with_parent) {
		pid_t parent = getppid();
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		if (getppid() != parent)
			return 1;
	}
	/* Sleep precision: the default 50 us timer slack is half an SSD seek. */
	prctl(PR_SET_TIMERSLACK, 1UL);
	/* On a busy machine a normal-priority sleeper wakes milliseconds late; the helper
	 * only copies <= 1 MiB per request and sleeps, so SCHED_FIFO costs others little. */
	if (rt_prio > 0) {
		struct sched_param sp = { .sched_priority = rt_prio };
		if (sched_setscheduler(0, SCHED_FIFO | SCHED_RESET_ON_FORK, &sp) != 0) {
			fprintf(stderr, "slowfs: warning: SCHED_FIFO %d: %s (serving at normal priority)\n",
				rt_prio, strerror(errno));
			rt_prio = 0;
		}
	}

	src_fd = open(src, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (src_fd < 0) {
		fprintf(stderr, "slowfs: %s: %s\n", src, strerror(errno));
		return 2;
	}
	if (stats_path) {
		int fd = open(stats_path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (fd < 0 || ftruncate(fd, sizeof *st) < 0) {
			fprintf(stderr, "slowfs: %s: %s\n", stats_path, strerror(errno));
			return 2;
		}
		st = mmap(NULL, sizeof *st, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		close(fd);
		if (st == MAP_FAILED) {
			perror("slowfs: mmap stats");
			return 2;
		}
		st->magic = SLOWFS_MAGIC;
		st->version = SLOWFS_VERSION;
		st->pid = (uint64_t)getpid();
		st->seek_s = p_seek;
		st->short_seek_s = p_short;
		st->seek_span = p_span;
		st->bandwidth = p_bw;
		st->realtime = (uint32_t)rt_prio;
	}
	if (log_path) {
		log_fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		if (log_fd < 0) {
			fprintf(stderr, "slowfs: %s: %s\n", log_path, strerror(errno));
			return 2;
		}
	}

	char opts[512];
	/* allow_other (other users may run the measured programs) needs root or
	 * user_allow_other in /etc/fuse.conf; without it only our user sees the files. */
	int n = snprintf(opts, sizeof opts,
			 "ro,default_permissions,%sauto_unmount,fsname=elflayout-slowfs,subtype=elflayout",
			 geteuid() == 0 ? "allow_other," : "");
	if (max_read_kb > 0) {
		max_read_opt = (unsigned)(max_read_kb * 1024);
		snprintf(opts + n, sizeof opts - n, ",max_read=%u", max_read_opt);
	}
	char *fargv[8];
	int fargc = 0;
	fargv[fargc++] = argv[0];
	fargv[fargc++] = "-o";
	fargv[fargc++] = opts;
	if (debug)
		fargv[fargc++] = "-d";
	fargv[fargc] = NULL;
	struct fuse_args args = FUSE_ARGS_INIT(fargc, fargv);

	struct fuse *f = fuse_new(&args, &ops, sizeof ops, NULL);
	if (!f)
		return 2;
	if (fuse_mount(f, mnt) != 0) {
		fuse_destroy(f);
		return 2;
	}
	struct fuse_session *se = fuse_get_session(f);
	if (fuse_set_signal_handlers(se) != 0) {
		fuse_unmount(f);
		fuse_destroy(f);
		return 2;
	}
	int rc = serve(se); /* single-threaded: one request at a time */
	fuse_remove_signal_handlers(se);
	fuse_unmount(f);
	fuse_destroy(f);
	fuse_opt_free_args(&args);
	return rc < 0 ? 1 : 0;
}
