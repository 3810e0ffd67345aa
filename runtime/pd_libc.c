/* The C library's memory, string, number and formatting routines the runtime and the
 * generated code call, defined in the module itself.  Like every runtime symbol they
 * are hidden (-fvisibility=hidden): no other object sees them, and the link binds every
 * call of the module -- the explicit ones and those gcc emits for struct copies and
 * initialisers -- to these, never to libc's.  So a probe on libc's memcpy, strlen,
 * memset, strchrnul (which libc's printf calls), ... counts the program's calls only:
 * pydyn's handlers neither add to it nor re-enter it (a hit inside a handler is
 * skipped).  docs/probe-points.md lists the libc functions the runtime still
 * calls from a handler.
 *
 * Each is general-regs-only (PD_FAST_FN): callable with the program's vector registers
 * live.  Loops that gcc could recognise as a memset or memcpy pass their pointer
 * through an empty asm, and each public name calls private helpers only, so no routine
 * here becomes a call of itself.  Copies, fills and string lengths go a word at a time
 * (tests/progs/libc_own.c checks them against libc's); the rest are plain loops over
 * strings of at most MAXSTRINGLEN bytes. */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pd_arch.h"

#define PD_OPAQUE(p) __asm__("" : "+r"(p))
/* from this length on the arch's string instructions (PD_ARCH_REP_STRING) copy and fill:
 * below it their start-up costs more than the word loop */
#define PD_REP_MIN 512

/* ---- memory ------------------------------------------------------------------ */

typedef uint64_t __attribute__((may_alias, aligned(1))) pd_u64u;
typedef uint32_t __attribute__((may_alias, aligned(1))) pd_u32u;

#define PD_LD64(p) (*(const pd_u64u *)(const void *)(p))
#define PD_ST64(p, v) (*(pd_u64u *)(void *)(p) = (v))

/* memmove for any overlap: up to 32 bytes as overlapping words all loaded before any is
 * stored; longer, 16 bytes a step in the direction that reads each word before it is
 * overwritten, the other end's 16 bytes loaded first. */
static inline __attribute__((always_inline)) PD_FAST_FN void *
pd_move(void *dst, const void *src, size_t n)
{
    unsigned char *d = dst;
    const unsigned char *s = src;
    if (n <= 16) {
        if (n >= 8) {
            uint64_t a = PD_LD64(s), b = PD_LD64(s + n - 8);
            PD_ST64(d, a);
            PD_ST64(d + n - 8, b);
        } else if (n >= 4) {
            uint32_t a = *(const pd_u32u *)s, b = *(const pd_u32u *)(s + n - 4);
            *(pd_u32u *)d = a;
            *(pd_u32u *)(d + n - 4) = b;
        } else if (n) {
            unsigned char a = s[0], b = s[n / 2], c = s[n - 1];
            d[0] = a;
            d[n / 2] = b;
            d[n - 1] = c;
        }
        return dst;
    }
    if (n <= 32) {
        uint64_t a = PD_LD64(s), b = PD_LD64(s + 8);
        uint64_t y = PD_LD64(s + n - 16), z = PD_LD64(s + n - 8);
        PD_ST64(d, a);
        PD_ST64(d + 8, b);
        PD_ST64(d + n - 16, y);
        PD_ST64(d + n - 8, z);
        return dst;
    }
    if ((uintptr_t)d - (uintptr_t)s >= n) { /* d before s, or no overlap: forward */
#ifdef PD_ARCH_REP_STRING
        if (n >= PD_REP_MIN) {
            pd_cpu_copy_forward(d, s, n);
            return dst;
        }
#endif
        uint64_t y = PD_LD64(s + n - 16), z = PD_LD64(s + n - 8);
        for (size_t i = 0; i + 16 < n; i += 16) {
            PD_OPAQUE(d);
            uint64_t a = PD_LD64(s + i), b = PD_LD64(s + i + 8);
            PD_ST64(d + i, a);
            PD_ST64(d + i + 8, b);
        }
        PD_ST64(d + n - 16, y);
        PD_ST64(d + n - 8, z);
    } else {
        uint64_t a = PD_LD64(s), b = PD_LD64(s + 8);
        for (size_t i = n; i > 16; i -= 16) {
            PD_OPAQUE(d);
            uint64_t y = PD_LD64(s + i - 16), z = PD_LD64(s + i - 8);
            PD_ST64(d + i - 16, y);
            PD_ST64(d + i - 8, z);
        }
        PD_ST64(d, a);
        PD_ST64(d + 8, b);
    }
    return dst;
}

