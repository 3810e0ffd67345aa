/* A target for tests/test_stap_tapset3.py: calls result(v) for each argument v (a
 * function returning v, as a long), then fires mark "text" with a UTF-16 and a UTF-32
 * copy of a short text ($arg1, $arg2) and its UTF-8 bytes ($arg3), then mark "done"
 * with the sum of the results ($arg1) and how many SIGUSR1 it caught ($arg2). */
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/sdt.h>

__attribute__((noinline)) long result(long v)
{
    __asm__ volatile("" : "+r"(v));
    return v;
}

static volatile sig_atomic_t caught;

static void on_usr1(int sig)
{
    (void)sig;
    caught++;
}

int main(int argc, char **argv)
{
    signal(SIGUSR1, on_usr1);
    long sum = 0;
    for (int a = 1; a < argc; a++)
        sum += result(strtol(argv[a], NULL, 0));
    /* "aé€😀": one, two, three and four UTF-8 bytes; the last a surrogate pair in UTF-16 */
    static const uint16_t u16[] = {0x61, 0xe9, 0x20ac, 0xd83d, 0xde00, 0};
    static const uint32_t u32[] = {0x61, 0xe9, 0x20ac, 0x1f600, 0};
    static const char u8[] = "a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80";
    STAP_PROBE3(tapset3, text, u16, u32, u8);
    STAP_PROBE2(tapset3, done, sum, (long)caught);
    return 0;
}
