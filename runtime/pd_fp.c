/* Floating point, stap's floatingpoint tapset: a double travels in a long as its
 * IEEE-754 bits, which is also how `8f@` arguments arrive.  stap computes with
 * SoftFloat (runtime/softfloat.c): IEEE double arithmetic rounded to nearest even,
 * which the CPU's own double arithmetic is too where every step is rounded to double
 * (PD_IEEE_FN: i386's x87 keeps wider intermediates).  stap's conversions to and from
 * text (f64_to_str, str_to_f64) and to an integer (f64_to_i64) are its own algorithms,
 * followed here step by step: their results are not printf's or strtod's. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>

#include "pd_runtime.h"

static double pd_fp(int64_t bits)
{
    double d;
    memcpy(&d, &bits, 8);
    return d;
}

static int64_t pd_bits(double d)
{
    int64_t bits;
    memcpy(&bits, &d, 8);
    return bits;
}

PD_IEEE_FN int64_t pd_fp_op(int64_t a, int64_t b, char op)
{
    double x = pd_fp(a), y = pd_fp(b);
    switch (op) {
    case '+': return pd_bits(x + y);
    case '-': return pd_bits(x - y);
    case '*': return pd_bits(x * y);
    case '/': return pd_bits(x / y);
    case '<': return x < y;
    case 'l': return x <= y;
    case '=': return x == y;
    }
    return 0;
}

PD_IEEE_FN int64_t pd_fp32_to_fp64(int64_t v)
{
    uint32_t raw = (uint32_t)(uint64_t)v;
    float f;
    memcpy(&f, &raw, 4);
    return pd_bits((double)f);
}

PD_IEEE_FN int64_t pd_long_to_fp(int64_t v) { return pd_bits((double)v); }

/* SoftFloat's f64_sqrt: IEEE's, which the CPU's instruction is (pd_arch.h) */
PD_IEEE_FN int64_t pd_fp_sqrt(int64_t v) { return pd_bits(pd_cpu_sqrt(pd_fp(v))); }

/* SoftFloat's f64_to_i64(a, mode, exact) on the bits: modes 0 nearest even, 1 toward
 * zero, 2 down, 3 up, 4 nearest away from zero, any other toward zero (stap's build
 * has no round-to-odd); out of range INT64_MAX or INT64_MIN by the sign, a NaN 0.
 * `exact` only raises SoftFloat's inexact flag, which nothing reads. */
int64_t pd_fp_to_long(int64_t bits, int64_t mode)
{
    uint64_t ui = (uint64_t)bits, sig = ui & ((UINT64_C(1) << 52) - 1), extra;
    int sign = (int)(ui >> 63), exp = (int)((ui >> 52) & 0x7ff), shift;
    if (exp == 0x7ff && sig)
        return 0;
    if (exp)
        sig |= UINT64_C(1) << 52;
    shift = 0x433 - exp;
    if (shift <= 0) {
        if (shift < -11)
            goto invalid;
        sig <<= -shift;
        extra = 0;
    } else if (shift < 64) { /* the bits shifted out kept in extra, the rest jammed */
        extra = sig << (-shift & 63);
        sig >>= shift;
    } else {
        extra = shift == 64 ? sig : sig != 0;
        sig = 0;
    }
    if (mode == 0 || mode == 4) {
        if (extra >= UINT64_C(0x8000000000000000))
            goto increment;
    } else if (extra && (sign ? mode == 2 : mode == 3)) {
    increment:
        if (!++sig)
            goto invalid;
        if (extra == UINT64_C(0x8000000000000000) && mode == 0)
            sig &= ~(uint64_t)1;
    }
    int64_t z = (int64_t)(sign ? (uint64_t)0 - sig : sig);
    if (z && ((z < 0) ^ sign))
        goto invalid;
    return z;
invalid:
    return sign ? INT64_MIN : INT64_MAX;
}

static int pd_fp_digit(char ch) { return ch >= '0' && ch <= '9'; }

/* str_to_f64: digits accumulated times ten, divided by ten to the fraction's digits and
 * the exponent.  Once the power of ten is 0 or infinite, stap's loop over the rest of
 * the exponent (forever, for one past 2^53) changes nothing more: it stops there. */
PD_IEEE_FN int64_t pd_string_to_fp(struct pd_ctx *c, const char *s)
{
    double value = 0, power = 1, sign = s[0] == '-' ? -1 : 1;
    size_t i = s[0] == '-' || s[0] == '+';
    for (; pd_fp_digit(s[i]); i++)
        value = value * 10 + (s[i] - '0');
    if (s[i] == '.')
        i++;
    for (; pd_fp_digit(s[i]); i++) {
        value = value * 10 + (s[i] - '0');
        power = power * 10;
    }
    if (s[i] == 'e' || s[i] == 'E') {
        int minus = s[++i] == '-';
        double e = 0;
        if (s[i] == '-' || s[i] == '+')
            i++;
        for (; pd_fp_digit(s[i]); i++)
            e = e * 10 + (s[i] - '0');
        for (; e != 0 && power != 0 && power - power == 0; e -= 1)
            power = minus ? power * 10 : power / 10;
    }
    double r = sign * (value / power);
    if (s[i] != 0 || r != r) {
        pd_error(c, "invalid format");
        return 0;
    }
    return pd_bits(r);
}

/* stap's strlcat into its MAXSTRINGLEN result: what does not fit is cut */
static void pd_fp_cat(char *dst, const char *fmt, ...)
{
    size_t n = strlen(dst);
    if (n >= MAXSTRINGLEN - 1)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(dst + n, MAXSTRINGLEN - n, fmt, ap);
    va_end(ap);
}

/* f64_to_str: the integer part after dividing by ten until it is below 1e18 (the
 * divisions counted as an `eN` suffix), then `precision` fraction digits each cut
 * toward zero, the last one raised by one when the digit after it is 5 or more
 * (a 9 becomes "10": stap carries nothing).  Digits past MAXSTRINGLEN cannot show:
 * they are not computed. */
PD_IEEE_FN char *pd_fp_to_string(char *dst, int64_t bits, int64_t precision)
{
    uint64_t ui = (uint64_t)bits;
    dst[0] = 0;
    if (((ui >> 52) & 0x7ff) == 0x7ff) {
        pd_fp_cat(dst, "%s", ui << 12 ? "NaN" : ui >> 63 ? "-Infinity" : "Infinity");
        return dst;
    }
    if (ui >> 63)
        pd_fp_cat(dst, "-");
    double a = pd_fp((int64_t)(ui & ~(UINT64_C(1) << 63)));
    int64_t e10 = 0, d;
    while (a >= 1e18) {
        a = a / 10;
        e10++;
    }
    int64_t ipart = (int64_t)a;
    double frac = a - (double)ipart;
    pd_fp_cat(dst, "%llu", (unsigned long long)ipart);
    int prec = (int)precision; /* stap's int parameter */
    if (prec > 0) {
        pd_fp_cat(dst, ".");
        for (int i = 0; i < prec - 1 && i < MAXSTRINGLEN; i++) {
            frac = frac * 10;
            d = (int64_t)frac;
            pd_fp_cat(dst, "%llu", (unsigned long long)d);
            frac = frac - (double)d;
        }
        frac = frac * 10;
        int64_t last = (int64_t)frac;
        frac = frac - (double)last;
        frac = frac * 10;
        if ((int64_t)frac >= 5)
            last++;
        pd_fp_cat(dst, "%llu", (unsigned long long)last);
    }
    if (e10)
        pd_fp_cat(dst, "e%lld", (long long)e10);
    return dst;
}
