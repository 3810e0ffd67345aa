/* e2e_misc MODE: marks for tests/test_e2e_core.py's printf, pid(), exit() and
 * error tests.  The program prints what a probe should report (`expect ...`).
 *   fmt    `fmt` mark with a string, UINT64_MAX, (unsigned char)0x81 and -1
 *   exit   `stop` mark, then sleeps 30 s (a script's exit() should end it)
 *   fault  `fault` mark passing the bad address 1, then after 1 s `target done`
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/sdt.h>

__attribute__((noinline)) long long e2e_opaque(long long x)
{
    __asm__ volatile("" : "+g"(x));
    return x;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "fmt";
    printf("pid %ld\n", (long)getpid());
    fflush(stdout);
    if (!strcmp(mode, "fmt")) {
        static const char msg[] = "hello, pydyn";
        unsigned long long big = (unsigned long long)e2e_opaque(-1);
        unsigned char uc = (unsigned char)e2e_opaque(0x81);
        int neg = (int)e2e_opaque(-1);
        printf("expect fmt %s|%lld %llu %llx|%lld %llu %llx|%lld %llu %llx|%%\n", msg,
               (long long)big, big, big, (long long)uc, (unsigned long long)uc,
               (unsigned long long)uc, (long long)neg, (unsigned long long)(long long)neg,
               (unsigned long long)(long long)neg);
        fflush(stdout);
        STAP_PROBE4(pydyn_e2e, fmt, msg, big, uc, neg);
    } else if (!strcmp(mode, "exit")) {
        STAP_PROBE(pydyn_e2e, stop);
        sleep(30);
        puts("not reached");
    } else if (!strcmp(mode, "fault")) {
        STAP_PROBE1(pydyn_e2e, fault, (long)e2e_opaque(1));
        /* Long enough for the launcher to see the session end first. */
        sleep(1);
        puts("target done");
    }
    return 0;
}
