/* loadprobe: relocs/loadprobe.py in C, for libraries of another machine (arm64), run
   under its emulator (qemu-aarch64 -L ROOT loadprobe ...), and for a system root whose
   python3 has no ctypes (chroot ROOT elflayout-loadprobe ...), by relocs/realload.py:

     loadprobe dlopen LIB
         dlopen LIB (RTLD_GLOBAL | RTLD_NOW); exit 0, or print ld.so's message, exit 1.
     loadprobe state LIB RANGES OUT PAD
         after malloc(PAD), dlopen LIB (RTLD_LOCAL | RTLD_NOW) and write to OUT the bytes
         at LIB's link-time ranges RANGES (JSON [[lo, hi], ...]); print {"base": B}, or
         {"error": MESSAGE} and exit 1. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef OLD_SYMBOLS
/* The build for this machine's roots runs under the root's own, older, ld.so and glibc:
   linked against the oldest symbol versions only. dlopen/dlerror moved into libc.so.6 in
   glibc 2.34 (GLIBC_2.34); the base versions are found in an older glibc's libdl.so.2,
   a needed library of this build too. glibc >= 2.34's crt1.o calls
   __libc_start_main@GLIBC_2.34: our own entry calls the base version (no init/fini
   functions: this program has no constructors). */
#if defined(__x86_64__)
#define BASE_VERSION "GLIBC_2.2.5"
__asm__(".symver __libc_start_main, __libc_start_main@" BASE_VERSION "\n"
        ".text\n.globl _start\n.type _start, @function\n_start:\n"
        "  xor %ebp, %ebp\n  mov %rdx, %r9\n  pop %rsi\n  mov %rsp, %rdx\n  and $-16, %rsp\n"
        "  push %rax\n  push %rsp\n  xor %r8d, %r8d\n  xor %ecx, %ecx\n  lea main(%rip), %rdi\n"
        "  call *__libc_start_main@GOTPCREL(%rip)\n  hlt\n");
#elif defined(__aarch64__)
#define BASE_VERSION "GLIBC_2.17"
#endif
#ifdef BASE_VERSION
__asm__(".symver dlopen, dlopen@" BASE_VERSION);
__asm__(".symver dlerror, dlerror@" BASE_VERSION);
#endif
#endif

static void json_error(const char *msg)
{
    printf("{\"error\": \"");
    for (const char *p = msg; *p; p++) {
        if (*p == '"' || *p == '\\') putchar('\\');
        if ((unsigned char)*p >= 0x20) putchar(*p);
    }
    printf("\"}\n");
}

void *volatile keep;  /* the PAD block stays allocated */

static int state(const char *lib, const char *ranges, const char *out, long pad)
{
    if (pad > 0) keep = malloc(pad);
    void *h = dlopen(lib, RTLD_LOCAL | RTLD_NOW);
    if (!h) { json_error(dlerror()); return 1; }
    struct link_map *lm = h;  /* glibc's handle is the object's link_map: l_addr is the base */
    FILE *f = fopen(out, "wb");
    if (!f) { json_error("cannot write the state file"); return 1; }
    const char *p = ranges;
    for (;;) {  /* the numbers, in pairs, whatever the brackets and commas */
        while (*p && (*p < '0' || *p > '9')) p++;
        if (!*p) break;
        unsigned long long lo = strtoull(p, (char **)&p, 10);
        while (*p && (*p < '0' || *p > '9')) p++;
        if (!*p) break;
        unsigned long long hi = strtoull(p, (char **)&p, 10);
        if (hi > lo && fwrite((char *)lm->l_addr + lo, 1, hi - lo, f) != hi - lo) {
            json_error("short write of the state file");
            return 1;
        }
    }
    fclose(f);
    printf("{\"base\": %llu}\n", (unsigned long long)lm->l_addr);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "dlopen")) {
        if (dlopen(argv[2], RTLD_GLOBAL | RTLD_NOW)) return 0;
        printf("%s\n", dlerror());
        return 1;
    }
    if (argc == 6 && !strcmp(argv[1], "state"))
        return state(argv[2], argv[3], argv[4], atol(argv[5]));
    fprintf(stderr, "usage: loadprobe dlopen LIB | state LIB RANGES OUT PAD\n");
    return 2;
}
