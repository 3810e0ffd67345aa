/* Fires `tick` with its own CLOCK_REALTIME and CLOCK_MONOTONIC reads, N times a few
 * microseconds apart (tests/test_clock.py): the probe's clocks must agree with them. */
#include <stdint.h>
#include <stdlib.h>
#include <sys/sdt.h>
#include <time.h>

static int64_t now(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* in memory: an i386 register cannot hold a 64-bit SDT argument */
static volatile int64_t real, mono;

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 4000;
    for (long i = 0; i < n; i++) {
        real = now(CLOCK_REALTIME);
        mono = now(CLOCK_MONOTONIC);
        STAP_PROBE2(pydyn, tick, real, mono);
        int64_t until = mono + 5000;
        while (now(CLOCK_MONOTONIC) < until)
            ;
    }
    return 0;
}
