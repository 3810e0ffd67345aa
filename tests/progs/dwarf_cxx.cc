// C++ names for tests/test_cxx_names.py: functions in a namespace, methods
// (const, overloaded), a constructor and a template instance.  `./dwarf_cxx N`
// runs N rounds; each calls every one of them once with values from the round.
#include <cstdio>
#include <cstdlib>

#define PROBED __attribute__((noinline, noclone))

namespace ns {
struct Foo {
    int v;
    PROBED explicit Foo(int x) : v(x) {}
    PROBED int bar(int k) { return v + k; }
    PROBED int bar(int k, int m) { return v + k * m; }
    PROBED int get() const { return v; }
};

PROBED long helper(long x) { return x * 2; }
}  // namespace ns

template <typename T> PROBED T twice(T x) { return x + x; }

int main(int argc, char **argv)
{
    int n = argc > 1 ? std::atoi(argv[1]) : 2;
    long sum = 0;
    for (int i = 0; i < n; i++) {
        ns::Foo f(i);
        sum += f.bar(1) + f.bar(2, 3) + f.get() + ns::helper(i) + twice<int>(i);
    }
    std::printf("sum=%ld\n", sum);
    return 0;
}
