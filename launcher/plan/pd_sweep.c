/* pd_sweep: byte scans of a whole binary for x86 patch planning (launcher/patchplan.py,
 * launcher/objfacts.py).  No instruction is decoded here: that is done in Python, with
 * capstone, for the few places a scan points at.
 *
 * usage: pd_sweep FILE BITS LO HI GOT [r:A:B]... x:VA:OFF:SIZE... d:VA:OFF:SIZE...
 *   x: an executable section, d: an allocated data section (vaddr, file offset, size);
 *   [LO, HI) bounds the code; GOT is the i386 GOT base (0: none); numbers in hex.
 *
 * Without r: ranges (once per binary): the words of data that point into the code --
 * absolute words, i386 GOT-relative words, and the entries of every table that a
 * `lea reg, [rip + table]` at any byte offset of the code may name, read as int32
 * offsets from the table's start while they land in the code (x86-64 PIC jump
 * tables; absolute and i386 GOT-relative tables are data words already).
 * stdout: a uint64 count, then the words (int64, sorted, unique).
 *
 * With r: ranges (per run, the sites' neighbourhoods): every byte offset of the code at
 * which some encoding would name an address inside a range -- the opcode of a rel8 or
 * rel16/rel32 jmp, jcc, call, loop, jcxz or xbegin, a ModRM byte of a RIP-relative
 * operand (whatever immediate follows it), or an 8/16/32/64-bit field whose value (as
 * is or sign-extended) lies in a range.  Every instruction that names such an address
 * has one of these inside it: the caller decodes the instructions holding them and
 * keeps the real ones.  stdout: a uint64 count, then the offsets as addresses (int64).
 *
 * Exit 2 with one line on stderr when the file cannot be used.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct vec { int64_t *v; size_t n, cap; };

static void push(struct vec *a, int64_t x)
{
    if (a->n == a->cap) {
        a->cap = a->cap ? a->cap * 2 : 4096;
        a->v = realloc(a->v, a->cap * sizeof *a->v);
        if (!a->v) { fputs("pd_sweep: out of memory\n", stderr); exit(2); }
    }
    a->v[a->n++] = x;
}

struct area { uint64_t va, size; const uint8_t *data; };

static uint64_t lo, hi;
static uint64_t rlo = ~0ULL, rhi;   /* ranges mode: the bounds of all ranges */
static uint64_t blo = ~0ULL, bhi;   /* the bounds of the data sections */
static int bits;
static uint8_t *marked;       /* ranges mode: a bit per code byte inside some range */

static int cmp64(const void *x, const void *y)
{
    int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
    return (a > b) - (a < b);
}

static void sort_unique(struct vec *a)
{
    if (!a->n)
        return;
    qsort(a->v, a->n, sizeof *a->v, cmp64);
    size_t k = 1;
    for (size_t i = 1; i < a->n; i++)
        if (a->v[i] != a->v[k - 1])
            a->v[k++] = a->v[i];
    a->n = k;
}

static int32_t rd32(const uint8_t *p) { int32_t v; memcpy(&v, p, 4); return v; }
static int16_t rd16(const uint8_t *p) { int16_t v; memcpy(&v, p, 2); return v; }
static uint64_t rd64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

static inline int hit(uint64_t t)
{
    if (bits == 32)
        t &= 0xFFFFFFFFULL;
    if (t < rlo || t >= rhi)
        return 0;
    uint64_t i = t - lo;
    return marked[i >> 3] >> (i & 7) & 1;
}

