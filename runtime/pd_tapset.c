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
