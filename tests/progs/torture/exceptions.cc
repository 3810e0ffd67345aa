// Torture corpus: C++ exceptions thrown through probed code.  `thrower` and `middle`
// have sites but no handlers of their own (the exception unwinds through them);
// `catcher` has a site in a function with a landing pad.
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <sys/sdt.h>

static long n_thrower, n_middle, n_catcher, n_caught;

__attribute__((noinline)) static long thrower(long i)
{
    STAP_PROBE1(torture, thrower, i);
    n_thrower++;
    if (i % 3 == 0)
        throw std::runtime_error("three");
    return i + 1;
}

__attribute__((noinline)) static long middle(long i)
{
    long r = thrower(i) * 2;
    STAP_PROBE1(torture, middle, r);
    n_middle++;
    return r;
}

__attribute__((noinline)) static long catcher(long i)
{
    try {
        STAP_PROBE1(torture, catcher, i);
        n_catcher++;
        return middle(i);
    } catch (const std::runtime_error &) {
        n_caught++;
        return -1;
    }
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 1000, sum = 0;
    for (long i = 0; i < n; i++)
        sum += catcher(i);
    std::printf("checksum %ld caught %ld\n", sum, n_caught);
    std::printf("expect thrower %ld\nexpect middle %ld\nexpect catcher %ld\n", n_thrower,
                n_middle, n_catcher);
    return 0;
}
