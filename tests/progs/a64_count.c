/* a64_count N: counting and a semaphore on aarch64 (tests/test_aarch64.py).
 *
 * `tick` is guarded by its semaphore, as `dtrace -h` headers do: it fires only
 * while a tracer holds the semaphore up, so the counts printed here say whether
 * pydyn's module incremented it in the guest.  `done` passes the totals and a
 * string, read back with user_string() through the guest's memory reads. */
#define _SDT_HAS_SEMAPHORES 1
#include <stdio.h>
#include <stdlib.h>
#include <sys/sdt.h>

__extension__ unsigned short pydyn_a64_tick_semaphore
    __attribute__((unused)) __attribute__((section(".probes")));
/* `done` fires unguarded; sdt.h still wants its semaphore when _SDT_HAS_SEMAPHORES. */
__extension__ unsigned short pydyn_a64_done_semaphore
    __attribute__((unused)) __attribute__((section(".probes")));

static const char a64_label[] = "a64-count label";

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 10;
    long sum = 0, guarded = 0;
    printf("a64_count: semaphore %u\n", (unsigned)pydyn_a64_tick_semaphore);
    for (long i = 0; i < n; i++) {
        if (__builtin_expect(pydyn_a64_tick_semaphore, 0)) {
            STAP_PROBE1(pydyn_a64, tick, i);
            guarded++;
        }
        sum += i;
    }
    STAP_PROBE3(pydyn_a64, done, n, sum, a64_label);
    printf("a64_count: %ld ticks, %ld guarded, sum %ld\n", n, guarded, sum);
    return 0;
}
