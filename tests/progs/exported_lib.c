/* .function("*").exported for tests/test_exported.py: api_one and api_two are
 * exported, internal is hidden and helper static (neither in .dynsym). */
#define PROBED __attribute__((noinline, noclone))
PROBED static int helper(int x) { return x * 2; }
PROBED __attribute__((visibility("hidden"))) int internal(int x) { return helper(x) + 1; }
PROBED int api_one(int x) { return internal(x); }
PROBED int api_two(int x) { return helper(x) + api_one(x); }
