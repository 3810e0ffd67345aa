/* Marks for the uconversions functions (tests/test_uconversions.py): a UTF-8 string,
 * the same text as UTF-16 (with a surrogate pair) and UTF-32, ill-formed UTF-16 and
 * UTF-32, an unmapped address, integers of every width and a buffer holding a NUL. */
#include <stdint.h>
#include <sys/sdt.h>

static const char utf8[] = "h\xc3\xa9llo \xe2\x82\xac";
static const uint16_t utf16[] = {'h', 0xE9, 0x20AC, 0xD83D, 0xDE00, 0};
static const uint32_t utf32[] = {'h', 0xE9, 0x20AC, 0x1F600, 0};
static const uint16_t lone16[] = {'a', 0xD800, 'b', 0};
static const uint32_t big32[] = {'a', 0x110000, 0};
static const char buf[] = {'a', 0, 'b', '\n', (char)0xff};

static struct {
    int8_t i8;
    int16_t i16;
    int32_t i32;
    int64_t i64;
    long l;
} v = {-2, -300, -70000, -5000000000LL, -7};

int main(void)
{
    DTRACE_PROBE3(uc, strings, utf8, utf16, utf32);
    DTRACE_PROBE3(uc, bad, lone16, big32, (uintptr_t)16);
    DTRACE_PROBE5(uc, ints, &v.i8, &v.i16, &v.i32, &v.i64, &v.l);
    DTRACE_PROBE2(uc, buf, buf, (int)sizeof buf);
    return 0;
}
