"""printf formatting against SystemTap's own expected outputs.

Expected strings are copied from stap's testsuite (testsuite/systemtap.printf/
*.exp, which stap runs with both the compiled printf and -DSTP_LEGACY_PRINT)
or, where no test exists, derived by hand from runtime/vsprintf.c and
staptree.cxx `print_format::string_to_components`; each test says which.
"""

from __future__ import annotations

import pytest

from pydyn.launcher.errors import ScriptError, SourceLocation
from pydyn.launcher.format import Conversion, format_printf, format_values, parse_format

pytestmark = pytest.mark.unit   # no compiler, no target process: `make check`

# testsuite/systemtap.printf/int1.stp
INT1 = [1, 10, 9000000000000, -1, -1024]  # i, j, k, m, n

# (format, expected) pairs: int1.stp's formats, int1.exp's lines.
INT1_CASES = [
    ("%d", "1,10,9000000000000,-1,-1024"),
    ("%2d", " 1,10,9000000000000,-1,-1024"),
    ("%16d", "               1,              10,   9000000000000,              -1,"
             "           -1024"),
    ("%016d", "0000000000000001,0000000000000010,0009000000000000,-000000000000001,"
              "-000000000001024"),
    ("%ld", "1,10,9000000000000,-1,-1024"),
    ("%#d", "1,10,9000000000000,-1,-1024"),
    ("%#ld", "1,10,9000000000000,-1,-1024"),
    ("%u", "1,10,9000000000000,18446744073709551615,18446744073709550592"),
    ("%2u", " 1,10,9000000000000,18446744073709551615,18446744073709550592"),
    ("%16u", "               1,              10,   9000000000000,18446744073709551615,"
             "18446744073709550592"),
    ("%016u", "0000000000000001,0000000000000010,0009000000000000,18446744073709551615,"
              "18446744073709550592"),
    ("%lu", "1,10,9000000000000,18446744073709551615,18446744073709550592"),
    ("%#u", "1,10,9000000000000,18446744073709551615,18446744073709550592"),
    ("%#lu", "1,10,9000000000000,18446744073709551615,18446744073709550592"),
    ("%x", "1,a,82f79cd9000,ffffffffffffffff,fffffffffffffc00"),
    ("%2x", " 1, a,82f79cd9000,ffffffffffffffff,fffffffffffffc00"),
    ("%16x", "               1,               a,     82f79cd9000,ffffffffffffffff,"
             "fffffffffffffc00"),
    ("%016x", "0000000000000001,000000000000000a,0000082f79cd9000,ffffffffffffffff,"
              "fffffffffffffc00"),
    ("%16X", "               1,               A,     82F79CD9000,FFFFFFFFFFFFFFFF,"
             "FFFFFFFFFFFFFC00"),
    ("%016X", "0000000000000001,000000000000000A,0000082F79CD9000,FFFFFFFFFFFFFFFF,"
              "FFFFFFFFFFFFFC00"),
    ("%lx", "1,a,82f79cd9000,ffffffffffffffff,fffffffffffffc00"),
    ("%#x", "0x1,0xa,0x82f79cd9000,0xffffffffffffffff,0xfffffffffffffc00"),
    ("%#lx", "0x1,0xa,0x82f79cd9000,0xffffffffffffffff,0xfffffffffffffc00"),
    ("%o", "1,12,202757163310000,1777777777777777777777,1777777777777777776000"),
    ("%2o", " 1,12,202757163310000,1777777777777777777777,1777777777777777776000"),
    ("%16o", "               1,              12, 202757163310000,1777777777777777777777,"
             "1777777777777777776000"),
    ("%016o", "0000000000000001,0000000000000012,0202757163310000,1777777777777777777777,"
              "1777777777777777776000"),
    ("%lo", "1,12,202757163310000,1777777777777777777777,1777777777777777776000"),
    ("%#o", "01,012,0202757163310000,01777777777777777777777,01777777777777777776000"),
    ("%#lo", "01,012,0202757163310000,01777777777777777777777,01777777777777777776000"),
]


@pytest.mark.parametrize(("conv", "expected"), INT1_CASES)
def test_int1(conv: str, expected: str) -> None:
    fmt = ",".join([conv] * 5) + "\n"
    assert format_printf(fmt, INT1) == expected + "\n"


