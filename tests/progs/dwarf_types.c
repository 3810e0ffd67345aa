/* Parameters and locals of many C types, for `-L`'s `$name:type` listing. */
#include <stdarg.h>

struct foo { int a; };
enum e { A, B };
union u { int i; float f; };
typedef struct { int q; } anon_t;

__attribute__((noinline)) int types(const char *s, int (*cb)(int, char), void (*fn)(void),
                                    int (**pp)(const struct foo *, ...), volatile int v,
                                    int *restrict rp, anon_t an, union u un, enum e en,
                                    const struct foo *cf, void *vp, char buf[4],
                                    int (*const cfp)(void), ...)
{
    va_list ap;
    int arr[3] = {1, 2, 3};
    va_start(ap, cfp);
    int x = va_arg(ap, int);
    va_end(ap);
    return x + arr[v] + (s != 0) + (cb != 0) + (fn != 0) + (pp != 0) + *rp + an.q + un.i + en +
           cf->a + (vp != 0) + buf[0] + (cfp != 0);
}

int main(void)
{
    struct foo f = {1};
    int r = 0;
    anon_t an = {2};
    union u un = {3};
    return types("x", 0, 0, 0, 0, &r, an, un, B, &f, 0, "abc", 0, 5) == 99;
}
