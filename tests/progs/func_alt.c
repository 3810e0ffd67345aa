/* A signal handler on a sigaltstack mapped above the thread's stack calls a probed
 * function while the thread's frames are hooked (test_func_stripped_dlopen_unwind.py): slot order
 * across the two stacks means nothing, so no live frame may be taken for a longjmp
 * leftover. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <sys/mman.h>

static void *alt;
static volatile long hsum;

__attribute__((noipa)) long g(long x) { return x * 2; }

static void on_usr1(int sig) { hsum += g(sig); }

__attribute__((noipa)) long f(long x)
{
    raise(SIGUSR1);
    __asm__ volatile("" ::: "memory");
    return x + 1;
}

static void *run(void *arg)
{
    (void)arg;
    stack_t ss = {.ss_sp = alt, .ss_size = 65536, .ss_flags = 0};
    sigaltstack(&ss, 0);
    long s = 0;
    for (long i = 0; i < 100; i++)
        s += f(i);
    return (void *)s;
}

int main(void)
{
    /* mapped before the thread's stack: usually above it */
    alt = mmap(0, 65536, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    struct sigaction sa = {0};
    sa.sa_handler = on_usr1;
    sa.sa_flags = SA_ONSTACK;
    sigaction(SIGUSR1, &sa, 0);
    pthread_t t;
    void *r;
    pthread_create(&t, 0, run, 0);
    pthread_join(t, &r);
    printf("s=%ld h=%ld\n", (long)r, hsum);
    return 0;
}
