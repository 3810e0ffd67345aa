/* String built-ins: every script string is a NUL-terminated buffer of
 * MAXSTRINGLEN bytes; results are truncated to it, as in stap. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "pd_runtime.h"

char *pd_strcpy(char *dst, const char *src)
{
    if (dst != src) {
        size_t n = strnlen(src, MAXSTRINGLEN - 1);
        memmove(dst, src, n);
        dst[n] = 0;
    }
    return dst;
}

char *pd_concat(char *dst, const char *a, const char *b)
{
    char tmp[MAXSTRINGLEN];
    snprintf(tmp, sizeof tmp, "%s%s", a, b); /* a or b may be dst itself */
    return pd_strcpy(dst, tmp);
}

char *pd_sprintf(char *dst, const char *fmt, ...)
{
    char tmp[MAXSTRINGLEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    return pd_strcpy(dst, tmp);
}

char *pd_long_to_str(char *dst, int64_t v)
{
    snprintf(dst, MAXSTRINGLEN, "%lld", (long long)v);
    return dst;
}

int64_t pd_str_to_long(const char *s) { return strtoll(s, NULL, 10); }

/* Reads a NUL-terminated string from the process's own memory without
 * trusting the pointer: a bad address is a counted error, never a crash.
 * Reads page by page so a string ending just before an unmapped page works. */
char *pd_user_string(struct pd_ctx *c, char *dst, int64_t addr, int64_t maxlen)
{
    size_t cap = maxlen > 0 && maxlen < MAXSTRINGLEN ? (size_t)maxlen + 1 : MAXSTRINGLEN;
    uintptr_t at = (uintptr_t)addr;
    size_t got = 0;
    dst[0] = 0;
    if (at == 0) {
        pd_error(c, "user string copy fault at 0x0 (NULL pointer)");
        return dst;
    }
    long page = sysconf(_SC_PAGESIZE);
    while (got < cap - 1) {
        size_t chunk = (size_t)page - ((at + got) & (uintptr_t)(page - 1));
        if (chunk > cap - 1 - got)
            chunk = cap - 1 - got;
        struct iovec local = {dst + got, chunk}, remote = {(void *)(at + got), chunk};
        ssize_t n = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
        if (n <= 0) {
            dst[got] = 0;
            if (got == 0 || memchr(dst, 0, got) == NULL)
                pd_error(c, "user string copy fault at 0x%lx", (unsigned long)(at + got));
            return dst;
        }
        char *nul = memchr(dst + got, 0, (size_t)n);
        if (nul)
            return dst;
        got += (size_t)n;
    }
    dst[got] = 0;
    return dst;
}

int64_t pd_gettime_ns(int clock_realtime)
{
    struct timespec ts;
    clock_gettime(clock_realtime ? CLOCK_REALTIME : CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

char *pd_substr(char *dst, const char *s, int64_t start, int64_t len)
{
    int64_t n = (int64_t)strlen(s);
    if (start < 0 || start >= n || len <= 0) {
        dst[0] = 0;
        return dst;
    }
    if (len > n - start)
        len = n - start;
    if (len > MAXSTRINGLEN - 1)
        len = MAXSTRINGLEN - 1;
    memmove(dst, s + start, (size_t)len);
    dst[len] = 0;
    return dst;
}

char *pd_str_replace(char *dst, const char *s, const char *from, const char *to)
{
    char tmp[MAXSTRINGLEN];
    size_t flen = strlen(from), at = 0;
    while (*s && at < sizeof tmp - 1) {
        if (flen && strncmp(s, from, flen) == 0) {
            for (const char *t = to; *t && at < sizeof tmp - 1; t++)
                tmp[at++] = *t;
            s += flen;
        } else {
            tmp[at++] = *s++;
        }
    }
    tmp[at] = 0;
    return pd_strcpy(dst, tmp);
}
