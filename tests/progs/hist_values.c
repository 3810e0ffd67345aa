/* tests/test_hist_string.py: 123 values over 31 log buckets, a key 0..2 each, then done. */
#include <sys/sdt.h>
int main(void) {
    for (int i = 0; i < 123; i++) {
        long v = (1L << (i % 31)) + i;   /* a register of either ABI */
        DTRACE_PROBE2(hs, v, v, i % 3);
    }
    DTRACE_PROBE(hs, done);
    return 0;
}
