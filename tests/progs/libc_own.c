/* runtime/pd_libc.c's routines, compiled into this program (which then calls them, not
 * libc's), against a byte loop written here or libc's own (dlsym RTLD_NEXT): every
 * length up to past the arch's long-copy threshold, at every alignment, overlapping
 * both ways; formats, numbers, sorting.  Prints "ok" or the first differences. */
#define _GNU_SOURCE
#include "pd_libc.c"

#include <dlfcn.h>

static int fails;
#define CHECK(cond, ...)                                        \
    do {                                                        \
        if (!(cond) && fails++ < 5) {                           \
            dprintf(1, "FAIL %s:%d: ", __FILE__, __LINE__);     \
            dprintf(1, __VA_ARGS__);                            \
            dprintf(1, "\n");                                   \
        }                                                       \
    } while (0)

static unsigned char buf[2048], ref[2048];

static void fill_pattern(unsigned char *b, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        b[i] = (unsigned char)(i * 31 + seed);
}

static void ref_move(unsigned char *b, size_t d, size_t s, size_t n)
{
    unsigned char tmp[2048];
    for (size_t i = 0; i < n; i++)
        tmp[i] = b[s + i];
    for (size_t i = 0; i < n; i++)
        b[d + i] = tmp[i];
}

static int sign(int v) { return v < 0 ? -1 : v > 0; }

static int cmp_int(const void *x, const void *y)
{
    int a = *(const int *)x, b = *(const int *)y;
    return a < b ? -1 : a > b;
}

/* libc's vsnprintf, called with a variadic list of ours */
static int call_libc(int (*fn)(char *, size_t, const char *, va_list), char *dst, size_t cap,
                     const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = fn(dst, cap, fmt, ap);
    va_end(ap);
    return n;
}

static int (*libc_vsnprintf)(char *, size_t, const char *, va_list);
static int (*libc_memcmp)(const void *, const void *, size_t);

static void check_memory(void)
{
    size_t lens[] = {0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 24, 31, 32, 33, 47, 48, 63, 64,
                     65, 100, 127, 128, 255, 256, 511, 512, 513, 700, 900};
    for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
        size_t n = lens[li];
        for (size_t so = 0; so < 16; so++)
            for (size_t doff = 0; doff < 40; doff += (doff < 32 ? 1 : 7)) {
                /* dst within 16 bytes of src either way (overlapping), or past it */
                size_t s = 64 + so, d = s + doff - 16 + (doff >= 32 ? n : 0);
                fill_pattern(buf, sizeof buf, (unsigned)(n + so));
                fill_pattern(ref, sizeof ref, (unsigned)(n + so));
                memmove(buf + d, buf + s, n);
                ref_move(ref, d, s, n);
                CHECK(libc_memcmp(buf, ref, sizeof buf) == 0, "memmove n=%zu s=%zu d=%zu",
                      n, s, d);
                size_t far = 1100 + doff;
                CHECK(memcpy(buf + far, buf + s, n) == buf + far, "memcpy's value");
                ref_move(ref, far, s, n);
                CHECK(libc_memcmp(buf, ref, sizeof buf) == 0, "memcpy n=%zu s=%zu", n, s);
                CHECK(mempcpy(buf + far, buf + s, n) == buf + far + n, "mempcpy's value");
                memset(buf + d, 0xa5, n);
                for (size_t i = 0; i < n; i++)
                    ref[d + i] = 0xa5;
                CHECK(libc_memcmp(buf, ref, sizeof buf) == 0, "memset n=%zu d=%zu", n, d);
            }
    }
}

static void check_strings(void)
{
    for (size_t off = 0; off < 16; off++)
        for (size_t n = 0; n < 80; n++) {
            char *str = (char *)buf + off;
            for (size_t i = 0; i < n; i++)
                str[i] = (char)('a' + i % 26);
            str[n] = 0;
            str[n + 1] = 'z';
            CHECK(strlen(str) == n, "strlen n=%zu off=%zu", n, off);
            for (size_t max = 0; max < 90; max += 3)
                CHECK(strnlen(str, max) == (n < max ? n : max), "strnlen %zu %zu", n, max);
            CHECK(strchrnul(str, 'c') == (n > 2 ? str + 2 : str + n), "strchrnul");
            CHECK(strchr(str, 0) == str + n, "strchr of 0");
            CHECK(strrchr(str, 'a') == (n ? str + ((n - 1) / 26) * 26 : NULL), "strrchr %zu",
                  n);
        }
    const char *words[] = {"", "a", "ab", "abc", "abd", "b", "\xff", "abcdefghijklmnop"};
    for (size_t i = 0; i < 8; i++)
        for (size_t j = 0; j < 8; j++) {
            const unsigned char *x = (const void *)words[i], *y = (const void *)words[j];
            size_t k = 0;
            while (x[k] && x[k] == y[k])
                k++;
            int want = sign(x[k] - y[k]);
            CHECK(sign(strcmp(words[i], words[j])) == want, "strcmp %zu %zu", i, j);
            CHECK(sign(strncmp(words[i], words[j], 2)) == (k >= 2 ? 0 : want),
                  "strncmp %zu %zu", i, j);
            CHECK(sign(memcmp(words[i], words[j], 1)) ==
                  sign(libc_memcmp(words[i], words[j], 1)), "memcmp %zu %zu", i, j);
            CHECK((strstr(words[i], words[j]) != NULL) ==
                  (memmem(words[i], strlen(words[i]), words[j], strlen(words[j])) != NULL),
                  "strstr %zu %zu", i, j);
        }
}

