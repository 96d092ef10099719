/* raprobe FILE OP...: open FILE the way ld.so does and touch its pages in a given order,
   for the readahead model tests (page-cache tracing records what the kernel reads).
   hdr                  read() the 832-byte ELF header at offset 0
   map:FP0:FP1:VP:PROT  mmap file pages [FP0,FP1) MAP_PRIVATE|MAP_FIXED at virtual page VP of a
                        64 KiB-aligned reservation (fault-around windows as the model aligns them);
                        PROT r, rx or rw
   t:V:FP:K             touch file page FP through mapping V (0-based, in map order): K r load, w store */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <stdint.h>
int main(int argc, char **argv)
{
    int fd = open(argv[1], O_RDONLY | O_CLOEXEC);
    if (fd < 0) { perror(argv[1]); return 2; }
    size_t span = 64UL << 20;
    char *res = mmap(NULL, span + 65536, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    char *base = (char *)(((uintptr_t)res + 65535) & ~(uintptr_t)65535);
    long vstart[64]; long fstart[64]; int nv = 0;
    char buf[4096]; volatile char sink = 0;
    for (int i = 2; i < argc; i++) {
        char *a = argv[i];
        if (!strcmp(a, "hdr")) { if (read(fd, buf, 832) != 832) return 3; }
        else if (!strncmp(a, "map:", 4)) {
            long f0, f1, vp; char prot[8];
            sscanf(a + 4, "%ld:%ld:%ld:%7s", &f0, &f1, &vp, prot);
            int p = PROT_READ | (strchr(prot, 'x') ? PROT_EXEC : 0) | (strchr(prot, 'w') ? PROT_WRITE : 0);
            if (mmap(base + vp * 4096, (f1 - f0) * 4096, p, MAP_PRIVATE | MAP_FIXED, fd, f0 * 4096) == MAP_FAILED) { perror("mmap"); return 3; }
            vstart[nv] = vp; fstart[nv] = f0; nv++;
        } else if (!strncmp(a, "t:", 2)) {
            int v; long fp; char k;
            sscanf(a + 2, "%d:%ld:%c", &v, &fp, &k);
            char *addr = base + (vstart[v] + fp - fstart[v]) * 4096;
            if (k == 'w') *(volatile char *)addr = 1; else sink += *(volatile char *)addr;
        } else { fprintf(stderr, "bad op %s\n", a); return 2; }
    }
    return 0;
}
