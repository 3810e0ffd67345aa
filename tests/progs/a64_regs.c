/* a64_regs N: calls a64_regs_probe (a64_regs.S) N times, and with SVE
 * a64_regs_sve_probe too, and prints `a64_regs: N calls, sve VL, M bad` with one
 * `bad WHAT got WANT` line per register that did not survive the `regs` or
 * `regs_sve` mark (tests/test_aarch64.py).  VL is the vector length in bytes, 0
 * without SVE. */
#include <asm/hwcap.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/prctl.h>

#define A64_REGS_WORDS 94 /* x0-x28, nzcv, q0-q31 as (low, high) */

void a64_regs_probe(uint64_t out[A64_REGS_WORDS]);
void a64_regs_sve_probe(uint8_t *out);

static uint64_t pattern(unsigned n) { return ((uint64_t)(0xa640 + n) << 48) | (n * 0x101u); }

static unsigned check(const char *what, unsigned n, uint64_t got, uint64_t want)
{
    if (got == want)
        return 0;
    printf("bad %s%u %016" PRIx64 " %016" PRIx64 "\n", what, n, got, want);
    return 1;
}

/* One call of a64_regs_sve_probe: z lanes, then p0-p15 and ffr (= p5). */
static unsigned check_sve(unsigned vl)
{
    unsigned pl = vl / 8, bad = 0;
    uint8_t *out = calloc(1, 32 * vl + 17 * pl);
    if (!out)
        return 1;
    a64_regs_sve_probe(out);
    for (unsigned n = 0; n < 32; n++)
        for (unsigned i = 0; i < vl / 8; i++) {
            uint64_t lane;
            memcpy(&lane, out + n * vl + 8 * i, 8);
            bad += check("z", n, lane, pattern(n) + i);
        }
    for (unsigned n = 0; n < 17; n++) {
        unsigned active = (n == 16 ? 5 : n) + 1; /* whilelo .b: the first n+1 bits */
        for (unsigned i = 0; i < pl; i++) {
            unsigned bits = active >= 8 * (i + 1) ? 8 : active > 8 * i ? active - 8 * i : 0;
            bad += check("p", n, out[32 * vl + n * pl + i], (1u << bits) - 1);
        }
    }
    free(out);
    return bad;
}

int main(int argc, char **argv)
{
    long calls = argc > 1 ? atol(argv[1]) : 1;
    unsigned bad = 0;
    int sve = (getauxval(AT_HWCAP) & HWCAP_SVE) != 0;
    unsigned vl = sve ? (unsigned)(prctl(PR_SVE_GET_VL) & PR_SVE_VL_LEN_MASK) : 0;
    for (long c = 0; c < calls; c++) {
        uint64_t out[A64_REGS_WORDS];
        a64_regs_probe(out);
        for (unsigned n = 0; n < 29; n++)
            bad += check("x", n, out[n], pattern(n));
        bad += check("nzcv", 0, out[29], 0xa0000000u);
        for (unsigned n = 0; n < 32; n++) {
            unsigned from = n < 29 ? n : 0;
            bad += check("q-lo", n, out[30 + 2 * n], ~pattern(from));
            bad += check("q-hi", n, out[31 + 2 * n], pattern(from));
        }
        if (sve)
            bad += check_sve(vl);
    }
    printf("a64_regs: %ld calls, sve %u, %u bad\n", calls, vl, bad);
    return bad != 0;
}
