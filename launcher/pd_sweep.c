/* pd_sweep: the whole-object facts an x86 patch plan needs (launcher/patchplan.py),
 * computed once per binary (build-id) and kept in the module cache.
 *
 * A linear sweep of every executable section with capstone (the library the Python
 * binding ships, so the decoder and the text of each instruction are the binding's:
 * the facts are those patchplan's plans were designed on), then the data words that
 * point into the code and the entries of the jump tables that instructions name.  The
 * sweep decodes ~1.3 M instructions for PostgreSQL's `postgres`: seconds in Python,
 * a fraction of one here.
 *
 * usage: pd_sweep LIBCAPSTONE FILE BITS LO HI GOT x:VA:OFF:SIZE... d:VA:OFF:SIZE...
 *   LIBCAPSTONE: the binding's shared library, loaded with dlopen (the wheel ships it
 *   without the file its soname names, so it cannot be a link-time dependency);
 *   x: an executable section, d: an allocated data section (file offsets and sizes);
 *   LO/HI bound the code, GOT is the i386 GOT base (0: none); numbers in hex.
 * stdout: four arrays (targets and weak sorted, without repeats), each a little-endian uint64 count then int64 records:
 *   targets (1 word: hard branch targets and code addresses named by instructions),
 *   weak (1 word: data words and jump-table entries in the code),
 *   branch sources (3 words: target, address of the rel field, its size 4 or 1;
 *   sorted by target, then field),
 *   padding runs (2 words: start, length).
 * Exit 2 with one line on stderr when the file or capstone cannot be used.
 */
#include <capstone/capstone.h>
#include <ctype.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static cs_err (*p_open)(cs_arch, cs_mode, csh *);
static cs_insn *(*p_malloc)(csh);
static bool (*p_disasm_iter)(csh, const uint8_t **, size_t *, uint64_t *, cs_insn *);
static void (*p_free)(cs_insn *, size_t);
static cs_err (*p_close)(csh *);

static int load_capstone(const char *lib)
{
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "pd_sweep: %s\n", dlerror());
        return -1;
    }
    *(void **)&p_open = dlsym(h, "cs_open");
    *(void **)&p_malloc = dlsym(h, "cs_malloc");
    *(void **)&p_disasm_iter = dlsym(h, "cs_disasm_iter");
    *(void **)&p_free = dlsym(h, "cs_free");
    *(void **)&p_close = dlsym(h, "cs_close");
    if (!p_open || !p_malloc || !p_disasm_iter || !p_free || !p_close) {
        fprintf(stderr, "pd_sweep: %s lacks the capstone functions\n", lib);
        return -1;
    }
    return 0;
}

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

struct area { uint64_t va, off, size; const uint8_t *data; };

static int64_t lo, hi;
static struct vec targets, weak, branch_src, pads, data_refs;

static int ends_with_word(const char *mnem, const char *word)
{
    const char *last = strrchr(mnem, ' ');
    return strcmp(last ? last + 1 : mnem, word) == 0;
}

static int no_fallthrough(const char *mnem)
{
    static const char *const w[] = {"jmp", "ret", "ud2", "hlt", "int3"};
    for (size_t i = 0; i < sizeof w / sizeof *w; i++)
        if (ends_with_word(mnem, w[i]))
            return 1;
    return 0;
}

static int is_word(char c) { return isalnum((unsigned char)c) || c == '_'; }

/* patchplan._is_pad: nop/int3, or i386 gcc's `lea esi, [esi]` & co. (`X, [?X]?`) */
static int is_pad(const char *mnem, const char *ops)
{
    if (!strcmp(mnem, "nop") || !strcmp(mnem, "int3"))
        return 1;
    if (strcmp(mnem, "lea") && strcmp(mnem, "mov"))
        return 0;
    size_t n = 0;
    while (is_word(ops[n]))
        n++;
    if (!n || strncmp(ops + n, ", ", 2))
        return 0;
    const char *r = ops + n + 2;
    int open = *r == '[';
    r += open;
    if (strncmp(r, ops, n))
        return 0;
    r += n;
    if (*r == ']')
        r++;
    return *r == 0;
}

static int is_hex_digit(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }

/* `0x[0-9a-f]+` at s: its length, 0 if none */
static size_t hex_at(const char *s)
{
    if (s[0] != '0' || s[1] != 'x' || !is_hex_digit(s[2]))
        return 0;
    size_t n = 2;
    while (is_hex_digit(s[n]))
        n++;
    return n;
}

