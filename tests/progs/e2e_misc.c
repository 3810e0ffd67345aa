/* e2e_misc MODE: marks for tests/test_e2e_core.py's printf, pid(), exit() and
 * error tests.  It prints its pid (`pid TAG N`) and what a probe should
 * report (`expect TAG ...`).
 *   fmt    `fmt` mark with a string, UINT64_MAX, (unsigned char)0x81 and -1
 *   exit   `stop` mark (a script's exit() ends the session there), at once the
 *          `right_after_stop` mark, after 3 s `after_stop`, then `target done`
 *   fault  `fault` mark passing the bad address 1 (the error ends the session), at
 *          once `right_after_fault`, after 2 s `after_fault`, then `target done`
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/sdt.h>

/* Lines name the build (-DE2E_TAG="m32"), so several builds can share a session. */
#ifndef E2E_TAG
#define E2E_TAG "e2e"
#endif

__attribute__((noinline)) long long e2e_opaque(long long x)
{
    __asm__ volatile("" : "+g"(x));
    return x;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "fmt";
    printf("pid " E2E_TAG " %ld\n", (long)getpid());
    fflush(stdout);
    if (!strcmp(mode, "fmt")) {
        static const char msg[] = "hello, pydyn";
        unsigned long long big = (unsigned long long)e2e_opaque(-1);
        unsigned char uc = (unsigned char)e2e_opaque(0x81);
        int neg = (int)e2e_opaque(-1);
        printf("expect " E2E_TAG " fmt %s|%lld %llu %llx|%lld %llu %llx|%lld %llu %llx|%%\n", msg,
               (long long)big, big, big, (long long)uc, (unsigned long long)uc,
               (unsigned long long)uc, (long long)neg, (unsigned long long)(long long)neg,
               (unsigned long long)(long long)neg);
        fflush(stdout);
        STAP_PROBE4(pydyn_e2e, fmt, msg, big, uc, neg);
    } else if (!strcmp(mode, "exit")) {
        STAP_PROBE(pydyn_e2e, stop);
        STAP_PROBE(pydyn_e2e, right_after_stop);
        sleep(3);
        STAP_PROBE(pydyn_e2e, after_stop);
        puts("target done");
    } else if (!strcmp(mode, "fault")) {
        STAP_PROBE1(pydyn_e2e, fault, (long)e2e_opaque(1));
        STAP_PROBE(pydyn_e2e, right_after_fault);
        /* Long enough for the launcher to see the session end first. */
        sleep(2);
        STAP_PROBE(pydyn_e2e, after_fault);
        puts("target done");
    }
    return 0;
}
