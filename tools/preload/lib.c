/*
 * libelflayout-preload.so: apply the plan named by $ELFLAYOUT_PRELOAD_PLAN inside the
 * program, for programs that cannot be wrapped by the launcher.
 *
 *   LD_AUDIT=libelflayout-preload.so    (earliest: before ld.so maps the program's libraries)
 *   LD_PRELOAD=libelflayout-preload.so  (constructor: after ld.so has mapped and relocated
 *                                        them, so relocation reads are already done)
 *
 * ELFLAYOUT_PRELOAD_METHOD (pread|readahead|fadvise), ELFLAYOUT_PRELOAD_BACKGROUND=1 (a
 * detached thread), ELFLAYOUT_PRELOAD_MAP, ELFLAYOUT_PRELOAD_VERBOSE=1 as for the launcher.
 * The plan variable is removed once read, so child processes do not apply it again.
 */
#define _GNU_SOURCE
#include "preload.h"

#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct elp_opts opts;
static char plan[4096];

static void *worker(void *arg)
{
	(void)arg;
	elp_apply(plan, &opts, NULL);
	return NULL;
}

static void start(void)
{
	const char *p = getenv(ELP_ENV_PLAN);
	if (!p || !*p)
		return;
	if (strlen(p) >= sizeof plan) {
		fprintf(stderr, "elflayout-preload: " ELP_ENV_PLAN ": path of %zu bytes, longer than %zu; "
			"starting without preload\n", strlen(p), sizeof plan - 1);
		unsetenv(ELP_ENV_PLAN);
		return;
	}
	strcpy(plan, p);
	unsetenv(ELP_ENV_PLAN);
	int m = elp_method(getenv(ELP_ENV_METHOD));
	opts.method = m < 0 ? ELP_PREAD : m;
	if (m < 0)
		fprintf(stderr, "elflayout-preload: unknown " ELP_ENV_METHOD " %s; using pread\n",
			getenv(ELP_ENV_METHOD));
	opts.map = getenv(ELP_ENV_MAP);
	const char *v = getenv(ELP_ENV_VERBOSE);
	opts.verbose = v && *v == '1';
	const char *bg = getenv(ELP_ENV_BACKGROUND);
	if (bg && *bg == '1') {
		pthread_t t;
		pthread_attr_t a;
		pthread_attr_init(&a);
		pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
		if (pthread_create(&t, &a, worker, NULL) == 0)
			return;
	}
	worker(NULL);
}

__attribute__((constructor)) static void ctor(void)
{
	start();
}

/* rtld-audit(7) entry: called when ld.so loads the audit module, before the program's
 * own libraries are mapped.  The module runs in its own link namespace; its getenv
 * reads the same environment. */
__attribute__((visibility("default"))) unsigned int la_version(unsigned int version)
{
	(void)version;
	start();
	return LAV_CURRENT;
}
