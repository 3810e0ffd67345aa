/* one_hit N [MS]: hits mark "one" once with N, then sleeps MS milliseconds (0 by
 * default) and exits: one process of a long loop, or of many alive at once. */
#include <stdlib.h>
#include <sys/sdt.h>
#include <time.h>

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 0;
    long ms = argc > 2 ? atol(argv[2]) : 0;
    STAP_PROBE1(recycle, one, n);
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    return 0;
}
