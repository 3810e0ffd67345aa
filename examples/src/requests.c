/* requests N: serves N fake requests; each fires `request__start` and
 * `request__done` with its id and a kind ("get"/"put"), sleeping a
 * kind-dependent time in between, so scripts can measure latency. */
#include <stdlib.h>
#include <sys/sdt.h>
#include <time.h>

static void pause_us(long us)
{
    struct timespec ts = {0, us * 1000};
    nanosleep(&ts, NULL);
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 50;
    for (long id = 0; id < n; id++) {
        const char *kind = id % 4 ? "get" : "put";
        DTRACE_PROBE2(pydyn_example, request__start, id, kind);
        pause_us(id % 4 ? 100 : 1000);
        DTRACE_PROBE2(pydyn_example, request__done, id, kind);
    }
    return 0;
}
