/* String built-ins: every script string is a NUL-terminated buffer of
 * MAXSTRINGLEN bytes; results are truncated to it, as in stap. */
#define _GNU_SOURCE
#include <fcntl.h>
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
        ssize_t n = pd_read_self(dst + got, (const void *)(at + got), chunk);
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

/* ---- sprintf with stap's rules (runtime/vsprintf.c), not C's -----------------
 * The translator splits a format into pieces; each appends to a MAXSTRINGLEN
 * buffer.  `flag` is stap's single flag character or 0; width and precision are
 * -1 when absent. */

static void pd_sf_append(char *dst, const char *s, size_t n)
{
    size_t len = strnlen(dst, MAXSTRINGLEN - 1);
    if (n > MAXSTRINGLEN - 1 - len)
        n = MAXSTRINGLEN - 1 - len;
    memcpy(dst + len, s, n);
    dst[len + n] = 0;
}

static void pd_sf_fill(char *dst, char ch, int64_t n)
{
    char pad[64];
    memset(pad, ch, sizeof pad);
    while (n > 0) {
        size_t k = n > (int64_t)sizeof pad ? sizeof pad : (size_t)n;
        pd_sf_append(dst, pad, k);
        n -= (int64_t)k;
    }
}

void pd_sf_lit(char *dst, const char *s) { pd_sf_append(dst, s, strlen(s)); }

int64_t pd_sf_clamp(int64_t v)
{
    int32_t i = (int32_t)(uint32_t)(uint64_t)v; /* clamp_t(int, arg, 0, ...) */
    return i < 0 ? 0 : i > MAXSTRINGLEN ? MAXSTRINGLEN : i;
}

void pd_sf_num(char *dst, int64_t num, char conv, char flag, int64_t size, int64_t precision)
{
    if (conv == 'P') { /* --compatible < 1.3: stap's old %p, at this process's width */
        num = (int64_t)(unsigned long)num;
        if (size == -1)
            size = 2 + 2 * (int64_t)sizeof(void *);
        precision = size - 2;
        if (flag != '-' && precision > 2 * (int64_t)sizeof(void *))
            precision = 2 * (int64_t)sizeof(void *);
        conv = 'p';
    }
    int base = (conv == 'x' || conv == 'X' || conv == 'p') ? 16 : conv == 'o' ? 8 : 10;
    int left = flag == '-', zeropad = flag == '0' && !left;
    int special = flag == '#' || conv == 'p', is_signed = conv == 'd' || conv == 'i';
    uint64_t u = (uint64_t)num;
    char sign = 0;
    if (is_signed) {
        if (num < 0) {
            sign = '-';
            u = 0 - u;
            size--;
        } else if (flag == '+' || flag == ' ') {
            sign = flag;
            size--;
        }
    }
    const char *prefix = "";
    if (special && base == 16) {
        prefix = conv == 'X' ? "0X" : "0x";
        size -= 2;
    } else if (special && base == 8) {
        prefix = "0";
        size -= 1;
    }
    char digits[72];
    int nd = 0;
    const char *set = conv == 'X' ? "0123456789ABCDEF" : "0123456789abcdef";
    do {
        digits[nd++] = set[u % (unsigned)base];
        u /= (unsigned)base;
    } while (u);
    if (precision < nd)
        precision = nd;
    size -= precision;
    if (!(zeropad || left) && size > 0) {
        pd_sf_fill(dst, ' ', size);
        size = 0;
    }
    if (sign)
        pd_sf_append(dst, &sign, 1);
    pd_sf_lit(dst, prefix);
    if (!left && size > 0) {
        pd_sf_fill(dst, zeropad ? '0' : ' ', size);
        size = 0;
    }
    pd_sf_fill(dst, '0', precision - nd);
    char rev[72];
    for (int i = 0; i < nd; i++)
        rev[i] = digits[nd - 1 - i];
    pd_sf_append(dst, rev, (size_t)nd);
    if (size > 0)
        pd_sf_fill(dst, ' ', size);
}

void pd_sf_str(char *dst, const char *s, char flag, int64_t width, int64_t precision)
{
    size_t n = strnlen(s, MAXSTRINGLEN);
    if (precision >= 0 && (size_t)precision < n)
        n = (size_t)precision;
    int64_t pad = width - (int64_t)n;
    if (flag != '-' && pad > 0)
        pd_sf_fill(dst, ' ', pad);
    pd_sf_append(dst, s, n);
    if (flag == '-' && pad > 0)
        pd_sf_fill(dst, ' ', pad);
}

/* The C escape of a byte that is not printable (or is `quote` or a backslash),
 * written into esc[5] if it needs an octal one; NULL: the byte stands for itself. */
