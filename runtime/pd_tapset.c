/* SystemTap tapset functions that need C (the script-level ones are in
 * launcher/script/tapset.py).  Each runs in probe context: no locks, no allocation,
 * nothing that could wait on the target (no gmtime_r: glibc's takes the tz lock). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pd_runtime.h"

/* stap's strtol is the kernel's simple_strtol: no leading blanks, no errno */
int64_t pd_strtol(const char *s, int64_t base)
{
    if (*s == ' ' || (*s >= '\t' && *s <= '\r'))
        return 0;
    if (base < 0 || base == 1 || base > 36)
        return 0;
    return (int64_t)strtoll(s, NULL, (int)base);
}

int64_t pd_stringat(struct pd_ctx *c, const char *s, int64_t pos)
{
    if (pos >= 0 && (uint64_t)pos < strlen(s))
        return (unsigned char)s[pos];
    pd_error(c, "Position out of bounds");
    return 0;
}

int64_t pd_strpos(const char *s1, const char *s2)
{
    const char *at = strstr(s1, s2);
    return at ? (int64_t)(at - s1) : -1;
}

/* [0, n) for n <= 2^20, as stap's randint: a per-thread xorshift64*, seeded from the
 * clock and the thread id on first use */
int64_t pd_randint(struct pd_ctx *c, int64_t n)
{
    static __thread uint64_t state;
    if ((uint64_t)n > 1024 * 1024) {
        pd_error(c, "range too wide");
        return 0;
    }
    if (n == 0)
        return 0;
    if (state == 0)
        state = ((uint64_t)pd_gettime_ns(0) ^ ((uint64_t)pd_tid() << 32)) | 1;
    state ^= state >> 12;
    state ^= state << 25;
    state ^= state >> 27;
    return (int64_t)(((state * 0x2545F4914F6CDD1DULL) >> 32) % (uint64_t)n);
}

/* asctime's "Thu Jan  1 00:00:00 1970" of seconds since the epoch, in UTC (days to a
 * civil date by H. Hinnant's algorithm) */
char *pd_ctime(struct pd_ctx *c, char *dst, int64_t secs)
{
    static const char days[] = "ThuFriSatSunMonTueWed";
    static const char months[] = "JanFebMarAprMayJunJulAugSepOctNovDec";
    /* gmtime's limit: the year must fit an int */
    if (secs > 67767976233316800LL || secs < -67768040609740800LL) {
        pd_error(c, "Time cannot be converted");
        dst[0] = 0;
        return dst;
    }
    int64_t day = secs >= 0 ? secs / 86400 : -((-secs + 86399) / 86400);
    int64_t rem = secs - day * 86400;
    int64_t wday = ((day % 7) + 7) % 7;
    int64_t z = day + 719468;
    int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    int64_t doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    int64_t mday = doy - (153 * mp + 2) / 5 + 1;
    int64_t mon = mp < 10 ? mp + 3 : mp - 9;
    int64_t year = yoe + era * 400 + (mon <= 2);
    snprintf(dst, MAXSTRINGLEN, "%.3s %.3s%3d %.2d:%.2d:%.2d %lld", days + 3 * wday,
             months + 3 * (mon - 1), (int)mday, (int)(rem / 3600), (int)(rem / 60 % 60),
             (int)(rem % 60), (long long)year);
    return dst;
}

/* |err| when it names an errno value, else 0 */
int64_t pd_errno_p(int64_t err)
{
    int64_t e = err > 0 ? err : -err;
    return e > 0 && e < 4096 && strerrorname_np((int)e) ? e : 0;
}

/* "ENOENT" for 2 (or -2); "" for a number with no name */
char *pd_errno_str(char *dst, int64_t err)
{
    int64_t e = err > 0 ? err : -err;
    const char *name = e > 0 && e < 4096 ? strerrorname_np((int)e) : NULL;
    snprintf(dst, MAXSTRINGLEN, "%s", name ? name : "");
    return dst;
}

/* stap's returnval(): the register a function returns its value in (rax, eax, x0) as
 * the probed process's long; a guess anywhere but at a return.  Probes that run in the
 * launcher (begin, end, timers) have no registers: an error, as stap's has no uregs. */
int64_t pd_returnval(struct pd_ctx *c)
{
    if (!c->regs) {
        pd_error(c, "returnval() not defined in this context %s", c->probe->pp);
        return 0;
    }
    return (int64_t)(long)pd_reg(c->regs, 0);
}

/* stap's returnstr(format): returnval() as "-2 (ENOENT)" when it is a negated errno
 * value with a name, else in hex (format 2: "0x%lx"), octal (3: "%#lo") or decimal,
 * all at the width of the process's long; "N/A" without registers. */