# testsuite/systemtap.printf/ptr-1.3.{stp,exp}: %p is %#x on a 64-bit value.
PTR_VALUES = [0, 1, 0x12345678, 0x12345678ABCDEF00, 0x0000000012345678]
PTR_CASES = [
    ("%p", ["0x0", "0x1", "0x12345678", "0x12345678abcdef00", "0x12345678"]),
    ("%20pX", ["                 0x0X", "                 0x1X", "          0x12345678X",
               "  0x12345678abcdef00X", "          0x12345678X"]),
    ("%-20pX", ["0x0                 X", "0x1                 X", "0x12345678          X",
                "0x12345678abcdef00  X", "0x12345678          X"]),
    ("%.20pX", ["0x00000000000000000000X", "0x00000000000000000001X",
                "0x00000000000012345678X", "0x000012345678abcdef00X",
                "0x00000000000012345678X"]),
    ("%20.8pX", ["          0x00000000X", "          0x00000001X", "          0x12345678X",
                 "  0x12345678abcdef00X", "          0x12345678X"]),
    ("%-20.8pX", ["0x00000000          X", "0x00000001          X", "0x12345678          X",
                  "0x12345678abcdef00  X", "0x12345678          X"]),
    ("%8p", ["     0x0", "     0x1", "0x12345678", "0x12345678abcdef00", "0x12345678"]),
    ("%-8pX", ["0x0     X", "0x1     X", "0x12345678X", "0x12345678abcdef00X",
               "0x12345678X"]),
    ("%.8p", ["0x00000000", "0x00000001", "0x12345678", "0x12345678abcdef00",
              "0x12345678"]),
    ("%8.20p", ["0x00000000000000000000", "0x00000000000000000001",
                "0x00000000000012345678", "0x000012345678abcdef00",
                "0x00000000000012345678"]),
]


@pytest.mark.parametrize(("fmt", "expected"), PTR_CASES)
def test_ptr(fmt: str, expected: list[str]) -> None:
    assert [format_printf(fmt, [v]) for v in PTR_VALUES] == expected


def test_char1() -> None:
    # testsuite/systemtap.printf/char1: %c of 115,116,97,112 then "ok" -> "stap"
    out = format_printf("%c", [115]) + format_printf("%c", [116])
    out += format_printf("%c%c", [97, 112])
    assert out == "stap"


def test_char2_escapes() -> None:
    # testsuite/systemtap.printf/char2.{stp,exp}: %#c escapes C-style, octal otherwise.
    assert "".join(format_printf("%#c", [ord(c)]) for c in "abc-ABC 123!") == "abc-ABC 123!"
    specials = "\a\b\f\n\r\t\v'\\"
    assert "".join(format_printf("%#c", [ord(c)]) for c in specials) == \
        "\\a\\b\\f\\n\\r\\t\\v\\'\\\\"
    assert format_printf("%#c%#c%#c%#c%#c%#c\n", [0, 0o33, 0o177, 0o222, 0o333, 0o377]) == \
        "\\000\\033\\177\\222\\333\\377\n"


def test_char_low_byte_and_width() -> None:
    # vsprintf.c: `c = (unsigned char) arg`; `_stp_vsprint_char` pads with spaces.
    assert format_printf("%c", [0x141]) == "A"
    assert format_printf("[%3c|%-3c]", [ord("x"), ord("y")]) == "[  x|y  ]"
    assert format_printf("%c", [0xFF]) == "\xff"


def test_string1() -> None:
    # testsuite/systemtap.printf/string1.{stp,exp}
    s, t = "Foobar!", "XYZZY"
    assert format_printf("The string is <%s>\n", [s]) == "The string is <Foobar!>\n"
    assert format_printf("%s%s\n", [s, t]) == "Foobar!XYZZY\n"
    assert format_printf("%s%s%s%s\n", [t, s, t, s]) == "XYZZYFoobar!XYZZYFoobar!\n"


def test_string2_width() -> None:
    # testsuite/systemtap.printf/string2: "%2d: %s" -> " 0: ...", "10: ..."
    t = "1234567890" * 10
    assert format_printf("%2d: %s\n", [0, t]) == f" 0: {t}\n"
    assert format_printf("%2d: %s\n", [99, t]) == f"99: {t}\n"


