/* A probe guarded by a semaphore, laid out the way `dtrace -h` / `dtrace -G` do:
 * an unsigned short in section .probes that tracers increment to enable it. */
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>

__extension__ unsigned short pydyn_test_sema_semaphore
    __attribute__((unused)) __attribute__((section(".probes")));

#define PYDYN_TEST_SEMA_ENABLED() __builtin_expect(pydyn_test_sema_semaphore, 0)

__attribute__((noinline)) void pydyn_sema_probe(int x)
{
    if (PYDYN_TEST_SEMA_ENABLED())
        STAP_PROBE1(pydyn_test, sema, x);
}