/* `\[rip(?: ([+-]) (0x[0-9a-f]+|[0-9]+))?\]`, the first match: 1 and its displacement */
static int rip_operand(const char *ops, int64_t *disp)
{
    for (const char *p = strstr(ops, "[rip"); p; p = strstr(p + 1, "[rip")) {
        const char *q = p + 4;
        if (*q == ']') { *disp = 0; return 1; }
        if (q[0] != ' ' || (q[1] != '+' && q[1] != '-') || q[2] != ' ')
            continue;
        int neg = q[1] == '-';
        q += 3;
        size_t n = hex_at(q);
        int64_t v;
        if (n) {
            v = (int64_t)strtoull(q, NULL, 16);
        } else {
            while (q[n] >= '0' && q[n] <= '9')
                n++;
            if (!n)
                continue;
            v = (int64_t)strtoull(q, NULL, 10);
        }
        if (q[n] != ']')
            continue;
        *disp = neg ? -v : v;
        return 1;
    }
    return 0;
}

static int is_branch_mnem(const char *m)
{
    return m[0] == 'j' || !strncmp(m, "call", 4) || !strncmp(m, "loop", 4) ||
           !strncmp(m, "xbegin", 6);
}

/* patchplan._branch_field: (offset, size) of the displacement of a direct jmp/call/jcc */
static int branch_field(const uint8_t *d, size_t size, int *off, int *fsize)
{
    if (size >= 5) {
        uint8_t op = d[size - 5];
        if (op == 0xE8 || op == 0xE9 || (size >= 6 && d[size - 6] == 0x0F && op >= 0x80 &&
                                         op <= 0x8F)) {
            *off = (int)size - 4;
            *fsize = 4;
            return 1;
        }
    }
    if (size >= 2 && size <= 3 && (d[size - 2] == 0xEB || (d[size - 2] >= 0x70 &&
                                                          d[size - 2] <= 0x7F))) {
        *off = (int)size - 1;
        *fsize = 1;
        return 1;
    }
    return 0;
}

static void sweep(csh h, const struct area *a)
{
    cs_insn *insn = p_malloc(h);
    size_t pos = 0;
    while (pos < a->size) {
        const uint8_t *code = a->data + pos;
        size_t left = a->size - pos;
        uint64_t addr = a->va + pos;
        size_t end = pos;
        int dead = 0;
        int64_t run_start = 0, run_len = 0;
        while (p_disasm_iter(h, &code, &left, &addr, insn)) {
            int64_t at = (int64_t)insn->address;
            end = (size_t)(at + insn->size - (int64_t)a->va);
            const char *mnem = insn->mnemonic, *ops = insn->op_str;
            if ((dead || run_len) && is_pad(mnem, ops)) {
                if (!run_start)
                    run_start = at;
                run_len += insn->size;
                continue;
            }
            if (run_len >= 2) {
                push(&pads, run_start);
                push(&pads, run_len);
            }
            run_start = run_len = 0;
            dead = no_fallthrough(mnem);
            if (!strstr(ops, "0x") && !strstr(ops, "rip"))
                continue;
            int64_t disp;
            if (rip_operand(ops, &disp)) {
                int64_t t = at + insn->size + disp;
                push(lo <= t && t < hi ? &targets : &data_refs, t);
                continue;
            }
            int branch = is_branch_mnem(mnem);
            size_t n = hex_at(ops);
            int off, fsize;
            if (branch && n && ops[n] == 0 &&
                branch_field(a->data + (at - (int64_t)a->va), insn->size, &off, &fsize)) {
                push(&branch_src, (int64_t)strtoull(ops, NULL, 16));
                push(&branch_src, at + off);
                push(&branch_src, fsize);
                continue;
            }
            for (const char *p = ops; *p; ) {
                size_t k = hex_at(p);
                if (!k) { p++; continue; }
                int64_t t = (int64_t)strtoull(p, NULL, 16);
                push(lo <= t && t < hi ? &targets : branch ? &targets : &data_refs, t);
                p += k;
            }
        }
        /* capstone stops at an undecodable byte: resume after it (data in code) */
        pos = (end > pos ? end : pos) + ((end <= pos || end < a->size) ? 1 : 0);
    }
    p_free(insn, 1);
}

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

