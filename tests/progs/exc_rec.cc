// C++ exceptions through recursive frames with return probes (aarch64):
// catcher -> rec(depth) -> ... -> rec(0), which throws when n is odd; the frame at
// depth `at` (if any) catches and returns normally, so the frames above it return too,
// else catcher catches.  Prints the sum of the results: the same probed or not.  With
// a fourth argument, that many threads run the loop at once.
#include <pthread.h>
#include <cstdio>
#include <cstdlib>

extern "C" {
long rec(long d, long n, long at);
long catcher(long d, long n, long at);
}

__attribute__((noipa)) long rec(long d, long n, long at)
{
    if (d == 0) {
        if (n % 2)
            throw n;
        return n;
    }
    if (d == at) {
        try {
            return rec(d - 1, n, at) + 1;
        } catch (long v) {
            return v + 1000;
        }
    }
    long r = rec(d - 1, n, at);
    __asm__ volatile("" : "+r"(r)); // no tail call
    return r + 1;
}

__attribute__((noipa)) long catcher(long d, long n, long at)
{
    try {
        return rec(d, n, at);
    } catch (long v) {
        return -v;
    }
}

static long iters, depth, at;

static void *loop(void *)
{
    long total = 0;
    for (long i = 0; i < iters; i++)
        total += catcher(depth, i, at);
    return (void *)total;
}

int main(int argc, char **argv)
{
    iters = argc > 1 ? atol(argv[1]) : 10, depth = argc > 2 ? atol(argv[2]) : 12;
    at = argc > 3 ? atol(argv[3]) : -1;
    long threads = argc > 4 ? atol(argv[4]) : 0, total = 0;
    pthread_t th[16];
    for (long t = 0; t < threads && t < 16; t++)
        pthread_create(&th[t], NULL, loop, NULL);
    for (long t = 0; t < threads && t < 16; t++) {
        void *r;
        pthread_join(th[t], &r);
        total += (long)r;
    }
    if (threads == 0)
        total = (long)loop(NULL);
    printf("total=%ld\n", total);
    return 0;
}
