/* A histogram drawn as stap draws it (runtime/stat-common.c,
 * _stp_stat_print_histogram_buf): the one drawing of print(@hist_*(x)), which the
 * launcher asks for through pd_launcher_hist_draw when it writes the record of the
 * buckets a handler printed, and of sprint(@hist_*(x)), drawn in the handler.  Only
 * the C library's string functions: tests build this unit alone. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "pd_hist.h"

/* What has been drawn: at most cap - 1 bytes of it kept in buf, NUL-terminated, as
 * stap's snprintf into a MAXSTRINGLEN buffer keeps them; len counts all of it. */
struct pd_hist_out {
    char *buf;
    size_t cap;
    size_t len;
};

static void pd_hist_put(struct pd_hist_out *o, const char *s, size_t n, char fill)
{
    if (o->cap && o->len < o->cap - 1) {
        size_t room = o->cap - 1 - o->len, k = n < room ? n : room;
        if (s)
            memcpy(o->buf + o->len, s, k);
        else
            memset(o->buf + o->len, fill, k);
        o->buf[o->len + k] = 0;
    }
    o->len += n;
}

static void pd_hist_str(struct pd_hist_out *o, const char *s) { pd_hist_put(o, s, strlen(s), 0); }

static void pd_hist_fill(struct pd_hist_out *o, char ch, int64_t n)
{
    if (n > 0)
        pd_hist_put(o, NULL, (size_t)n, ch);
}

/* printf's "%*s": a negative width left-justifies */
static void pd_hist_pad(struct pd_hist_out *o, const char *s, int64_t width)
{
    int64_t n = (int64_t)strlen(s);
    if (width >= 0)
        pd_hist_fill(o, ' ', width - n);
    pd_hist_str(o, s);
    if (width < 0)
        pd_hist_fill(o, ' ', -width - n);
}

static char *pd_hist_itoa(char out[24], int64_t v)
{
    uint64_t m = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    char *p = out + 23;
    *p = 0;
    do {
        *--p = (char)('0' + m % 10);
        m /= 10;
    } while (m);
    if (v < 0)
        *--p = '-';
    return p;
}

/* stat-common.c's needed_space: the characters of v in %lld */
static int pd_hist_space(int64_t v)
{
    char tmp[24];
    return (int)strlen(pd_hist_itoa(tmp, v));
}

/* _stp_bucket_to_val: the value a log bucket's row is labelled with */
static int64_t pd_hist_log_value(int b, int bucket0)
{
    if (b == bucket0)
        return 0;
    if (b < bucket0)
        return INT64_MIN >> b;
    return (int64_t)1 << (b - bucket0 - 1);
}

size_t pd_hist_draw(char *buf, size_t cap, const int64_t *h, uint32_t n, int log,
                    int64_t start, int64_t interval, int width, int elision)
{
    struct pd_hist_out o = {buf, cap, 0};
    int nb = (int)n, bucket0 = nb / 2, low = -1, high = 0, under = 0, over = 0;
    int64_t valmax = 0;
    char num[24];
    if (cap)
        buf[0] = 0;
    if (width < 1) /* stap divides by it */
        width = 1;
    for (int i = 0; i < nb; i++) {
        if (h[i] > 0 && low == -1)
            low = i;
        if (h[i] > 0)
            high = i;
        if (h[i] > valmax)
            valmax = h[i];
    }
    if (low == -1) /* every bucket 0: stap's callers report an empty aggregate first */
        return 0;
    /* up to two zero rows either side of the data; a log histogram goes below 0 only
     * if it holds negative values */
    for (int i = 0; i < 2; i++) {
        if (log ? low != bucket0 && low > 0 : low > 0)
            low--;
        if (high < nb - 1)
            high++;
    }
    if (!log) { /* underflow and overflow rows only when not 0 */
        if (low == 0 && h[0] == 0)
            low++;
        if (high == nb - 1 && h[high] == 0)
            high--;
        under = low == 0;
        over = high == nb - 1;
    }
    int64_t scale = valmax <= width ? 1 : (valmax + width - 1) / width;
    int cnt_space = pd_hist_space(valmax), val_space;
    if (!log) {
        /* stap computes the last label in int (its Hist's start and interval) */
        int32_t last = (int32_t)((uint32_t)start + (uint32_t)interval * (uint32_t)high);
        int a = pd_hist_space(start) + under, b = pd_hist_space(last) + over;
        val_space = a > b ? a : b;
    } else {
        int a = pd_hist_space(pd_hist_log_value(high, bucket0));
        int b = pd_hist_space(pd_hist_log_value(low, bucket0));
        val_space = a > b ? a : b;
    }
    if (val_space < 5)
        val_space = 5; /* "value" */

    pd_hist_pad(&o, "value", val_space);
    pd_hist_str(&o, " |");
    pd_hist_fill(&o, '-', width);
    pd_hist_str(&o, " count\n");
    int eliding = 0;
    for (int i = low; i <= high; i++) {
        /* a zero row whose neighbours within `elision` are zero too is left out, and a
         * run of such rows shows as one "~" row */
        if (elision >= 0) {
            int reach = elision < nb ? elision : nb, elide = 1;
            int from = i - reach > low ? i - reach : low;
            int to = i + reach < high ? i + reach : high;
            for (int k = from; k <= to; k++)
                if (h[k] != 0)
                    elide = 0;
            if (elide) {
                eliding = 1;
                continue;
            }
            if (eliding) {
                pd_hist_pad(&o, "", val_space);
                pd_hist_str(&o, " ~\n");
                eliding = 0;
            }
        }
        const char *prefix = "";
        int64_t val;
        if (log)
            val = pd_hist_log_value(i, bucket0);
        else if (i == 0) {
            val = start;
            prefix = "<";
        } else if (i == nb - 1) {
            val = (int64_t)((uint64_t)start + (uint64_t)(i - 2) * (uint64_t)interval);
            prefix = ">";
        } else
            val = (int64_t)((uint64_t)start + (uint64_t)(i - 1) * (uint64_t)interval);
        pd_hist_pad(&o, prefix, val_space - pd_hist_space(val));
        pd_hist_str(&o, pd_hist_itoa(num, val));
        pd_hist_str(&o, " |");
        int64_t bar = h[i] / scale;
        pd_hist_fill(&o, '@', bar);
        pd_hist_pad(&o, pd_hist_itoa(num, h[i]), width - bar + 1 + cnt_space);
        pd_hist_str(&o, "\n");
    }
    pd_hist_str(&o, "\n");
    return o.len;
}
