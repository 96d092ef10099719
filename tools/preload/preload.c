/*
 * Apply a preload plan: see preload.h and docs/preload.md.
 *
 * Text form of a plan (written by tools/elflayout/preload/model.py; keep in sync):
 *
 *   elflayout-preload-plan 1
 *   F <nranges> <size> <mtime_sec> <mtime_nsec> <build-id hex | -> <path up to end of line>
 *   <offset> <length>            (nranges lines, increasing offsets)
 *   ...                          (next F line)
 *
 * Chosen over JSON so that applying a plan costs microseconds and no parser library:
 * the launcher's whole overhead on a hot start has to stay within a couple of ms.
 */
#define _GNU_SOURCE
#include "preload.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define TAG "elflayout-preload"
#define MAGIC "elflayout-preload-plan"
#define TEXT_VERSION 1
#define MAX_PLAN_BYTES (64 << 20)   /* a plan is a few KB; refuse absurd files */
#define MAX_NOTES_BYTES (1 << 16)   /* build-id notes are tiny; bound the read */
#define PREAD_CHUNK (1 << 20)       /* FUSE and most block layers split at 1 MiB anyway */

int elp_method(const char *name)
{
	if (!name || !*name || !strcmp(name, "pread"))
		return ELP_PREAD;
	if (!strcmp(name, "readahead"))
		return ELP_READAHEAD;
	if (!strcmp(name, "fadvise"))
		return ELP_FADVISE;
	return -1;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Read the whole file into a NUL-terminated buffer. */
static char *slurp(const char *path, int *err)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		*err = errno;
		return NULL;
	}
	struct stat sb;
	if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode) || sb.st_size > MAX_PLAN_BYTES) {
		*err = S_ISDIR(sb.st_mode) ? EISDIR : EFBIG;
		close(fd);
		return NULL;
	}
	char *buf = malloc(sb.st_size + 1);
	size_t n = 0;
	while (buf && n < (size_t)sb.st_size) {
		ssize_t r = read(fd, buf + n, sb.st_size - n);
		if (r <= 0)
			break;
		n += r;
	}
	close(fd);
	if (!buf) {
		*err = ENOMEM;
		return NULL;
	}
	buf[n] = 0;
	return buf;
}

