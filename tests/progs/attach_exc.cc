// A long-running C++ target for pydyn -x with .return probes on frames that
// exceptions unwind and backtrace() walks (tests/test_attach_unwind.py).
//
// attach_exc [PLUGIN]: loops i = 1, 2, ... calling outer(i) (exc_chain.h: it throws
// when i % 3 == 0), which is 2i + 2, or -5 after a throw; every 16th iteration
// bt_mid(3) checks that backtrace() names bt_leaf, bt_mid and main.
// It prints "ready" once looping; SIGUSR2 makes it dlopen PLUGIN, call
// plug_outer(k) for k = 0..99 (plug_outer -> plug_catch, whose catch is the
// plugin's own, -> plug_thrower, which throws for even k) and dlclose it, then
// print "plugin SUM"; SIGUSR1 stops it: "iterations N bad B bt_bad K".
// attach_exc block: calls blocked(i) in a loop, each sleeping 200 ms, so a detach
// finds its frame live; after SIGUSR1 the one running calls backtrace() and throws
// through its own frame: "blocked calls N bt B caught" (B = 7: all callers found).
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "exc_chain.h"

static volatile sig_atomic_t stop, plugin;

extern "C" long blocked(long n);

__attribute__((noipa)) long blocked(long n)
{
    for (int k = 0; k < 200 && !stop; k++)
        usleep(1000);
    if (stop)
        throw std::runtime_error(std::to_string(bt_mid(3)));
    return n;
}

static void on_usr1(int) { stop = 1; }
static void on_usr2(int) { plugin = 1; }

static void run_plugin(const char *path)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        printf("dlopen: %s\n", dlerror());
        fflush(stdout);
        return;
    }
    long (*f)(long) = (long (*)(long))dlsym(h, "plug_outer");
    long sum = 0;
    for (long k = 0; k < 100; k++)
        sum += f(k);
    dlclose(h);
    printf("plugin %ld\n", sum);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    signal(SIGUSR1, on_usr1);
    signal(SIGUSR2, on_usr2);
    if (argc > 1 && strcmp(argv[1], "block") == 0) {
        printf("ready\n");
        fflush(stdout);
        long calls = 0;
        try {
            for (;;)
                calls += blocked(1);
        } catch (const std::exception &e) {
            printf("blocked calls %ld bt %s caught\n", calls, e.what());
        }
        return 0;
    }
    long i = 0, bad = 0, bt_bad = 0;
    printf("ready\n");
    fflush(stdout);
    while (!stop) {
        i++;
        long want = i % 3 == 0 ? -5 : 2 * i + 2;
        bad += outer(i) != want;
        if (i % 16 == 0)
            bt_bad += bt_mid(3) != 7;
        if (plugin && argc > 1) {
            plugin = 0;
            run_plugin(argv[1]);
        }
        usleep(20);
    }
    printf("iterations %ld bad %ld bt_bad %ld cleanups %s\n", i, bad, bt_bad,
           cleanups == i && rethrows == i / 3 ? "ok" : "BAD");
    return 0;
}
