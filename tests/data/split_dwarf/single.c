/* All code in .text: the unit is one DW_AT_low_pc/DW_AT_high_pc range. */
#include "single.h"
int g;
static int sq(int x) { return x * x; }
__attribute__((noinline)) int f1(int a, int b) {
  int s = 0;
  for (int i = 0; i < a; i++) { int t = sq(i) + b; if (t > 10) { s += t; } else { s -= i; } }
  return s;
}
#define SINGLE_LATER
#include "single.h"
__attribute__((noinline)) int f2(int k) {
  switch (k) { case 0: return 3; case 1: return 5; case 2: return 7 * k; case 3: return k - 9; case 4: return 11; case 5: return g; default: return -1; }
}
__attribute__((noinline)) int f3(int argc) { int r = f2(argc) + f1(argc, 3); g = r; return h1(r) + h2(g); }
