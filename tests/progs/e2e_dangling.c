/* A mark in a function nothing calls, for the dangling-note test: linked with
 * -ffunction-sections -Wl,--gc-sections the function is dropped while its
 * .note.stapsdt entry may stay behind (the test patches the note's pc to 0
 * if the linker left a valid one).  `used` fires three times. */
#include <stdio.h>
#include <sys/sdt.h>

void e2e_unused(int x) { STAP_PROBE1(pydyn_e2e, unused, x); }

int main(int argc, char **argv)
{
    (void)argv;
    for (int i = 0; i < 3; i++)
        STAP_PROBE1(pydyn_e2e, used, argc + i);
    puts("dangling: done");
    return 0;
}
