/* Driver for fp_garbage_sp.S: n hits on the main thread, then n on a second thread
 * (its signal stack comes from the runtime's pthread_create). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

long gs_probe(long a, long b);

static long n;

static void *hits(void *base)
{
    long sum = 0;
    for (long i = 0; i < n; i++)
        sum += gs_probe((long)base + i, 100 * i);
    return (void *)sum;
}

int main(int argc, char **argv)
{
    n = argc > 1 ? atol(argv[1]) : 3;
    long sum = (long)hits((void *)0);
    pthread_t t;
    void *r;
    pthread_create(&t, NULL, hits, (void *)1000);
    pthread_join(t, &r);
    printf("gs sum %ld %ld\n", sum, (long)r);
    return 0;
}