static const char *pd_char_escape(unsigned char ch, char quote, char esc[5])
{
    switch (ch) {
    case '\n': return "\\n";
    case '\t': return "\\t";
    case '\r': return "\\r";
    case '\v': return "\\v";
    case '\f': return "\\f";
    case '\a': return "\\a";
    case '\b': return "\\b";
    case '\\': return "\\\\";
    default:
        if (ch == (unsigned char)quote)
            return quote == '"' ? "\\\"" : "\\'";
        if (ch < 32 || ch >= 127) {
            snprintf(esc, 5, "\\%03o", ch);
            return esc;
        }
        return NULL;
    }
}

/* %c; %#c escapes a byte that is not printable, as stap's pretty printer needs
 * ('\000' for a NUL char member). */
void pd_sf_chr(char *dst, int64_t v, char flag, int64_t width)
{
    char ch = (char)(uint8_t)v, esc[5];
    const char *rep = flag == '#' ? pd_char_escape((unsigned char)ch, '\'', esc) : NULL;
    size_t len = rep ? strlen(rep) : 1;
    int64_t pad = width - (int64_t)len;
    if (flag != '-' && pad > 0)
        pd_sf_fill(dst, ' ', pad);
    pd_sf_append(dst, rep ? rep : &ch, len);
    if (flag == '-' && pad > 0)
        pd_sf_fill(dst, ' ', pad);
}

/* ---- quoting and tokenizing (stap's tapset/string.stp semantics) --------- */

/* One UTF-8 sequence at s (n bytes left): its length, the code point in *cp; 1 and
 * the byte itself for ASCII, a bad or overlong sequence, a surrogate or a value past
 * RFC 3629 (stap's _stp_decode_utf8, so those show as octal escapes, not hidden). */
static int pd_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp)
{
    unsigned char b = s[0];
    int len = (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : (b & 0xF8) == 0xF0 ? 4 : 1;
    uint32_t c = len == 2 ? b & 0x1Fu : len == 3 ? b & 0xFu : b & 0x7u;
    *cp = b;
    if (len == 1 || (size_t)len > n)
        return 1;
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 1;
        c = (c << 6) | (s[i] & 0x3Fu);
    }
    if ((c >= 0xD800 && c <= 0xDFFF) || c > 0x10FFFF || c < 0x80
            || (len == 3 && c < 0x800) || (len == 4 && c < 0x10000))
        return 1;
    *cp = c;
    return len;
}

/* stap's _stp_text_str: C escapes for the non-printable bytes of s, \uXXXX or
 * \UXXXXXXXX for UTF-8 sequences; at most `max` output bytes (quotes included;
 * <= 0: MAXSTRINGLEN - 1).  Quoted and cut short, it ends `"...` within `max`,
 * dropping a whole escape rather than part of one. */
char *pd_text_str(char *dst, const char *s, int64_t max, int quoted)
{
    return pd_text_buf(dst, s, strnlen(s, MAXSTRINGLEN - 1), max, quoted);
}

/* The same of the n bytes at s, NULs included (stap's buffer mode, user_buffer_quoted):
 * a NUL shows as `\0` but counts four bytes of `max`, and a cut at one adds no `...`,
 * as stap's runtime has them. */
char *pd_text_buf(char *dst, const char *s, size_t n_in, int64_t max, int quoted)
{
    char tmp[MAXSTRINGLEN + 8];
    const unsigned char *in = (const unsigned char *)s;
    size_t left = n_in < MAXSTRINGLEN - 1 ? n_in : MAXSTRINGLEN - 1;
    size_t at = 0, esc = 0, esc_len = 0;
    int64_t room = max <= 0 || max > MAXSTRINGLEN - 1 ? MAXSTRINGLEN - 1 : max;
    int cut = 0, have_esc = 0;
    if (quoted) {
        room = (room > 5 ? room : 5) - 2;
        tmp[at++] = '"';
    }
    while (left > 0) {
        uint32_t cp;
        char buf[12];
        const char *rep;
        int n = pd_utf8_decode(in, left, &cp);
        int64_t num;
        if (room <= 0) {
            cut = cp != 0;
            break;
        }
        if (n > 1) {
            snprintf(buf, sizeof buf, cp <= 0xFFFF ? "\\u%04X" : "\\U%08X", (unsigned)cp);
            rep = buf;
        } else if (cp == 0) {
            rep = "\\0";
        } else {
            rep = pd_char_escape((unsigned char)cp, '"', buf);
        }
        num = rep ? (cp == 0 ? 4 : (int64_t)strlen(rep)) : 1;
        if (rep && !have_esc && room - 3 < num) {
            have_esc = 1;
            esc = at;
            esc_len = (size_t)num;
        }
        if (room < num) {
            cut = left > (size_t)n && cp != 0;  /* stap: the last character dropped is no cut */
            break;
        }
        if (rep)
            memcpy(tmp + at, rep, strlen(rep));
        else
            tmp[at] = (char)cp;
        at += rep ? strlen(rep) : 1;
        in += n;
        left -= (size_t)n;
        room -= num;
    }
    if (quoted && cut) {
        size_t trunc = at - 3 + (size_t)room;
        at = have_esc && esc < trunc && trunc < esc + esc_len ? esc : trunc;
        memcpy(tmp + at, "\"...", 4);
        at += 4;
    } else if (quoted) {
        tmp[at++] = '"';
    }
    tmp[at] = 0;
    return pd_strcpy(dst, tmp);
}

