/* The real-load check's child in C, for a root without a python3 with ctypes
 * (tools/elflayout/relocs/realload.py; same commands and output as loadprobe.py):
 *
 *   elflayout-loadprobe dlopen LIB
 *       dlopen LIB (RTLD_GLOBAL | RTLD_NOW); exit 0, or print ld.so's message and exit 1.
 *   elflayout-loadprobe state LIB RANGES OUT PAD
 *       malloc(PAD), dlopen LIB (RTLD_LOCAL | RTLD_NOW), write to OUT the bytes at LIB's
 *       link-time RANGES ("[[lo, hi], ...]") and print {"base": B}; or {"error": MSG}, exit 1.
 *
 * It runs under the root's own ld.so and glibc, so it is linked against the oldest
 * symbol versions only: dlopen/dlerror moved into libc.so.6 in glibc 2.34 (GLIBC_2.34);
 * the GLIBC_2.2.5 (x86-64) / GLIBC_2.17 (aarch64) ones are found in an older glibc's
 * libdl.so.2, which is therefore a needed library too. No /proc: a bare chroot has none.
 */
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#define BASE_VERSION "GLIBC_2.2.5"
#elif defined(__aarch64__)
#define BASE_VERSION "GLIBC_2.17"
#endif
#ifdef BASE_VERSION
__asm__(".symver dlopen, dlopen@" BASE_VERSION);
__asm__(".symver dlerror, dlerror@" BASE_VERSION);
#endif

#ifdef OWN_START
/* glibc >= 2.34's crt1.o calls __libc_start_main@GLIBC_2.34: our own entry calls the
 * base version (no init/fini functions: this program has no constructors). */
__asm__(".symver __libc_start_main, __libc_start_main@" BASE_VERSION "\n"
        ".text\n.globl _start\n.type _start, @function\n_start:\n"
        "  xor %ebp, %ebp\n  mov %rdx, %r9\n  pop %rsi\n  mov %rsp, %rdx\n  and $-16, %rsp\n"
        "  push %rax\n  push %rsp\n  xor %r8d, %r8d\n  xor %ecx, %ecx\n  lea main(%rip), %rdi\n"
        "  call *__libc_start_main@GOTPCREL(%rip)\n  hlt\n");
#endif

static void json_error(const char *msg)
{
    putchar('{');
    fputs("\"error\": \"", stdout);
    for (const char *p = msg; *p; p++) {
        if (*p == '"' || *p == '\\')
            putchar('\\');
        if ((unsigned char)*p >= 0x20)
            putchar(*p);
    }
    puts("\"}");
}

static int cmd_dlopen(const char *path)
{
    if (!dlopen(path, RTLD_GLOBAL | RTLD_NOW)) {
        puts(dlerror());
        return 1;
    }
    return 0;
}

static int cmd_state(const char *path, const char *ranges, const char *out, long pad)
{
    static void *keep;
    if (pad > 0)
        keep = malloc(pad); /* shifts the C heap: bytes that move with it are heap addresses */
    struct link_map *h = dlopen(path, RTLD_LOCAL | RTLD_NOW);
    if (!h) {
        json_error(dlerror());
        return 1;
    }
    FILE *f = fopen(out, "wb");
    if (!f) {
        json_error("cannot create the output file");
        return 1;
    }
    /* ranges: JSON [[lo, hi], ...]: the numbers in pairs */
    const char *p = ranges;
    char *end;
    for (;;) {
        while (*p && (*p < '0' || *p > '9'))
            p++;
        if (!*p)
            break;
        unsigned long lo = strtoul(p, &end, 10);
        p = end;
        while (*p && (*p < '0' || *p > '9'))
            p++;
        unsigned long hi = strtoul(p, &end, 10);
        p = end;
        if (hi < lo || fwrite((const char *)h->l_addr + lo, 1, hi - lo, f) != hi - lo) {
            json_error("bad range or short write");
            return 1;
        }
    }
    if (fclose(f) != 0) {
        json_error("cannot write the output file");
        return 1;
    }
    printf("{\"base\": %lu}\n", (unsigned long)h->l_addr);
    (void)keep;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "dlopen") == 0)
        return cmd_dlopen(argv[2]);
    if (argc == 6 && strcmp(argv[1], "state") == 0)
        return cmd_state(argv[2], argv[3], argv[4], strtol(argv[5], NULL, 10));
    fputs("usage: elflayout-loadprobe dlopen LIB | state LIB RANGES OUT PAD\n", stderr);
    return 2;
}
