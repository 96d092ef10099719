/*
 * elflayout-preload: apply a preload plan, then exec the program.
 *
 *   elflayout-preload [--method pread|readahead|fadvise] [--background] [--map FROM=TO]
 *                     [--verbose] PLAN -- CMD [ARG ...]
 *
 * Foreground (default): the plan's reads are issued (pread: completed) before exec, so
 * the program starts with its pages in the page cache or already queued in file-offset
 * order.  --background: a detached grandchild applies the plan while the program starts
 * at once (it is reparented to init, so the program never sees an extra child).
 * A bad or missing plan costs one line on stderr; the program always runs.
 */
#define _GNU_SOURCE
#include "preload.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void usage(void)
{
	fprintf(stderr, "usage: elflayout-preload [--method pread|readahead|fadvise] [--background] "
			"[--map FROM=TO] [--verbose] PLAN -- CMD [ARG ...]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	struct elp_opts o = {.method = ELP_PREAD, .map = getenv(ELP_ENV_MAP)};
	int background = 0, i = 1;
	const char *plan = NULL;
	for (; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--")) {
			i++;
			break;
		} else if (!strcmp(a, "--method") && i + 1 < argc) {
			int m = elp_method(argv[++i]);
			if (m < 0) {
				fprintf(stderr, "elflayout-preload: unknown --method %s\n", argv[i]);
				usage();
			}
			o.method = m;
		} else if (!strcmp(a, "--map") && i + 1 < argc) {
			o.map = argv[++i];
		} else if (!strcmp(a, "--background")) {
			background = 1;
		} else if (!strcmp(a, "--verbose")) {
			o.verbose = 1;
		} else if (a[0] == '-' && a[1]) {
			usage();
		} else if (!plan) {
			plan = a;
		} else {
			break;  /* no "--": the command starts here */
		}
	}
	if (!plan || i >= argc)
		usage();
	if (!background) {
		elp_apply(plan, &o, NULL);
	} else {
		pid_t p = fork();
		if (p == 0) {
			if (fork() == 0) {
				elp_apply(plan, &o, NULL);
				_exit(0);
			}
			_exit(0);
		}
		if (p > 0)
			waitpid(p, NULL, 0);
	}
	execvp(argv[i], argv + i);
	fprintf(stderr, "elflayout-preload: %s: %s\n", argv[i], strerror(errno));
	return errno == ENOENT ? 127 : 126;
}