/* every conversion the runtime uses, against libc's */
static void check_formats(void)
{
    static const char *fmts[] = {
        "%s", "[%10s]", "[%-10s]", "%.3s", "%.*s", "%d", "%5d", "%-5d|", "%05d", "%+d",
        "% d", "%.3d", "%.0d", "%u", "%x", "%X", "%#x", "%#X", "%08X", "%04X", "%#lo", "%o",
        "%#o", "%lx", "%ld", "%lld", "%llx", "%#llx", "%zu", "%p", "%c", "%3d", "%.2d",
        "%02x", "%03o", "%%", "a%sb%dc", "%hd", "%hhu", "%-#8x|", "%*d", "%-*d|"};
    long long vals[] = {0, 1, -1, 7, 42, -42, 255, 256, 65535, 65536, 1234567,
                        2147483647, -2147483647 - 1, 4294967295LL, (long long)1 << 40,
                        -((long long)1 << 40), 0x7fffffffffffffffLL};
    const char *strs[] = {"", "x", "hello world", "a string longer than ten"};
    char mine[256], theirs[256];
    for (size_t f = 0; f < sizeof fmts / sizeof *fmts; f++)
        for (size_t v = 0; v < sizeof vals / sizeof *vals; v++)
            for (size_t cap = 0; cap < 40; cap += 13) {
                const char *fmt = fmts[f];
                long long x = vals[v];
                const char *str = strs[v % 4];
                size_t room = cap ? cap : sizeof mine;
                int a, b;
#define BOTH(...)                                                        \
    do {                                                                 \
        a = snprintf(mine, room, __VA_ARGS__);                           \
        b = call_libc(libc_vsnprintf, theirs, room, __VA_ARGS__);        \
    } while (0)
                if (strstr(fmt, "%s") && strstr(fmt, "%d"))
                    BOTH(fmt, str, (int)x);
                else if (strstr(fmt, "s") && strstr(fmt, "*"))
                    BOTH(fmt, (int)(x & 7), str);
                else if (strstr(fmt, "s"))
                    BOTH(fmt, str);
                else if (strstr(fmt, "*"))
                    BOTH(fmt, (int)(x % 12), (int)x);
                else if (strstr(fmt, "ll"))
                    BOTH(fmt, x);
                else if (strstr(fmt, "l") || strstr(fmt, "z"))
                    BOTH(fmt, (long)x);
                else if (strstr(fmt, "p"))
                    BOTH(fmt, (void *)(uintptr_t)x);
                else if (strstr(fmt, "%%"))
                    BOTH(fmt, 0);
                else
                    BOTH(fmt, (int)x);
                CHECK(a == b && strcmp(mine, theirs) == 0,
                      "format %s of %lld cap %zu: [%s] %d, libc [%s] %d", fmt, x, cap, mine,
                      a, theirs, b);
            }
}

static void check_numbers(void)
{
    long long (*libc_strtoll)(const char *, char **, int) = dlsym(RTLD_NEXT, "strtoll");
    unsigned long long (*libc_strtoull)(const char *, char **, int) =
        dlsym(RTLD_NEXT, "strtoull");
    long (*libc_strtol)(const char *, char **, int) = dlsym(RTLD_NEXT, "strtol");
    const char *nums[] = {"0", "12", "-12", "  +7x", "0x1f", "0X1F", "017", "0x", "-",
                          "", "abc", "9223372036854775807", "9223372036854775808",
                          "-9223372036854775808", "-9223372036854775809",
                          "18446744073709551615", "18446744073709551616", "2147483648",
                          "-2147483649", "zz", "0b1", "\t\n 42", "-0x10"};
    int bases[] = {0, 10, 16, 8, 36, 2};
    for (size_t i = 0; i < sizeof nums / sizeof *nums; i++)
        for (size_t b = 0; b < sizeof bases / sizeof *bases; b++) {
            char *e1, *e2;
            errno = 0;
            long long m = strtoll(nums[i], &e1, bases[b]);
            int er1 = errno;
            errno = 0;
            long long t = libc_strtoll(nums[i], &e2, bases[b]);
            CHECK(m == t && e1 == e2 && er1 == errno, "strtoll %s %d: %lld %lld",
                  nums[i], bases[b], m, t);
            errno = 0;
            unsigned long long um = strtoull(nums[i], &e1, bases[b]);
            er1 = errno;
            errno = 0;
            unsigned long long ut = libc_strtoull(nums[i], &e2, bases[b]);
            CHECK(um == ut && e1 == e2 && er1 == errno, "strtoull %s %d", nums[i], bases[b]);
            errno = 0;
            long lm = strtol(nums[i], &e1, bases[b]);
            er1 = errno;
            errno = 0;
            long lt = libc_strtol(nums[i], &e2, bases[b]);
            CHECK(lm == lt && e1 == e2 && er1 == errno, "strtol %s %d", nums[i], bases[b]);
        }
}

static void check_sort(void)
{
    for (size_t n = 0; n < 200; n += 7) {
        int a[200];
        for (size_t i = 0; i < n; i++)
            a[i] = (int)((i * 7919) % 101) - 50;
        qsort(a, n, sizeof *a, cmp_int);
        for (size_t i = 1; i < n; i++)
            CHECK(a[i - 1] <= a[i], "qsort n=%zu", n);
    }
}

int main(void)
{
    libc_vsnprintf = dlsym(RTLD_NEXT, "vsnprintf");
    libc_memcmp = dlsym(RTLD_NEXT, "memcmp");
    if (!libc_vsnprintf || !libc_memcmp) {
        dprintf(1, "no libc symbols\n");
        return 1;
    }
    check_memory();
    check_strings();
    check_formats();
    check_numbers();
    check_sort();
    dprintf(1, fails ? "%d failures\n" : "ok\n", fails);
    return fails != 0;
}