PD_FAST_FN void *memmove(void *dst, const void *src, size_t n)
{
    return pd_move(dst, src, n);
}

PD_FAST_FN void *memcpy(void *restrict dst, const void *restrict src, size_t n)
{
    return pd_move(dst, src, n);
}

PD_FAST_FN void *mempcpy(void *restrict dst, const void *restrict src, size_t n)
{
    return (char *)pd_move(dst, src, n) + n;
}

static inline __attribute__((always_inline)) PD_FAST_FN void *
pd_fill(void *dst, int ch, size_t n)
{
    unsigned char *d = dst;
    uint64_t w = (uint64_t)(unsigned char)ch * 0x0101010101010101ull;
    if (n < 8) {
        if (n >= 4) {
            *(pd_u32u *)d = (uint32_t)w;
            *(pd_u32u *)(d + n - 4) = (uint32_t)w;
        } else if (n) {
            d[0] = d[n / 2] = d[n - 1] = (unsigned char)ch;
        }
        return dst;
    }
#ifdef PD_ARCH_REP_STRING
    if (n >= PD_REP_MIN) {
        pd_cpu_fill(d, (unsigned char)ch, n);
        return dst;
    }
#endif
    if (n <= 16) {
        PD_ST64(d, w);
        PD_ST64(d + n - 8, w);
        return dst;
    }
    for (size_t i = 0; i + 16 < n; i += 16) {
        PD_OPAQUE(d);
        PD_ST64(d + i, w);
        PD_ST64(d + i + 8, w);
    }
    PD_ST64(d + n - 16, w);
    PD_ST64(d + n - 8, w);
    return dst;
}

PD_FAST_FN void *memset(void *dst, int ch, size_t n)
{
    return pd_fill(dst, ch, n);
}

static PD_FAST_FN int pd_compare(const void *a, const void *b, size_t n)
{
    const unsigned char *x = a, *y = b;
    for (size_t i = 0; i < n; i++)
        if (x[i] != y[i])
            return x[i] - y[i];
    return 0;
}

PD_FAST_FN int memcmp(const void *a, const void *b, size_t n)
{
    return pd_compare(a, b, n);
}

PD_FAST_FN int bcmp(const void *a, const void *b, size_t n)
{
    return pd_compare(a, b, n);
}

PD_FAST_FN void *memchr(const void *s, int ch, size_t n)
{
    const unsigned char *p = s;
    for (size_t i = 0; i < n; i++)
        if (p[i] == (unsigned char)ch)
            return (void *)(p + i);
    return NULL;
}

/* ---- strings ------------------------------------------------------------------ */

/* The length of s, at most max, a word at a time: the first word as it lies unless it
 * crosses a page, then aligned words, none across a page (what is read past the NUL
 * or max lies in a page the string uses).  A word's lowest flagged byte is its first
 * zero (flags above a zero are false only): a little-endian count of trailing zeros. */
#define PD_ONES ((uintptr_t)-1 / 0xff)
#define PD_HIGHS (PD_ONES << 7)
#define PD_ZEROS(w) (((w) - PD_ONES) & ~(w) & PD_HIGHS)
typedef uintptr_t __attribute__((may_alias)) pd_word;
typedef uintptr_t __attribute__((may_alias, aligned(1))) pd_word_u;

