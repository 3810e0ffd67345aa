// The plugin attach_exc.cc dlopens after the attach: an exception caught inside
// it (by its own __cxa_begin_catch, through its own GOT) below a hooked frame.
#include <stdexcept>

extern "C" {
long plug_thrower(long k);
long plug_catch(long k);
long plug_outer(long k);
}

__attribute__((noipa)) long plug_thrower(long k)
{
    if (k % 2 == 0)
        throw std::logic_error("even");
    return k;
}

__attribute__((noipa)) long plug_catch(long k)
{
    try {
        return plug_thrower(k);
    } catch (const std::exception &) {
        return -1;
    }
}

__attribute__((noipa)) long plug_outer(long k)
{
    long r = plug_catch(k);
    __asm__ volatile("" : "+r"(r));
    return 10 * r;
}
