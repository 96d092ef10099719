#include <stdio.h>
static int sq(int x) { return x * x; }
__attribute__((noinline)) int f1(int a, int b) {
  int s = 0;
  for (int i = 0; i < a; i++) { int t = sq(i) + b; if (t > 10) { s += t; } else { s -= i; } }
  return s;
}
__attribute__((noinline)) int f2(int k) {  /* six cases: a jump table */
  switch (k) { case 0: return 3; case 1: return f1(k, 2); case 2: return 7*k; case 3: return k-9; case 4: return 11; case 5: return puts("x"); default: return -1; }
}
static __attribute__((noinline)) int f3(const char *p) { int n = 0; while (*p) { if (*p == 'a') { int q = f2(n); n += q; } p++; } return n; }
int f4(const char *p) { return f3(p) + f2(3); }
int main(int argc, char **argv) { return f4(argv[0]) + f1(argc, 3); }
