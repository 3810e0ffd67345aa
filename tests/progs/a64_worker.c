/* a64_worker N: fires `work(ARCH, i)` N times and prints `worker ARCH N SUM`.
 * Built for x86-64 and for aarch64 (tests/test_aarch64.py), both run in one
 * session so their probes update the same globals in the shared segment. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/sdt.h>

#if defined(__aarch64__)
#define ARCH 3 /* PD_ABI_AARCH64 */
#elif defined(__x86_64__)
#define ARCH 1 /* PD_ABI_X86_64 */
#else
#define ARCH 2
#endif

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 10;
    long sum = 0;
    for (long i = 0; i < n; i++) {
        STAP_PROBE2(pydyn_mixed, work, ARCH, i);
        sum += i;
    }
    printf("worker %d %ld %ld\n", ARCH, n, sum);
    return 0;
}