static void data_words(const struct area *blobs, size_t nblobs, int bits, int64_t got)
{
    uint64_t mask = bits == 64 ? ~0ULL : 0xFFFFFFFFULL;
    for (size_t b = 0; b < nblobs; b++) {
        const struct area *a = &blobs[b];
        size_t word = bits == 64 ? 8 : 4;
        for (size_t o = 0; o + word <= a->size; o += word) {
            uint64_t w = 0;
            memcpy(&w, a->data + o, word);
            if (w >= (uint64_t)lo && w < (uint64_t)hi)
                push(&weak, (int64_t)w);
        }
        if (got && bits == 32)
            for (size_t o = 0; o + 4 <= a->size; o += 4) {
                int32_t w;
                memcpy(&w, a->data + o, 4);
                int64_t t = (int64_t)(((uint64_t)got + (uint64_t)(int64_t)w) & 0xFFFFFFFFULL);
                if (lo <= t && t < hi)
                    push(&weak, t);
            }
    }
    /* jump tables relative to their own start (x86-64 PIC): lea tbl(%rip) in the sweep */
    sort_unique(&data_refs);
    for (size_t b = 0; b < nblobs; b++) {
        const struct area *a = &blobs[b];
        for (size_t r = 0; r < data_refs.n; r++) {
            int64_t ref = data_refs.v[r];
            if (ref < (int64_t)a->va || ref >= (int64_t)(a->va + a->size))
                continue;
            size_t off = (size_t)(ref - (int64_t)a->va);
            for (size_t k = 0; k < 4096; k++) {
                size_t o = off + 4 * k;
                if (o + 4 > a->size)
                    break;
                int32_t e;
                memcpy(&e, a->data + o, 4);
                int64_t t = (int64_t)(((uint64_t)ref + (uint64_t)(int64_t)e) & mask);
                if (!(lo <= t && t < hi))
                    break;
                push(&weak, t);
            }
        }
    }
}

static int cmp_src(const void *x, const void *y)
{
    const int64_t *a = x, *b = y;
    return a[0] != b[0] ? (a[0] > b[0]) - (a[0] < b[0]) : (a[1] > b[1]) - (a[1] < b[1]);
}

static void put(const struct vec *a)
{
    uint64_t n = a->n;
    fwrite(&n, sizeof n, 1, stdout);
    fwrite(a->v, sizeof *a->v, a->n, stdout);
}

int main(int argc, char **argv)
{
    if (argc < 7) {
        fputs("usage: pd_sweep LIBCAPSTONE FILE BITS LO HI GOT x:VA:OFF:SIZE... "
              "d:VA:OFF:SIZE...\n", stderr);
        return 2;
    }
    if (load_capstone(argv[1]) < 0)
        return 2;
    argv++, argc--;
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
    int bits = atoi(argv[2]);
    lo = (int64_t)strtoull(argv[3], NULL, 16);
    hi = (int64_t)strtoull(argv[4], NULL, 16);
    int64_t got = (int64_t)strtoull(argv[5], NULL, 16);
    struct area *areas = calloc((size_t)argc, sizeof *areas);
    struct area *blobs = calloc((size_t)argc, sizeof *blobs);
    size_t nareas = 0, nblobs = 0;
    for (int i = 6; i < argc; i++) {
        struct area a;
        char kind;
        unsigned long long va, off, size;
        if (sscanf(argv[i], "%c:%llx:%llx:%llx", &kind, &va, &off, &size) != 4 ||
            off > (uint64_t)st.st_size || size > (uint64_t)st.st_size - off) {
            fprintf(stderr, "pd_sweep: bad section %s\n", argv[i]);
            return 2;
        }
        a.va = va, a.off = off, a.size = size, a.data = file + off;
        if (kind == 'x')
            areas[nareas++] = a;
        else
            blobs[nblobs++] = a;
    }
    csh h;
    if (p_open(CS_ARCH_X86, bits == 64 ? CS_MODE_64 : CS_MODE_32, &h) != CS_ERR_OK) {
        fputs("pd_sweep: capstone cannot open an x86 decoder\n", stderr);
        return 2;
    }
    for (size_t i = 0; i < nareas; i++)
        sweep(h, &areas[i]);
    p_close(&h);
    data_words(blobs, nblobs, bits, got);
    sort_unique(&targets);
    sort_unique(&weak);
    /* by target, then source: each target's sources in the sweep's order */
    qsort(branch_src.v, branch_src.n / 3, 3 * sizeof *branch_src.v, cmp_src);
    put(&targets);
    put(&weak);
    put(&branch_src);
    put(&pads);
    return fflush(stdout) ? 2 : 0;
}
