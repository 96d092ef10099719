/*
 * elflayout preloader: apply a startup preload plan (docs/preload.md).
 *
 * A plan (written by `elflayout preload plan`, text form PLAN.preload beside PLAN.json,
 * docs/formats/preload-plan.md) lists files and the byte ranges of each that a startup
 * reads.  Applying it asks the kernel to read those ranges in file-offset order, in few
 * large requests, before the program faults them in one read-around window at a time.
 *
 * Never fatal: a missing or malformed plan, a missing file, a file that changed since
 * the plan (size, mtime or build-id) or a read the kernel refuses costs one line on
 * stderr and nothing else.
 */
#ifndef ELFLAYOUT_PRELOAD_H
#define ELFLAYOUT_PRELOAD_H

#include <stdint.h>

enum elp_method {
	ELP_PREAD = 0,     /* pread into a scratch buffer: wait for every range (default) */
	ELP_READAHEAD,     /* readahead(2): queue the reads, do not wait */
	ELP_FADVISE,       /* posix_fadvise(POSIX_FADV_WILLNEED): the same, portable spelling */
};

struct elp_opts {
	enum elp_method method;
	int verbose;       /* one summary line on stderr */
	const char *map;   /* "FROM=TO[:FROM=TO...]": path prefix rewrites (plans made for another root) */
};

struct elp_stats {
	unsigned files;         /* files whose ranges were all requested */
	unsigned files_skipped; /* changed since the plan, or a read failed (one line each) */
	unsigned ranges;   /* ranges read (parts already in the page cache are not; failed ones are not) */
	uint64_t bytes;    /* bytes requested (readahead, fadvise) or read (pread) */
	double seconds;
};

/* Environment variables read by the LD_PRELOAD / LD_AUDIT library. */
#define ELP_ENV_PLAN "ELFLAYOUT_PRELOAD_PLAN"
#define ELP_ENV_METHOD "ELFLAYOUT_PRELOAD_METHOD"   /* pread | readahead | fadvise */
#define ELP_ENV_BACKGROUND "ELFLAYOUT_PRELOAD_BACKGROUND" /* 1: in a thread */
#define ELP_ENV_MAP "ELFLAYOUT_PRELOAD_MAP"
#define ELP_ENV_VERBOSE "ELFLAYOUT_PRELOAD_VERBOSE"

/* Apply the plan at `plan` (PLAN.preload, or PLAN.json whose .preload sibling is read).
 * Returns 0, or -1 after printing one line (plan missing or malformed). */
int elp_apply(const char *plan, const struct elp_opts *o, struct elp_stats *st);

/* Parse a method name (NULL or empty: the default, pread); -1 if unknown. */
int elp_method(const char *name);

#endif
