/* thread_ends N: N threads, each hits "work" with its index and ends its own way:
 * thread 1 by pthread_exit, thread 2 cancelled while it waits, the others return. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/sdt.h>
#include <unistd.h>
static void *work(void *arg)
{
    long i = (long)arg;
    DTRACE_PROBE1(thr, work, i);
    if (i == 1)
        pthread_exit(NULL);
    if (i == 2)
        for (;;) { pthread_testcancel(); usleep(1000); }
    return NULL;
}
int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 4;
    pthread_t t[64];
    for (long i = 0; i < n; i++)
        pthread_create(&t[i], NULL, work, (void *)i);
    if (n > 2) { usleep(20000); pthread_cancel(t[2]); }
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    printf("joined %d\n", n);
    return 0;
}