/* Whether some encoding at p (n bytes left) names an address in a range. */
static int names_range(const uint8_t *d, size_t n, uint64_t p)
{
    uint8_t b = d[0];
    /* fields: the value as is and sign-extended from each width */
    if (hit(b) || hit((uint64_t)(int64_t)(int8_t)b) || hit((uint16_t)(int16_t)(int8_t)b) ||
        hit((uint32_t)(int32_t)(int8_t)b))
        return 1;
    if (n >= 2) {
        int16_t w = rd16(d);
        if (hit((uint16_t)w) || hit((uint64_t)(int64_t)w) || hit((uint32_t)(int32_t)w))
            return 1;
        /* rel8: jcc, jmp, loop*, jcxz (the opcode's byte) */
        if (((b >= 0x70 && b <= 0x7F) || b == 0xEB || (b >= 0xE0 && b <= 0xE3)) &&
            hit(p + 2 + (int8_t)d[1]))
            return 1;
    }
    if (n >= 4) {
        int32_t v = rd32(d);
        if (hit((uint32_t)v) || hit((uint64_t)(int64_t)v))
            return 1;
        /* rel16 after an operand-size prefix (and 16-bit wrap-around in 32-bit code) */
        if (b == 0x66) {
            uint64_t end = 0;
            int16_t rel = 0;
            if (d[1] == 0xE8 || d[1] == 0xE9)
                end = p + 4, rel = rd16(d + 2);
            else if (n >= 5 && ((d[1] == 0x0F && d[2] >= 0x80 && d[2] <= 0x8F) ||
                                (d[1] == 0xC7 && d[2] == 0xF8)))
                end = p + 5, rel = rd16(d + 3);
            if (end && (hit(end + rel) || hit((end + rel) & 0xFFFF)))
                return 1;
        }
    }
    if (n >= 5) {
        /* rel32: call, jmp; a RIP-relative ModRM byte, whatever immediate follows */
        if ((b == 0xE8 || b == 0xE9) && hit(p + 5 + rd32(d + 1)))
            return 1;
        if (bits == 64 && (b & 0xC7) == 0x05) {
            int32_t disp = rd32(d + 1);
            static const int imm[] = {0, 1, 2, 4};
            for (int k = 0; k < 4; k++)
                if (hit(p + 5 + imm[k] + disp))
                    return 1;
        }
    }
    if (n >= 6 && ((b == 0x0F && d[1] >= 0x80 && d[1] <= 0x8F) || (b == 0xC7 && d[1] == 0xF8))
        && hit(p + 6 + rd32(d + 2)))
        return 1;
    if (n >= 8 && hit(rd64(d)))
        return 1;
    return 0;
}

static void scan_ranges(const struct area *a, struct vec *out)
{
    for (size_t i = 0; i < a->size; i++)
        if (names_range(a->data + i, a->size - i, a->va + i))
            push(out, (int64_t)(a->va + i));
}

static const struct area *blob_of(const struct area *blobs, size_t nblobs, uint64_t addr)
{
    if (addr < blo || addr >= bhi)
        return NULL;
    for (size_t b = 0; b < nblobs; b++)
        if (addr >= blobs[b].va && addr < blobs[b].va + blobs[b].size)
            return &blobs[b];
    return NULL;
}

static void data_words(const struct area *text, size_t ntext, const struct area *blobs,
                       size_t nblobs, uint64_t got, struct vec *weak)
{
    uint64_t mask = bits == 64 ? ~0ULL : 0xFFFFFFFFULL;
    size_t word = bits == 64 ? 8 : 4;
    for (size_t b = 0; b < nblobs; b++) {
        const struct area *a = &blobs[b];
        for (size_t o = 0; o + word <= a->size; o += word) {
            uint64_t w = 0;
            memcpy(&w, a->data + o, word);
            if (w >= lo && w < hi)
                push(weak, (int64_t)w);
        }
        if (got && bits == 32)
            for (size_t o = 0; o + 4 <= a->size; o += 4) {
                uint64_t t = (got + (uint64_t)(int64_t)rd32(a->data + o)) & 0xFFFFFFFFULL;
                if (t >= lo && t < hi)
                    push(weak, (int64_t)t);
            }
    }
    /* the tables the code may name: x86-64 PIC code reaches a jump table by
     * `lea reg, [rip + table]` (REX.W 8D, ModRM mod 00 r/m 101), at any byte offset */
    struct vec refs = {0};
    for (size_t s = 0; bits == 64 && s < ntext; s++) {
        const struct area *a = &text[s];
        for (size_t i = 0; i + 7 <= a->size; i++) {
            const uint8_t *d = a->data + i;
            if ((d[0] & 0xF8) != 0x48 || d[1] != 0x8D || (d[2] & 0xC7) != 0x05)
                continue;
            uint64_t t = a->va + i + 7 + (uint64_t)(int64_t)rd32(d + 3);
            if (blob_of(blobs, nblobs, t))
                push(&refs, (int64_t)t);
        }
    }
    sort_unique(&refs);
    for (size_t r = 0; r < refs.n; r++) {
        uint64_t ref = (uint64_t)refs.v[r];
        const struct area *a = blob_of(blobs, nblobs, ref);
        size_t off = (size_t)(ref - a->va);
        for (size_t k = 0; k < 4096 && off + 4 * k + 4 <= a->size; k++) {
            uint64_t t = (ref + (uint64_t)(int64_t)rd32(a->data + off + 4 * k)) & mask;
            if (t < lo || t >= hi)
                break;
            push(weak, (int64_t)t);
        }
    }
    free(refs.v);
}