static inline __attribute__((always_inline)) PD_FAST_FN size_t
pd_nlen(const char *s, size_t max)
{
    const size_t w = sizeof(pd_word);
    size_t n;
    if (((uintptr_t)s & 4095) <= 4096 - w) {
        uintptr_t z = PD_ZEROS(*(const pd_word_u *)(const void *)s);
        if (z) {
            n = (size_t)__builtin_ctzl(z) / 8;
            return n < max ? n : max;
        }
        n = w - ((uintptr_t)s & (w - 1));
    } else {
        for (n = 0; ((uintptr_t)(s + n) & (w - 1)) && n < max; n++)
            if (!s[n])
                return n;
    }
    for (; n < max; n += w) {
        uintptr_t z = PD_ZEROS(*(const pd_word *)(const void *)(s + n));
        if (z) {
            n += (size_t)__builtin_ctzl(z) / 8;
            break;
        }
    }
    return n < max ? n : max;
}

static PD_FAST_FN size_t pd_len(const char *s)
{
    return pd_nlen(s, (size_t)-1);
}

PD_FAST_FN size_t strlen(const char *s)
{
    return pd_len(s);
}

PD_FAST_FN size_t strnlen(const char *s, size_t max)
{
    return pd_nlen(s, max);
}

PD_FAST_FN int strcmp(const char *a, const char *b)
{
    const unsigned char *x = (const unsigned char *)a, *y = (const unsigned char *)b;
    while (*x && *x == *y)
        x++, y++;
    return *x - *y;
}

static PD_FAST_FN int pd_ncompare(const char *a, const char *b, size_t n)
{
    const unsigned char *x = (const unsigned char *)a, *y = (const unsigned char *)b;
    for (size_t i = 0; i < n; i++) {
        if (x[i] != y[i] || !x[i])
            return x[i] - y[i];
    }
    return 0;
}

PD_FAST_FN int strncmp(const char *a, const char *b, size_t n)
{
    return pd_ncompare(a, b, n);
}

static PD_FAST_FN char *pd_chr(const char *s, int ch)
{
    for (;; s++) {
        if (*s == (char)ch)
            return (char *)s;
        if (!*s)
            return NULL;
    }
}

PD_FAST_FN char *strchr(const char *s, int ch)
{
    return pd_chr(s, ch);
}

static PD_FAST_FN char *pd_chrnul(const char *s, int ch)
{
    while (*s && *s != (char)ch)
        s++;
    return (char *)s;
}

PD_FAST_FN char *strchrnul(const char *s, int ch)
{
    return pd_chrnul(s, ch);
}

PD_FAST_FN char *strrchr(const char *s, int ch)
{
    const char *found = NULL;
    for (;; s++) {
        if (*s == (char)ch)
            found = s;
        if (!*s)
            return (char *)found;
    }
}

PD_FAST_FN size_t strcspn(const char *s, const char *reject)
{
    size_t n = 0;
    while (s[n] && !pd_chr(reject, s[n]))
        n++;
    return n;
}

PD_FAST_FN size_t strspn(const char *s, const char *accept)
{
    size_t n = 0;
    while (s[n] && pd_chr(accept, s[n]))
        n++;
    return n;
}

PD_FAST_FN char *strstr(const char *hay, const char *needle)
{
    size_t n = pd_len(needle);
    for (; *hay; hay++)
        if (pd_ncompare(hay, needle, n) == 0)
            return (char *)hay;
    return n ? NULL : (char *)hay;
}

static PD_FAST_FN char *pd_stpcpy(char *dst, const char *src)
{
    size_t n = pd_len(src);
    pd_move(dst, src, n + 1);
    return dst + n;
}

PD_FAST_FN char *stpcpy(char *restrict dst, const char *restrict src)
{
    return pd_stpcpy(dst, src);
}

PD_FAST_FN char *strcpy(char *restrict dst, const char *restrict src)
{
    pd_stpcpy(dst, src);
    return dst;
}

PD_FAST_FN char *strcat(char *restrict dst, const char *restrict src)
{
    pd_stpcpy(dst + pd_len(dst), src);
    return dst;
}