def test_string_precision_and_padding() -> None:
    # _stp_vsprint_memory: precision truncates, width pads with spaces; the
    # compiled printf passes a static ".0" through, so nothing is printed.
    assert format_printf("<%.3s>", ["abcdef"]) == "<abc>"
    assert format_printf("<%6s>", ["abc"]) == "<   abc>"
    assert format_printf("<%-6s>", ["abc"]) == "<abc   >"
    assert format_printf("<%6.2s>", ["abc"]) == "<    ab>"
    assert format_printf("<%.0s>", ["abc"]) == "<>"
    assert format_printf("<%.*s>", [2, "abc"]) == "<ab>"
    # ZEROPAD on %s appends a NUL byte rather than padding with zeros.
    assert format_printf("<%05s>", ["ab"]) == "<   ab\0>"
    # strnlen(): an embedded NUL ends the string.
    assert format_printf("<%s>", ["ab\0cd"]) == "<ab>"


def test_bin3_two_byte_binary() -> None:
    # testsuite/systemtap.printf/bin3.{stp,exp}; big_endian2() on x86 swaps the
    # low two bytes, %2b then writes them little-endian.
    def be2(x: int) -> int:
        return int.from_bytes((x & 0xFFFF).to_bytes(2, "big"), "little")

    a, b, c, d = be2(0x12345678), be2(0xABCD), be2(0x8888), be2(0xCDEF)
    out = format_printf("%2b", [be2(0x12)]) + format_printf("%2b", [be2(0x34)])
    out += format_printf("%2b%2b", [be2(0xABCD), be2(0x5678)])
    out += format_printf("%2b%2b%2b%2b", [a, b, c, d])
    out += format_printf("a=%2b b=%2b c=%2b d=%2b", [a, b, c, d])
    expected = ("00 12 00 34 ab cd 56 78 56 78 ab cd 88 88 cd ef "
                "61 3d 56 78 20 62 3d ab cd 20 63 3d 88 88 20 64 3d cd ef")
    assert out.encode("latin-1") == bytes.fromhex(expected)


def test_bin5_eight_byte_binary() -> None:
    # testsuite/systemtap.printf/bin5.{stp,exp} (big_endian8 + %8b)
    def be8(x: int) -> int:
        return int.from_bytes(x.to_bytes(8, "big"), "little")

    a, b = be8(0x0012345678ABCDEF), be8(0x1111222233334444)
    c, d = be8(0x88889999AAAABBBB), be8(0xCDEF000011112222)
    out = format_printf("%8b", [be8(0x12)]) + format_printf("%8b", [be8(0x34)])
    out += format_printf("%8b%8b", [be8(0xABCD000011112222), be8(0x5678567856785678)])
    out += format_printf("%8b%8b%8b%8b", [a, b, c, d])
    out += format_printf("a=%8b b=%8b c=%8b d=%8b", [a, b, c, d])
    expected = """00 00 00 00 00 00 00 12 00 00 00 00 00 00 00 34
        ab cd 00 00 11 11 22 22 56 78 56 78 56 78 56 78 00 12 34 56 78 ab cd ef
        11 11 22 22 33 33 44 44 88 88 99 99 aa aa bb bb cd ef 00 00 11 11 22 22
        61 3d 00 12 34 56 78 ab cd ef 20 62 3d 11 11 22 22 33 33 44 44 20 63 3d
        88 88 99 99 aa aa bb bb 20 64 3d cd ef 00 00 11 11 22 22"""
    assert out.encode("latin-1") == bytes.fromhex(expected)


def test_binary_width_precision() -> None:
    # bin6.stp's cases, expected bytes derived from `_stp_vsprint_binary`:
    # precision picks 1/2/4/8 bytes (default: the width if valid, else 8),
    # width pads with NULs before (or after, with '-') the value.
    v = int.from_bytes(b"deadbeef", "little")
    assert format_printf("%b", [v]) == "deadbeef"
    assert format_printf("%1b", [v]) == "d"
    assert format_printf("%2b", [v]) == "de"
    assert format_printf("%4b", [v]) == "dead"
    assert format_printf("%*b", [4, v]) == "dead"
    assert format_printf("%.2b", [v]) == "de"
    assert format_printf("%.*b", [1, v]) == "d"
    assert format_printf("%1.8b", [v]) == "deadbeef"
    assert format_printf("%4.2b", [v]) == "\0\0de"
    assert format_printf("%-4.2b", [v]) == "de\0\0"
    assert format_printf("%*.*b", [8, 1, v]) == "\0" * 7 + "d"
    assert format_printf("%3b", [v]) == "deadbeef"  # 3 is no valid size: 8 bytes