/* user_string2 / user_string_quoted: never an error; `fallback` on a fault. */
char *pd_user_string_safe(struct pd_ctx *c, char *dst, int64_t addr, int64_t maxlen,
                          const char *fallback)
{
    char buf[MAXSTRINGLEN];
    int saved = c->error;
    char saved_msg[sizeof c->errmsg];
    memcpy(saved_msg, c->errmsg, sizeof saved_msg);
    pd_user_string(c, buf, addr, maxlen);
    int faulted = c->error && !saved;
    c->error = saved;
    memcpy(c->errmsg, saved_msg, sizeof saved_msg);
    return pd_strcpy(dst, faulted ? fallback : buf);
}

/* Writes n bytes at dst of this process without trusting dst: n, or <= 0 for an
 * unmapped or read-only address (never a crash).  Where pd_read_self is the arch's
 * own (aarch64: qemu-user's process_vm_* take guest addresses as host ones) the
 * bytes go through a private pipe instead: read(2) into dst fails with EFAULT. */
static ssize_t pd_write_self(void *dst, const void *src, size_t n)
{
#ifdef PD_ARCH_READ_SELF
    int fds[2];
    if (n > 65536 || pipe2(fds, O_CLOEXEC) != 0)
        return -1;
    ssize_t w = write(fds[1], src, n);
    ssize_t r = w == (ssize_t)n ? read(fds[0], dst, n) : -1;
    close(fds[0]);
    close(fds[1]);
    return r;
#else
    struct iovec local = {(void *)src, n}, remote = {dst, n};
    return process_vm_writev(getpid(), &local, 1, &remote, 1, 0);
#endif
}

/* Not after an error in the statement: its address may come from a read that faulted. */
static int64_t pd_user_write(struct pd_ctx *c, int64_t addr, const void *src, size_t n)
{
    if (c->error)
        return 0;
    if (pd_write_self((void *)(uintptr_t)addr, src, n) == (ssize_t)n)
        return 0;
    pd_error(c, "user memory write fault at 0x%lx (%u bytes)", (unsigned long)addr,
             (unsigned)n);
    return 0;
}

int64_t pd_set_user(struct pd_ctx *c, int64_t addr, int64_t value, unsigned size)
{
    /* the low `size` bytes of the value: x86 and aarch64 are little-endian */
    return pd_user_write(c, addr, &value, size);
}

/* A bitfield written (guru mode's `$p->bits = v`): the `size` bytes at addr holding it
 * read, its `width` bits from bit `shift` replaced by v's low bits, written back, as
 * stap's read-modify-write of the storage unit; a fault is the handler's error. */
int64_t pd_set_user_bits(struct pd_ctx *c, int64_t addr, unsigned size, unsigned shift,
                         unsigned width, int64_t v)
{
    uint64_t old = 0;
    if (c->error)
        return v;
    if (pd_read_self(&old, (const void *)(uintptr_t)addr, size) != (ssize_t)size) {
        pd_error(c, "user memory read fault at 0x%lx (%u bytes)", (unsigned long)addr, size);
        return v;
    }
    uint64_t merged = pd_merge_bits(old, (uint64_t)v, shift, width);
    pd_user_write(c, addr, &merged, size);
    return v;
}

int64_t pd_set_user_string(struct pd_ctx *c, int64_t addr, const char *s)
{
    return pd_user_write(c, addr, s, strlen(s) + 1);
}

/* tokenize(s, delim): a non-empty s starts a new string; "" continues it. */
char *pd_tokenize(char *dst, const char *s, const char *delim)
{
    static __thread char buf[MAXSTRINGLEN];
    static __thread size_t pos, len;
    if (s[0]) {
        pd_strcpy(buf, s);
        pos = 0;
        len = strlen(buf);
    }
    while (pos < len && strchr(delim, buf[pos]) && delim[0])
        pos++;
    size_t start = pos;
    while (pos < len && !(delim[0] && strchr(delim, buf[pos])))
        pos++;
    size_t n = pos - start;
    memcpy(dst, buf + start, n);
    dst[n] = 0;
    if (pos < len)
        pos++;
    return dst;
}

int pd_user_read_ok(struct pd_ctx *c, int64_t addr)
{
    (void)c;
    char b;
    return pd_read_self(&b, (const void *)(uintptr_t)addr, 1) == 1;
}
