/* spin_exec USEC CMD [ARGS...]: busy-wait USEC microseconds of wall time, then exec CMD.
 * Injects a known CPU-bound slowdown in front of a startup (bench_verdicts.py's power
 * study); spinning, not sleeping, so the delay shows in user time as a real one would. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: spin_exec USEC CMD [ARGS...]\n");
        return 2;
    }
    long usec = strtol(argv[1], NULL, 10);
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do
        clock_gettime(CLOCK_MONOTONIC, &t);
    while ((t.tv_sec - t0.tv_sec) * 1000000L + (t.tv_nsec - t0.tv_nsec) / 1000 < usec);
    execvp(argv[2], argv + 2);
    perror(argv[2]);
    return 127;
}