def test_number_flags() -> None:
    # runtime/vsprintf.c number(): sign, '+', ' ', '-', zero-pad with precision,
    # and `#` giving 0x/0 even for zero (unlike C).
    assert format_printf("%+d|%+d|% d|% d", [5, -5, 5, -5]) == "+5|-5| 5|-5"
    assert format_printf("%+u|% x", [5, 255]) == "5|ff"  # sign flags only for %d/%i
    assert format_printf("[%-6d|%6i]", [-42, -42]) == "[-42   |   -42]"
    assert format_printf("%.5d|%8.5d", [-42, 42]) == "-00042|   00042"
    assert format_printf("%08.3d", [5]) == "00000005"  # zero-pad survives a precision
    assert format_printf("%#x|%#o|%#X", [0, 0, 255]) == "0x0|00|0XFF"
    assert format_printf("%.0d", [0]) == "0"
    assert format_printf("%d", [-(1 << 63)]) == "-9223372036854775808"
    assert format_printf("%d", [1 << 63]) == "-9223372036854775808"  # int64 wrap
    assert format_printf("%i|%u", [-1, -1]) == "-1|18446744073709551615"


def test_single_flag_rule() -> None:
    # string_to_components reads ONE flag; a following '0' is a width digit,
    # so "%#05x" is width 5 without zero-padding, and "%+05d" likewise.
    assert format_printf("%#05x", [1]) == "  0x1"
    assert format_printf("%+05d", [1]) == "   +1"
    assert format_printf("%-05d|", [1]) == "1    |"


def test_dynamic_width() -> None:
    # emit_compiled_printfs: `width = clamp_t(int, arg, 0, ...)`, so a negative
    # '*' width is 0 (no left-justification), and the arg is truncated to int.
    assert format_printf("[%*d]", [5, 42]) == "[   42]"
    assert format_printf("[%*d]", [-5, 42]) == "[42]"
    assert format_printf("[%*d]", [(1 << 32) + 3, 7]) == "[  7]"
    assert format_printf("[%-*.*d]", [6, 3, 7]) == "[007   ]"


def test_percent_and_literals() -> None:
    assert format_printf("100%% sure\n", []) == "100% sure\n"
    assert format_printf("%%d", []) == "%d"


def test_parse_structure() -> None:
    spec = parse_format("a%-*.*lld%%b%s")
    assert spec.pieces == (
        "a", Conversion("-", -1, -1, "ll", "d", "%-*.*lld"), "%b",
        Conversion("", None, None, "", "s", "%s"))
    assert spec.arg_types == ("long", "long", "long", "string")
    assert parse_format("%c%p%b%x").arg_types == ("long",) * 4
    assert parse_format("plain").pieces == ("plain",)


def test_length_modifiers_ignored() -> None:
    assert format_printf("%hd|%hhx|%zu|%jd|%td|%lli", [70000, 300, 1, 2, 3, -4]) == \
        "70000|12c|1|2|3|-4"


LOC = SourceLocation("t.stp", 3, 12, '  printf("%q", 1)')


@pytest.mark.parametrize(("fmt", "message"), [
    ("%q", "invalid conversion '%q' in format string"),
    ("x%5.2k", "invalid conversion '%5.2k' in format string"),
    ("%-+d", "invalid conversion '%-+' in format string"),
    ("%n", "invalid conversion '%n' in format string"),
    ("%5%", "invalid conversion '%5%' in format string"),
    ("abc%", "trailing incomplete conversion '%' in format string"),
    ("%-5", "trailing incomplete conversion '%-5' in format string"),
    ("%.", "trailing incomplete conversion '%.' in format string"),
    ("%m", "conversion '%m' is not supported"),
    ("%.4M", "conversion '%.4M' is not supported"),
])
def test_bad_formats(fmt: str, message: str) -> None:
    with pytest.raises(ScriptError) as info:
        parse_format(fmt, LOC)
    assert info.value.message == message
    assert info.value.location is LOC
    assert info.value.render().startswith(f"t.stp:3:12: error: {message}")


def test_two_flags_hint() -> None:
    with pytest.raises(ScriptError) as info:
        parse_format("%-#x")
    assert info.value.hint == "stap accepts at most one flag per conversion"


def test_argument_count_and_conversion() -> None:
    spec = parse_format("%d %s")
    with pytest.raises(ValueError, match="takes 2 arguments, got 1"):
        format_values(spec, [1])
    # Defensive conversions; the translator normally guarantees the types.
    assert format_values(spec, ["12", 34]) == "12 34"
    assert format_values(spec, ["zz", "x"]) == "0 x"


def test_limit_truncates() -> None:
    assert format_values(parse_format("%s-%d"), ["abcdef", 12345], limit=8) == "abcdef-1"
