// The call chain of func_exc.cc and attach_exc.cc: outer -> middle (a
// destructor: cleanup pad) -> relay (catch, rethrow) -> thrower, which throws every
// third call; outer catches.  bt_leaf, called through bt_mid, says which of bt_leaf,
// bt_mid and main backtrace() finds (7: all three).
#include <dlfcn.h>
#include <execinfo.h>
#include <cstring>
#include <stdexcept>

static long cleanups, rethrows;

// C linkage: the symbols are the plain names (no DWARF, so no demangled matching).
extern "C" {
long thrower(long n);
long relay(long n);
long middle(long n);
long outer(long n);
int bt_leaf(int depth);
int bt_mid(int depth);
}

struct Guard {
    ~Guard() { cleanups++; }
};

__attribute__((noipa)) long thrower(long n)
{
    if (n % 3 == 0)
        throw std::runtime_error("third");
    return 2 * n;
}

__attribute__((noipa)) long relay(long n)
{
    try {
        return thrower(n) + 1;
    } catch (...) {
        rethrows++;
        throw;
    }
}

__attribute__((noipa)) long middle(long n)
{
    Guard g;
    long r = relay(n);
    __asm__ volatile("" : "+r"(r));
    return r + 1;
}

__attribute__((noipa)) long outer(long n)
{
    try {
        return middle(n);
    } catch (const std::exception &e) {
        return -(long)strlen(e.what());
    }
}

// Which of the expected callers backtrace() finds (names from the dynamic symbols).
__attribute__((noipa)) int bt_leaf(int depth)
{
    void *frames[64];
    int n = backtrace(frames, 64), found = 0;
    const char *want[] = {"bt_leaf", "bt_mid", "main"};
    for (int i = 0; i < n; i++) {
        Dl_info info;
        if (!dladdr(frames[i], &info) || !info.dli_sname)
            continue;
        for (int k = 0; k < 3; k++)
            if (strcmp(info.dli_sname, want[k]) == 0)
                found |= 1 << k;
    }
    return found + depth;
}

__attribute__((noipa)) int bt_mid(int depth)
{
    int r = depth > 0 ? bt_mid(depth - 1) : bt_leaf(0);
    __asm__ volatile("" : "+r"(r));
    return r;
}
