/* A target for tests/test_stap_compat.py: N ticks (mark "tick", $arg1 = i), then one
 * mark "word" per argument after N ($arg1 = the string, $arg2 = its length), then
 * mark "done" ($arg1 = N). */
#include <stdlib.h>
#include <string.h>
#include <sys/sdt.h>

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 10;
    for (long i = 0; i < n; i++)
        STAP_PROBE1(compat, tick, i);
    for (int a = 2; a < argc; a++)
        STAP_PROBE2(compat, word, argv[a], (long)strlen(argv[a]));
    STAP_PROBE1(compat, done, (long)n);
    return 0;
}
