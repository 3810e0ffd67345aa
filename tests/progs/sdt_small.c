/* Two probes for tests that damage a copy of the binary (pc moved to 0, nop
 * overwritten, garbage notes).  pydyn_unused is never called; built with
 * -ffunction-sections -Wl,--gc-sections, some linkers leave its note dangling. */
#include <sys/sdt.h>

void pydyn_unused(int x) { STAP_PROBE1(pydyn_test, unused, x); }

int main(int argc, char **argv)
{
    (void)argv;
    STAP_PROBE1(pydyn_test, used, argc);
    return 0;
}