char *pd_returnstr(struct pd_ctx *c, char *dst, int64_t format)
{
    if (!c->regs) {
        snprintf(dst, MAXSTRINGLEN, "N/A");
        return dst;
    }
    long ret = (long)pd_reg(c->regs, 0);
    const char *name = ret < 0 && ret > -4096 ? strerrorname_np((int)-ret) : NULL;
    if (name)
        snprintf(dst, MAXSTRINGLEN, "%ld (%s)", ret, name);
    else if (format == 2)
        snprintf(dst, MAXSTRINGLEN, "0x%lx", (unsigned long)ret);
    else if (format == 3)
        snprintf(dst, MAXSTRINGLEN, "%#lo", (unsigned long)ret);
    else
        snprintf(dst, MAXSTRINGLEN, "%ld", ret);
    return dst;
}

/* stap's _stp_convert_utf32: c as UTF-8 at dst when n + 1 bytes fit in size (its
 * length n), 0 when they do not, -1 for a surrogate or a value past U+10FFFF. */
static int pd_utf8_encode(char *dst, int size, uint32_t c)
{
    int n = c <= 0x7F ? 1 : c <= 0x7FF ? 2 : (c >= 0xD800 && c <= 0xDFFF) ? -1
            : c <= 0xFFFF ? 3 : c <= 0x10FFFF ? 4 : -1;
    if (n < 0)
        return -1;
    if (size < n + 1)
        return 0;
    dst[n] = 0;
    if (n == 1) {
        dst[0] = (char)c;
        return 1;
    }
    for (int i = n - 1; i > 0; --i, c >>= 6)
        dst[i] = (char)(0x80 | (c & 0x3F));
    dst[0] = (char)((((1u << n) - 1) << (8 - n)) | c);
    return n;
}

/* user_string_utf16/utf32(addr): the NUL-terminated UTF-16 (width 2; a high and a
 * low surrogate make one character) or UTF-32 (width 4) string at addr as UTF-8,
 * cut at MAXSTRINGLEN; an unreadable unit or a character UTF-8 cannot hold is the
 * handler's error, with what was converted before it, as stap's tapset has it. */
char *pd_user_string_utf(struct pd_ctx *c, char *dst, int64_t addr, int width)
{
    uintptr_t at = (uintptr_t)addr;
    int len = MAXSTRINGLEN, rc;
    char *out = dst;
    *out = 0;
    while (len > 1) {
        uint32_t c32 = 0;
        uint16_t low = 0;
        if (pd_read_self(&c32, (const void *)at, (size_t)width) != width) {
            pd_error(c, "user string copy fault at 0x%lx [man error::fault]",
                     (unsigned long)at);
            break;
        }
        if (c32 == 0)
            break;
        if (width == 2 && c32 >= 0xD800 && c32 <= 0xDBFF) {
            /* a broken pair falls through to the encoder, which refuses the lone half */
            if (pd_read_self(&low, (const void *)(at + 2), 2) != 2) {
                pd_error(c, "user string copy fault at 0x%lx [man error::fault]",
                         (unsigned long)(at + 2));
                break;
            }
            if (low >= 0xDC00 && low <= 0xDFFF) {
                c32 = 0x10000 + ((c32 & 0x3FF) << 10) + (low & 0x3FF);
                at += 2;
            }
        }
        rc = pd_utf8_encode(out, len, c32);
        if (rc <= 0) {
            if (rc < 0)
                pd_error(c, "invalid UTF-%d character U+%X at 0x%lx", width * 8,
                         (unsigned)c32, (unsigned long)at);
            break;
        }
        at += (uintptr_t)width;
        out += rc;
        len -= rc;
    }
    return dst;
}

/* user_buffer_quoted(addr, inlen, outlen): the inlen bytes at addr (<= 0 or more than
 * MAXSTRINGLEN - 1: that many) escaped and quoted into at most outlen bytes; `0x...`
 * (cut to outlen) where they cannot be read, or with `raise` (the _error form) the
 * handler's error.  outlen 0 is "" as stap's has it. */
char *pd_user_buffer_quoted(struct pd_ctx *c, char *dst, int64_t addr, int64_t inlen,
                            int64_t outlen, int raise)
{
    char buf[MAXSTRINGLEN];
    size_t n = inlen <= 0 || inlen > MAXSTRINGLEN - 1 ? MAXSTRINGLEN - 1 : (size_t)inlen;
    int64_t out = outlen < 0 ? 0 : outlen > MAXSTRINGLEN ? MAXSTRINGLEN : outlen;
    dst[0] = 0;
    if (out > 0 && pd_read_self(buf, (const void *)(uintptr_t)addr, n) == (ssize_t)n)
        return pd_text_buf(dst, buf, n, out, 1);
    if (raise)
        pd_error(c, "Unable to access user space data at 0x%lx", (unsigned long)addr);
    else if (out > 0)
        snprintf(dst, (size_t)out, "0x%lx", (unsigned long)addr);
    return dst;
}
