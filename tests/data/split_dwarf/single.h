/* Included twice by single.c: its functions come before and after the .c file's own. */
#ifndef SINGLE_LATER
static __attribute__((noinline)) int h1(int x) { int y = x * 7; if (y > 40) y -= x; return y + 1; }
#else
__attribute__((noinline)) int h2(int x) { return x * 3 + g; }
#endif
