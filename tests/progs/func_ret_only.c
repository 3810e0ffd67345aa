/* Leaves whose `ret` lies inside their entry's patch window (tests/test_func_exits.py):
 * at -O2 `work` is `lea; ret` on x86-64, `ident` one load and `ret` on both ABIs.  Calls
 * each N times from two threads and prints the calls and the sum of what they returned,
 * then where each entry jumps: the first bytes there ("not patched" without probes).
 * `func_ret_only spin`: prints "ready", calls them until SIGUSR1 (for pydyn -x), then
 * "spin ok" if every call returned what it should. */
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NOIPA __attribute__((noipa))

NOIPA long work(long i, long s) { return s + i; }
NOIPA long ident(long x) { return x; }
/* after them in .text: each ret has padding after it */
NOIPA long after(long x) { return x * 7 + 3; }

struct part {
    long n, calls_w, sum_w, calls_i, sum_i;
};

static void *run(void *arg)
{
    struct part *p = arg;
    long acc = 0;
    for (long i = 0; i < p->n; i++) {
        acc = work(i, acc);
        p->calls_w++;
        p->sum_w += acc;
        long v = ident(i * 3 - 5);
        p->calls_i++;
        p->sum_i += v;
    }
    return NULL;
}

/* The bytes where a patched entry's `jmp rel32` leads (the stub's code, read only). */
static void show_entry(const char *name, const unsigned char *f)
{
    printf("%s entry", name);
    if (f[0] != 0xe9) {
        printf(" not patched\n");
        return;
    }
    int32_t rel;
    memcpy(&rel, f + 1, 4);
    const unsigned char *to = f + 5 + rel;
    for (int i = 0; i < 8; i++)
        printf(" %02x", to[i]);
    printf("\n");
}

static volatile sig_atomic_t stop;
static void on_usr1(int sig) { (void)sig; stop = 1; }

static int spin(void)
{
    signal(SIGUSR1, on_usr1);
    printf("ready\n");
    fflush(stdout);
    long bad = 0;
    for (long i = 0; !stop; i++)
        bad += work(i, 5) != i + 5 || ident(i) != i;
    printf("spin %s\n", bad ? "BAD" : "ok");
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "spin") == 0)
        return spin();
    long n = argc > 1 ? atol(argv[1]) : 1000;
    struct part parts[2] = {{n, 0, 0, 0, 0}, {n / 2, 0, 0, 0, 0}};
    pthread_t t;
    if (pthread_create(&t, NULL, run, &parts[1]) != 0)
        return 1;
    run(&parts[0]);
    pthread_join(t, NULL);
    long cw = parts[0].calls_w + parts[1].calls_w, sw = parts[0].sum_w + parts[1].sum_w;
    long ci = parts[0].calls_i + parts[1].calls_i, si = parts[0].sum_i + parts[1].sum_i;
    printf("work %ld %ld\nident %ld %ld\n", cw, sw, ci, si);
    show_entry("work", (const unsigned char *)(uintptr_t)work);
    show_entry("ident", (const unsigned char *)(uintptr_t)ident);
    printf("after %ld\n", after(n));
    return 0;
}
