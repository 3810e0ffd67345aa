/* Function probe target: longjmp out of probed frames. */
#include <setjmp.h>
#include <stdio.h>

static jmp_buf jb;

__attribute__((noipa)) void dive(int n)
{
    if (n == 0)
        longjmp(jb, 1);
    dive(n - 1);
    __asm__ volatile("");
}

__attribute__((noipa)) int after(int x) { return x + 1; }

int main(void)
{
    int s = 0;
    for (int i = 0; i < 3; i++) {
        if (!setjmp(jb))
            dive(5);
        s += after(i);
    }
    printf("s=%d\n", s);
    return 4;
}