PD_FAST_FN char *strncpy(char *restrict dst, const char *restrict src, size_t n)
{
    size_t k = pd_nlen(src, n);
    pd_move(dst, src, k);
    pd_fill(dst + k, 0, n - k);
    return dst;
}

/* ---- numbers ------------------------------------------------------------------- */

static PD_FAST_FN int pd_digit(char ch, int base)
{
    int v = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'z' ? ch - 'a' + 10
            : ch >= 'A' && ch <= 'Z' ? ch - 'A' + 10 : 99;
    return v < base ? v : -1;
}

/* strtoull's parse as C has it: the magnitude (saturated at ULLONG_MAX, *over set),
 * the sign, the end of the number (s itself when there is none). */
static PD_FAST_FN unsigned long long pd_strtox(const char *s, char **end, int base,
                                               int *neg, int *over)
{
    const char *p = s;
    while (*p == ' ' || (*p >= '\t' && *p <= '\r'))
        p++;
    *neg = *p == '-';
    if (*p == '-' || *p == '+')
        p++;
    if ((base == 0 || base == 16) && p[0] == '0' && (p[1] | 32) == 'x' &&
        pd_digit(p[2], 16) >= 0) {
        p += 2;
        base = 16;
    } else if (base == 0)
        base = p[0] == '0' ? 8 : 10;
    unsigned long long v = 0;
    const char *digits = p;
    *over = 0;
    for (int d; base >= 2 && base <= 36 && (d = pd_digit(*p, base)) >= 0; p++) {
        if (v > (ULLONG_MAX - (unsigned)d) / (unsigned)base)
            *over = 1;
        v = *over ? ULLONG_MAX : v * (unsigned)base + (unsigned)d;
    }
    if (end)
        *end = (char *)(p == digits ? s : p);
    return v;
}

static PD_FAST_FN long long pd_strtoll(const char *s, char **end, int base)
{
    int neg, over;
    unsigned long long v = pd_strtox(s, end, base, &neg, &over);
    if (over || v > (unsigned long long)LLONG_MAX + neg) {
        errno = ERANGE;
        return neg ? LLONG_MIN : LLONG_MAX;
    }
    return neg ? (long long)(0 - v) : (long long)v;
}

PD_FAST_FN long long strtoll(const char *restrict s, char **restrict end, int base)
{
    return pd_strtoll(s, end, base);
}

PD_FAST_FN long strtol(const char *restrict s, char **restrict end, int base)
{
    long long v = pd_strtoll(s, end, base);
    if (v > LONG_MAX || v < LONG_MIN) {
        errno = ERANGE;
        return v > 0 ? LONG_MAX : LONG_MIN;
    }
    return (long)v;
}

PD_FAST_FN unsigned long long strtoull(const char *restrict s, char **restrict end, int base)
{
    int neg, over;
    unsigned long long v = pd_strtox(s, end, base, &neg, &over);
    if (over) {
        errno = ERANGE;
        return ULLONG_MAX;
    }
    return neg ? 0 - v : v;
}

/* ---- sorting ------------------------------------------------------------------- */

static PD_FAST_FN void pd_swap(unsigned char *a, unsigned char *b, size_t size)
{
    for (size_t i = 0; i < size; i++) {
        unsigned char t = a[i];
        a[i] = b[i];
        b[i] = t;
    }
}

static PD_FAST_FN void pd_sift(unsigned char *base, size_t root, size_t n, size_t size,
                               int (*cmp)(const void *, const void *))
{
    for (size_t child; (child = 2 * root + 1) < n; root = child) {
        if (child + 1 < n && cmp(base + child * size, base + (child + 1) * size) < 0)
            child++;
        if (cmp(base + root * size, base + child * size) >= 0)
            return;
        pd_swap(base + root * size, base + child * size, size);
    }
}

/* A heap sort: no memory but the array's (libc's merge sort may malloc), O(n log n).
 * Not stable: the runtime's comparisons (foreach's, pd_map.c) order every pair. */
