/* Torture corpus: probes hit while a SIGALRM timer fires every 50 us, one of the
 * sites inside the signal handler (a hit there while the thread is in a
 * handler already is a skipped probe, counted).  Prints the hits each site saw and a checksum. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sdt.h>
#include <sys/time.h>

static volatile long n_alarm, n_work;

static void on_alarm(int sig)
{
    (void)sig;
    STAP_PROBE1(torture, alarm, n_alarm);
    n_alarm++;
}

__attribute__((noinline)) static long work(long i)
{
    STAP_PROBE2(torture, work, i, n_alarm);
    n_work++;
    return (i * 2654435761u) >> 7;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 200000, sum = 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = {{0, 50}, {0, 50}};
    setitimer(ITIMER_REAL, &it, NULL);
    for (long i = 0; i < n; i++)
        sum += work(i);
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
    printf("checksum %ld\n", sum);
    printf("expect work %ld\nexpect alarm %ld\n", n_work, n_alarm);
    return 0;
}
