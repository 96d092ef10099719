/* Driver of every idiom: each .s defines `int idiom(int k)`. */
#include <stdio.h>
int idiom(int k);
int main(void) {
    printf("%d %d %d %d\n", idiom(0), idiom(1), idiom(2), idiom(3));
    return 0;
}