PD_FAST_FN void qsort(void *base, size_t n, size_t size,
                      int (*cmp)(const void *, const void *))
{
    unsigned char *b = base;
    for (size_t i = n / 2; i > 0; i--)
        pd_sift(b, i - 1, n, size, cmp);
    for (size_t end = n; end > 1; end--) {
        pd_swap(b, b + (end - 1) * size, size);
        pd_sift(b, 0, end - 1, size, cmp);
    }
}

/* ---- formatting ------------------------------------------------------------------
 * C's snprintf for what the runtime formats: the flags `-+ #0`, a width and a precision
 * (digits or `*`), the lengths hh h l ll j z t, and the conversions d i u o x X c s p %
 * (glibc's "(nil)" and "(null)" included).  No floating point: no runtime format has
 * one (stap's are formatted by pd_string.c and pd_fp.c). */

struct pd_out {
    char *dst;
    size_t cap, len;   /* len: what the whole output needs, as snprintf returns */
};

static PD_FAST_FN void pd_put(struct pd_out *o, const char *s, size_t n)
{
    if (o->len < o->cap) {
        size_t room = o->cap - 1 - o->len;
        pd_move(o->dst + o->len, s, n < room ? n : room);
    }
    o->len += n;
}

static PD_FAST_FN void pd_pad(struct pd_out *o, char ch, long n)
{
    char chunk[16];
    pd_fill(chunk, ch, sizeof chunk);
    for (; n > 0; n -= (long)sizeof chunk)
        pd_put(o, chunk, n < (long)sizeof chunk ? (size_t)n : sizeof chunk);
}

/* one conversion's body (`body`, n bytes, after a sign or 0x `prefix`) in its field */
static PD_FAST_FN void pd_field(struct pd_out *o, const char *prefix, const char *body,
                                size_t n, long zeros, long width, int left, int zero_fill)
{
    size_t np = pd_len(prefix);
    long pad = width - (long)(np + (size_t)zeros + n);
    if (!left && !zero_fill)
        pd_pad(o, ' ', pad);
    pd_put(o, prefix, np);
    if (!left && zero_fill)
        pd_pad(o, '0', pad);
    pd_pad(o, '0', zeros);
    pd_put(o, body, n);
    if (left)
        pd_pad(o, ' ', pad);
}