static void put(const struct vec *a)
{
    uint64_t n = a->n;
    fwrite(&n, sizeof n, 1, stdout);
    fwrite(a->v, sizeof *a->v, a->n, stdout);
}

int main(int argc, char **argv)
{
    if (argc < 6) {
        fputs("usage: pd_sweep FILE BITS LO HI GOT [r:A:B]... x:VA:OFF:SIZE... "
              "d:VA:OFF:SIZE...\n", stderr);
        return 2;
    }
    int fd = open(argv[1], O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) {
        perror(argv[1]);
        return 2;
    }
    const uint8_t *file = st.st_size ? mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE,
                                            fd, 0) : NULL;
    if (file == MAP_FAILED) {
        perror(argv[1]);
        return 2;
    }
    bits = atoi(argv[2]);
    lo = strtoull(argv[3], NULL, 16);
    hi = strtoull(argv[4], NULL, 16);
    uint64_t got = strtoull(argv[5], NULL, 16);
    if (hi < lo || hi - lo > (1ULL << 34)) {
        fputs("pd_sweep: bad code bounds\n", stderr);
        return 2;
    }
    struct area *text = calloc((size_t)argc, sizeof *text);
    struct area *blobs = calloc((size_t)argc, sizeof *blobs);
    size_t ntext = 0, nblobs = 0, nranges = 0;
    marked = calloc((size_t)((hi - lo) / 8 + 1), 1);
    if (!text || !blobs || !marked) {
        fputs("pd_sweep: out of memory\n", stderr);
        return 2;
    }
    for (int i = 6; i < argc; i++) {
        unsigned long long va, off, size;
        if (argv[i][0] == 'r') {
            if (sscanf(argv[i], "r:%llx:%llx", &va, &size) != 2) {
                fprintf(stderr, "pd_sweep: bad range %s\n", argv[i]);
                return 2;
            }
            for (uint64_t t = va < lo ? lo : va; t < size && t < hi; t++) {
                marked[(t - lo) >> 3] |= (uint8_t)(1 << ((t - lo) & 7));
                rlo = t < rlo ? t : rlo;
                rhi = t + 1 > rhi ? t + 1 : rhi;
            }
            nranges++;
            continue;
        }
        char kind;
        if (sscanf(argv[i], "%c:%llx:%llx:%llx", &kind, &va, &off, &size) != 4 ||
            off > (uint64_t)st.st_size || size > (uint64_t)st.st_size - off) {
            fprintf(stderr, "pd_sweep: bad section %s\n", argv[i]);
            return 2;
        }
        struct area a = {va, size, file + off};
        if (kind == 'x') {
            text[ntext++] = a;
        } else {
            blobs[nblobs++] = a;
            blo = va < blo ? va : blo;
            bhi = va + size > bhi ? va + size : bhi;
        }
    }
    struct vec out = {0};
    if (nranges)
        for (size_t s = 0; s < ntext; s++)
            scan_ranges(&text[s], &out);
    else
        data_words(text, ntext, blobs, nblobs, got, &out);
    sort_unique(&out);
    put(&out);
    return fflush(stdout) ? 2 : 0;
}
