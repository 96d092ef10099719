/* Two static functions named pick (one per file, as compiled with -DVARIANT=1 and 2) and
   a uniquely named sel, each with a jump table in .rodata that its lea loads. */
#ifndef VARIANT
#define VARIANT 0
#endif
#define CASES(k) \
    case 0: return k + 11 * x; case 1: return k - 7 * x; case 2: return k ^ x; \
    case 3: return k * x + 5; case 4: return k | x; case 5: return (k << 3) - x; \
    case 6: return k + x * x; case 7: return k - x * 13;
#if VARIANT
static __attribute__((noinline)) int pick(int x) { switch (x & 7) { CASES(VARIANT) } return 0; }
#define USER(n) int use_pick_##n(int x) { return pick(x) + 1; }
#if VARIANT == 1
USER(1)
#else
USER(2)
#endif
#else
int sel(int x) { switch (x & 7) { CASES(100) } return 0; }
#endif