static PD_FAST_FN int pd_vformat(char *dst, size_t cap, const char *fmt, va_list ap)
{
    struct pd_out o = {dst, cap, 0};
    while (*fmt) {
        const char *pct = pd_chrnul(fmt, '%');
        pd_put(&o, fmt, (size_t)(pct - fmt));
        if (!*pct)
            break;
        fmt = pct + 1;
        int left = 0, plus = 0, space = 0, alt = 0, zero = 0;
        for (;; fmt++) {
            if (*fmt == '-') left = 1;
            else if (*fmt == '+') plus = 1;
            else if (*fmt == ' ') space = 1;
            else if (*fmt == '#') alt = 1;
            else if (*fmt == '0') zero = 1;
            else break;
        }
        long width = 0, prec = -1;
        if (*fmt == '*') {
            width = va_arg(ap, int);
            if (width < 0)
                left = 1, width = -width;
            fmt++;
        } else
            for (; *fmt >= '0' && *fmt <= '9'; fmt++)
                width = width * 10 + (*fmt - '0');
        if (*fmt == '.') {
            fmt++;
            prec = 0;
            if (*fmt == '*') {
                prec = va_arg(ap, int);
                fmt++;
            } else
                for (; *fmt >= '0' && *fmt <= '9'; fmt++)
                    prec = prec * 10 + (*fmt - '0');
        }
        int size = 0; /* -2 hh, -1 h, 0 int, 1 long, 2 long long, 3 size_t/ptrdiff_t */
        for (;; fmt++) {
            if (*fmt == 'h') size--;
            else if (*fmt == 'l') size = size < 2 ? size + 1 : 2;
            else if (*fmt == 'j' || *fmt == 'q') size = 2;
            else if (*fmt == 'z' || *fmt == 't') size = 3;
            else break;
        }
        char conv = *fmt ? *fmt++ : 0;
        char buf[72];
        char *end = buf + sizeof buf, *p = end;
        switch (conv) {
        case '%':
            pd_put(&o, "%", 1);
            continue;
        case 'c':
            buf[0] = (char)va_arg(ap, int);
            pd_field(&o, "", buf, 1, 0, width, left, 0);
            continue;
        case 's': {
            const char *s = va_arg(ap, const char *);
            if (!s)
                s = prec < 0 || prec >= 6 ? "(null)" : "";
            size_t n = prec < 0 ? pd_len(s) : pd_nlen(s, (size_t)prec);
            pd_field(&o, "", s, n, 0, width, left, 0);
            continue;
        }
        case 'p': {
            uintptr_t v = (uintptr_t)va_arg(ap, void *);
            if (!v) {
                pd_field(&o, "", "(nil)", 5, 0, width, left, 0);
                continue;
            }
            do
                *--p = "0123456789abcdef"[v % 16];
            while (v /= 16);
            pd_field(&o, "0x", p, (size_t)(end - p), 0, width, left, 0);
            continue;
        }
        case 'd': case 'i': case 'u': case 'o': case 'x': case 'X': {
            int is_signed = conv == 'd' || conv == 'i';
            unsigned long long v;
            long long sv = 0;
            if (is_signed) {
                sv = size == 3 ? (long long)va_arg(ap, ptrdiff_t)
                     : size == 2 ? va_arg(ap, long long)
                     : size == 1 ? va_arg(ap, long) : va_arg(ap, int);
                if (size == -1) sv = (short)sv;
                if (size <= -2) sv = (signed char)sv;
                v = sv < 0 ? 0 - (unsigned long long)sv : (unsigned long long)sv;
            } else {
                v = size == 3 ? (unsigned long long)va_arg(ap, size_t)
                    : size == 2 ? va_arg(ap, unsigned long long)
                    : size == 1 ? va_arg(ap, unsigned long) : va_arg(ap, unsigned int);
                if (size == -1) v = (unsigned short)v;
                if (size <= -2) v = (unsigned char)v;
            }
            unsigned base = conv == 'o' ? 8 : conv == 'x' || conv == 'X' ? 16 : 10;
            const char *set = conv == 'X' ? "0123456789ABCDEF" : "0123456789abcdef";
            for (unsigned long long u = v; u; u /= base)
                *--p = set[u % base];
            long n = end - p;
            long zeros = prec > n ? prec - n : 0;
            if (conv == 'o' && alt && zeros == 0 && (n == 0 || *p != '0'))
                zeros = 1;                              /* "%#o": a leading 0 */
            if (v == 0 && prec != 0 && zeros == 0)
                zeros = 1;                              /* "0", but "%.0d" of 0 is "" */
            const char *prefix = is_signed ? (sv < 0 ? "-" : plus ? "+" : space ? " " : "")
                                 : alt && v && conv == 'x' ? "0x"
                                 : alt && v && conv == 'X' ? "0X" : "";
            pd_field(&o, prefix, p, (size_t)n, zeros, width, left, zero && prec < 0);
            continue;
        }
        default: /* not one the runtime uses: shown as written */
            pd_put(&o, pct, (size_t)(fmt - pct));
            continue;
        }
    }
    if (cap)
        dst[o.len < cap ? o.len : cap - 1] = 0;
    return o.len > INT_MAX ? -1 : (int)o.len;
}

PD_FAST_FN int vsnprintf(char *restrict dst, size_t cap, const char *restrict fmt, va_list ap)
{
    return pd_vformat(dst, cap, fmt, ap);
}

PD_FAST_FN int snprintf(char *restrict dst, size_t cap, const char *restrict fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = pd_vformat(dst, cap, fmt, ap);
    va_end(ap);
    return n;
}
