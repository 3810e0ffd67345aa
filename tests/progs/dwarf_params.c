/* Function parameters by name (DWARF) and guru-mode writes.
 * Built with -g at -O0 and -O2, m64 and m32, by tests/test_dwarf.py and
 * tests/test_guru.py.  `./dwarf_params N` calls add(i - 1, 1000 * i) for i < N,
 * fill() once, then show(&v) which prints v and shout(word) which prints word:
 * guru probes on show and shout can change them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct pair {
    long lo, hi;
};

#define PROBED __attribute__((noinline, noclone))

PROBED long add(int a, long b)
{
    return a + b;
}

PROBED int fill(char *buf, unsigned short n, const char *name)
{
    snprintf(buf, n, "%s", name);
    return (int)strlen(buf);
}

/* a double and a struct by value: the ABI's integer-argument order does not
 * give `z` here on x86-64 (the struct goes in two registers, x in xmm0) */
PROBED long mixed(double x, struct pair p, long z)
{
    return (long)x + p.lo + p.hi + z;
}

PROBED void show(int *p)
{
    printf("value=%d\n", *p);
}

PROBED void shout(char *s)
{
    puts(s);
}

const char greeting[] = "read-only";

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 3;
    long total = 0;
    for (int i = 0; i < n; i++)
        total += add(i - 1, 1000L * i);
    char buf[32];
    int len = fill(buf, 7, "hello world");
    struct pair pr = {2, 3};
    total += mixed(1.5, pr, 4);
    printf("total=%ld buf=%s len=%d greeting=%p\n", total, buf, len, (void *)greeting);
    int v = 5;
    show(&v);
    char word[16] = "quiet";
    shout(word);
    printf("greeting=%s\n", greeting);
    return 0;
}