/* Field F of an ELF structure T (Ehdr, Phdr) read from BUF, in the file's class. */
#define ELF_FIELD(buf, is64, T, f) \
	((is64) ? ((const Elf64_##T *)(const void *)(buf))->f : ((const Elf32_##T *)(const void *)(buf))->f)

/* The GNU build-id of an ELF file as lower-case hex, from its PT_NOTE segments. */
static int build_id(int fd, char *out, size_t outsz)
{
	unsigned char e[sizeof(Elf64_Ehdr)];
	if (pread(fd, e, sizeof e, 0) < (ssize_t)sizeof(Elf32_Ehdr) || memcmp(e, ELFMAG, SELFMAG))
		return -1;
	int is64 = e[EI_CLASS] == ELFCLASS64;
	uint64_t phoff = ELF_FIELD(e, is64, Ehdr, e_phoff);
	unsigned phnum = ELF_FIELD(e, is64, Ehdr, e_phnum), phentsize = ELF_FIELD(e, is64, Ehdr, e_phentsize);
	if (phnum == 0 || phnum > 256 || phentsize < (is64 ? sizeof(Elf64_Phdr) : sizeof(Elf32_Phdr)))
		return -1;
	for (unsigned i = 0; i < phnum; i++) {
		unsigned char ph[sizeof(Elf64_Phdr)];
		if (pread(fd, ph, phentsize < sizeof ph ? phentsize : sizeof ph, phoff + (uint64_t)i * phentsize) <= 0)
			return -1;
		uint32_t type = ELF_FIELD(ph, is64, Phdr, p_type);
		uint64_t off = ELF_FIELD(ph, is64, Phdr, p_offset), sz = ELF_FIELD(ph, is64, Phdr, p_filesz);
		if (type != PT_NOTE || sz == 0 || sz > MAX_NOTES_BYTES)
			continue;
		unsigned char notes[MAX_NOTES_BYTES];
		ssize_t n = pread(fd, notes, sz, off);
		if (n < (ssize_t)sizeof(Elf64_Nhdr))
			continue;
		/* Note headers have the same layout in both classes; fields are 4-byte aligned. */
		size_t pos = 0;
		while (pos + sizeof(Elf64_Nhdr) <= (size_t)n) {
			Elf64_Nhdr *nh = (Elf64_Nhdr *)(notes + pos);
			size_t name = pos + sizeof *nh, desc = name + ((nh->n_namesz + 3) & ~3u);
			size_t next = desc + ((nh->n_descsz + 3) & ~3u);
			if (next > (size_t)n)
				break;
			if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 && !memcmp(notes + name, "GNU", 4)) {
				if (nh->n_descsz * 2 + 1 > outsz)
					return -1;
				for (unsigned k = 0; k < nh->n_descsz; k++)
					sprintf(out + 2 * k, "%02x", notes[desc + k]);
				return 0;
			}
			pos = next;
		}
	}
	return -1;
}

/* Rewrite `path` by the first matching FROM=TO prefix of `map` into buf. */
static const char *remap(const char *path, const char *map, char *buf, size_t bufsz)
{
	while (map && *map) {
		const char *end = strchr(map, ':');
		size_t len = end ? (size_t)(end - map) : strlen(map);
		const char *eq = memchr(map, '=', len);
		if (eq) {
			size_t flen = eq - map, tlen = len - flen - 1;
			if (flen && !strncmp(path, map, flen) && (path[flen] == '/' || path[flen] == 0)) {
				if (tlen + strlen(path + flen) + 1 <= bufsz) {
					memcpy(buf, eq + 1, tlen);
					strcpy(buf + tlen, path + flen);
					return buf;
				}
			}
		}
		map = end ? end + 1 : NULL;
	}
	return path;
}

#ifndef __NR_cachestat
#define __NR_cachestat 451 /* Linux 6.5; all architectures share the number */
#endif
struct elp_cachestat_range { uint64_t off, len; };
struct elp_cachestat { uint64_t nr_cache, nr_dirty, nr_writeback, nr_evicted, nr_recently_evicted; };

/* 1 when every page of [off, off + len) is in the page cache.  cachestat(2) counts them
 * with one walk of the file's page-cache tree, so a hot start costs one system call per
 * range instead of copying the whole plan (mincore on a file mapping looks every page up
 * on its own: ~10 ms for libLLVM's plan).  Older kernels (ENOSYS): 0, the range is read. */
static int cached(int fd, uint64_t off, uint64_t len)
{
	static int unavailable;
	if (unavailable || len == 0)
		return len == 0;
	struct elp_cachestat_range r = {off, len};
	struct elp_cachestat cs;
	if (syscall(__NR_cachestat, fd, &r, &cs, 0) < 0) {
		if (errno == ENOSYS)
			unavailable = 1;
		return 0;
	}
	return cs.nr_cache >= (len + 4095) / 4096;
}

/* Ask for [off, off + len) by method M.  Returns 0, or the error (an errno value) when
 * the kernel refused or a read failed; *done gets the bytes requested (readahead,
 * fadvise) or read (pread) before that, so a failed range is not counted as read. */
static int read_range(int fd, enum elp_method m, uint64_t off, uint64_t len, char *scratch, uint64_t *done)
{
	*done = 0;
	switch (m) {
	case ELP_READAHEAD:
		if (readahead(fd, off, len) < 0)
			return errno;
		break;
	case ELP_FADVISE: {
		int e = posix_fadvise(fd, off, len, POSIX_FADV_WILLNEED);  /* returns the error */
		if (e)
			return e;
		break;
	}
	case ELP_PREAD:
		while (*done < len) {
			size_t n = len - *done < PREAD_CHUNK ? len - *done : PREAD_CHUNK;
			ssize_t r = pread(fd, scratch, n, off + *done);
			if (r < 0 && errno == EINTR)
				continue;
			if (r < 0)
				return errno;
			if (r == 0)
				return ENODATA;  /* the file ended early: it shrank since the check */
			*done += r;
		}
		return 0;
	}
	*done = len;
	return 0;
}

static const char *method_name(enum elp_method m)
{
	return m == ELP_READAHEAD ? "readahead" : m == ELP_FADVISE ? "posix_fadvise" : "pread";
}

/* The .preload sibling of PLAN.json; other names are used as given. */
static const char *text_form(const char *plan, char *buf, size_t bufsz)
{
	size_t n = strlen(plan);
	if (n > 5 && !strcmp(plan + n - 5, ".json") && n + 4 < bufsz) {
		memcpy(buf, plan, n - 5);
		strcpy(buf + n - 5, ".preload");
		return buf;
	}
	return plan;
}

/* Why the file open as FD (-1: open failed, errno set) is not the one the plan was made
 * for (size, mtime, build-id "-" for none), or NULL when it is; fills *sb. */
static const char *changed(int fd, struct stat *sb, unsigned long long size, long long msec, long long mnsec,
			   const char *bid, char *whybuf, size_t whysz)
{
	if (fd < 0) {
		snprintf(whybuf, whysz, "cannot open (%s)", strerror(errno));
		return whybuf;
	}
	if (fstat(fd, sb) < 0 || !S_ISREG(sb->st_mode))
		return "not a regular file";
	if ((unsigned long long)sb->st_size != size) {
		snprintf(whybuf, whysz, "size %llu, plan has %llu", (unsigned long long)sb->st_size, size);
		return whybuf;
	}
	if (sb->st_mtim.tv_sec != msec || sb->st_mtim.tv_nsec != mnsec)
		return "modified since the plan (mtime differs)";
	if (strcmp(bid, "-")) {
		char have[129];
		if (build_id(fd, have, sizeof have) < 0)
			return "no build-id, plan has one";
		if (strcmp(have, bid)) {
			snprintf(whybuf, whysz, "build-id %s, plan has %s", have, bid);
			return whybuf;
		}
	}
	return NULL;
}

/* Read a file's ranges; the first failure costs one line on stderr and the rest of the
 * file.  Only ranges fully requested or read count in st.  Returns 0, or -1 on a failure. */
static int apply_ranges(int fd, const char *path, uint64_t (*rg)[2], unsigned nr, uint64_t size,
			enum elp_method m, char *scratch, struct elp_stats *st)
{
	for (unsigned i = 0; i < nr; i++) {
		uint64_t off = rg[i][0], len = rg[i][1], done;
		if (off + len > size || cached(fd, off, len))
			continue; /* past the end cannot happen with an unchanged file */
		int e = read_range(fd, m, off, len, scratch, &done);
		st->bytes += done;
		if (e) {
			fprintf(stderr, TAG ": %s: %s of bytes %llu-%llu failed (%s); the rest of the file is not preloaded\n",
				path, method_name(m), (unsigned long long)off, (unsigned long long)(off + len), strerror(e));
			return -1;
		}
		st->ranges++;
	}
	return 0;
}

int elp_apply(const char *plan, const struct elp_opts *o, struct elp_stats *st)
{
	struct elp_stats dummy;
	if (!st)
		st = &dummy;
	memset(st, 0, sizeof *st);
	double t0 = now();
	char pbuf[PATH_MAX + 16];
	const char *ppath = text_form(plan, pbuf, sizeof pbuf);
	int err = 0;
	char *text = slurp(ppath, &err);
	if (!text) {
		fprintf(stderr, TAG ": %s: cannot read plan (%s); starting without preload\n", ppath, strerror(err));
		return -1;
	}
	char *save = NULL, *line = strtok_r(text, "\n", &save);
	int version = 0;
	if (!line || sscanf(line, MAGIC " %d", &version) != 1 || version != TEXT_VERSION) {
		fprintf(stderr, TAG ": %s: not an elflayout preload plan (text form version %d); starting without preload\n",
			ppath, TEXT_VERSION);
		free(text);
		return -1;
	}
	char *scratch = o->method == ELP_PREAD ? malloc(PREAD_CHUNK) : NULL;
	if (o->method == ELP_PREAD && !scratch) {
		free(text);
		return -1;
	}
	int bad = 0;
	unsigned lineno = 1;
	while ((line = strtok_r(NULL, "\n", &save)) && !bad) {
		lineno++;
		unsigned nr;
		unsigned long long size;
		long long msec, mnsec;
		char bid[129];
		int pos = 0;
		if (sscanf(line, "F %u %llu %lld %lld %128s %n", &nr, &size, &msec, &mnsec, bid, &pos) != 5 || !pos) {
			bad = 1;
			break;
		}
		char mbuf[PATH_MAX];
		const char *path = remap(line + pos, o->map, mbuf, sizeof mbuf);
		/* Read the ranges first so that a skipped file still advances the parser. */
		uint64_t (*rg)[2] = calloc(nr ? nr : 1, sizeof *rg);
		if (!rg) {
			bad = 1;
			break;
		}
		for (unsigned i = 0; i < nr; i++) {
			char *l = strtok_r(NULL, "\n", &save);
			unsigned long long a, b;
			lineno++;
			if (!l || sscanf(l, "%llu %llu", &a, &b) != 2) {
				bad = 1;
				break;
			}
			rg[i][0] = a, rg[i][1] = b;
		}
		if (bad) {
			free(rg);
			break;
		}
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		struct stat sb;
		char whybuf[320];
		const char *why = changed(fd, &sb, size, msec, mnsec, bid, whybuf, sizeof whybuf);
		if (why) {
			fprintf(stderr, TAG ": %s: %s; not preloaded\n", path, why);
			st->files_skipped++;
		} else if (apply_ranges(fd, path, rg, nr, (uint64_t)sb.st_size, o->method, scratch, st) == 0) {
			st->files++;
		} else {
			st->files_skipped++;
		}
		if (fd >= 0)
			close(fd);
		free(rg);
	}
	if (bad)
		fprintf(stderr, TAG ": %s: line %u: malformed plan; the rest is not preloaded\n", ppath, lineno);
	free(scratch);
	free(text);
	st->seconds = now() - t0;
	if (o->verbose)
		fprintf(stderr, TAG ": %u files (%u skipped), %u ranges read (cached ones skipped), %llu bytes in %.1f ms\n", st->files,
			st->files_skipped, st->ranges, (unsigned long long)st->bytes, st->seconds * 1e3);
	return bad ? -1 : 0;
}
