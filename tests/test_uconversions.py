"""stap's uconversions functions on a real process, m64 and m32 (tests/progs/uconv_marks.c):
UTF-8, UTF-16 (a surrogate pair) and UTF-32 strings, ill-formed UTF-16/32, an unmapped
address, integers of every width, a buffer holding a NUL.

Checked: the values; the plain integer reads giving 0 at a bad address silently, the
_error forms raising (caught here: a caught error is not counted), the _warn forms
giving their default with stap's warning on stderr, a repeated warning printed once
(staprun's de-duplication; -v prints each); the quoted forms escaping as stap's
_stp_text_str and giving the address where it cannot be read; the two-argument forms
stap names user_string2_warn etc. reached by their one name.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from cbuild import PROGS, abi_program_fixture, run_pydyn

target = abi_program_fixture(PROGS / "uconv_marks.c", "uconv_marks")

SCRIPT = r"""
probe process(@1).mark("strings") {
  printf("S1 %s|%s|%s\n", user_string($arg1), user_string_warn($arg1), user_string_quoted($arg1))
  printf("S2 %s|%s|%s|%s\n", user_string_n_quoted($arg1, 1, 20), user_string_n_quoted($arg1, 3),
         user_string_n_warn($arg1, 1), user_string_n_warn($arg1, 1, "no"))
  printf("S3 %s|%s|%s|%s\n", user_string_utf16($arg2), user_string_utf32($arg3),
         user_string_utf16($arg2, "x"), user_string_utf32($arg3, "x"))
  printf("S4 %s|%s\n", user_string_quoted_utf16($arg2), user_string_quoted_utf32($arg3))
}
probe process(@1).mark("bad") {
  try { println(user_string_utf16($arg1)) } catch (m) { println("B1 ", m) }
  try { println(user_string_utf32($arg2)) } catch (m) { println("B2 ", m) }
  printf("B3 %s|%s\n", user_string_utf16($arg1, "fb16"), user_string_utf32($arg2, "fb32"))
  printf("B4 [%s][%s][%s][%s]\n", user_string_warn($arg3), user_string_warn($arg3, "dflt"),
         user_string_n_warn($arg3, 4), user_string_n_warn($arg3, 4, "nw"))
  printf("B5 %s|%s|%s|%s|%s|%s\n", user_string_quoted($arg3), user_string_quoted(0),
         user_string_n_quoted($arg3, 4), user_string_n_quoted($arg3, 4, 10),
         user_string_quoted_utf16($arg3), user_string_quoted_utf32($arg3))
  printf("B6 %d %d %d %d %d\n", user_int($arg3), user_char($arg3), user_long($arg3),
         user_uint64($arg3), user_int8($arg3))
  printf("B7 %d %d %d %d %d %d\n", user_int_warn($arg3), user_char_warn($arg3),
         user_short_warn($arg3), user_ushort_warn($arg3), user_long_warn($arg3),
         user_ulong_warn($arg3))
  try { println(user_int_error($arg3)) } catch (m) { println("B8 ", m) }
  try { println(user_uint8_error($arg3)) } catch (m) { println("B9 ", m) }
  printf("B10 %s|%s\n", user_buffer_quoted($arg3, 4, 20), user_buffer_quoted($arg3, 4, 3))
  try { println(user_buffer_quoted_error($arg3, 4, 20)) } catch (m) { println("B11 ", m) }
}
probe process(@1).mark("ints") {
  printf("I1 %d %d %d %d %d %d %d %d %d %d\n", user_int8($arg1), user_uint8($arg1),
         user_int16($arg2), user_uint16($arg2), user_int32($arg3), user_uint32($arg3),
         user_int64($arg4), user_uint64($arg4), user_long($arg5), user_ulong($arg5))
  printf("I2 %d %d %d %d %d %d %d %d %d %d\n", user_int8_error($arg1), user_uint8_error($arg1),
         user_int16_error($arg2), user_uint16_error($arg2), user_int32_error($arg3),
         user_uint32_error($arg3), user_int64_error($arg4), user_uint64_error($arg4),
         user_long_error($arg5), user_ulong_error($arg5))
  printf("I3 %d %d %d %d %d %d\n", user_char_warn($arg1), user_short_warn($arg2),
         user_ushort_warn($arg2), user_int_warn($arg3), user_long_warn($arg5),
         user_ulong_warn($arg5))
}
probe process(@1).mark("buf") {
  printf("U1 %s|%s|%s|%s|\n", user_buffer_quoted($arg1, $arg2, 40),
         user_buffer_quoted($arg1, $arg2, 6), user_buffer_quoted_error($arg1, 2, 40),
         user_buffer_quoted($arg1, 0, 0))
}
"""

WARNINGS = ["user string copy fault -14 at 0x10 [man error::fault]",
            "user int copy fault 0x10 [man error::fault]",
            "user char copy fault at 0x10 [man error::fault]",
            "user short copy fault 0x10 [man error::fault]",
            "user unsigned short copy fault 0x10 [man error::fault]",
            "user long copy fault 0x10 [man error::fault]",
            "user unsigned long copy fault 0x10 [man error::fault]"]
TEXT = "h\u00e9llo \u20ac"
WIDE = "h\u00e9\u20ac\U0001F600"


@pytest.fixture(scope="module")
def script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("uconv") / "uconv.stp"
    path.write_text(SCRIPT)
    return path


def lines(out: str) -> dict[str, str]:
    return {m[0]: m[1] for m in re.findall(r"^([A-Z]\d+) (.*)$", out, re.M)}


def test_conversions(target: Path, script: Path, cache: Path) -> None:
    r = run_pydyn(cache, str(script), str(target), "-c", str(target))
    assert r.returncode == 0, r.stderr
    got = lines(r.stdout)
    m32 = target.name.endswith("m32")
    assert got["S1"] == f'{TEXT}|{TEXT}|"h\\u00E9llo \\u20AC"'
    assert got["S2"] == '"h"|"h\\u00E9"|h|h'
    assert got["S3"] == f"{WIDE}|{WIDE}|{WIDE}|{WIDE}"
    assert got["S4"] == '"h\\u00E9\\u20AC\\U0001F600"|"h\\u00E9\\u20AC\\U0001F600"'
    assert re.fullmatch(r"invalid UTF-16 character U\+D800 at 0x[0-9a-f]+", got["B1"]), got
    assert re.fullmatch(r"invalid UTF-32 character U\+110000 at 0x[0-9a-f]+", got["B2"]), got
    assert got["B3"] == "fb16|fb32"
    assert got["B4"] == "[][dflt][][nw]"
    assert got["B5"] == "0x10|0x0|0x10|0x10|0x10|0x10"
    assert got["B6"] == "0 0 0 0 0"
    assert got["B7"] == "0 0 0 0 0 0"
    assert got["B8"] == "user memory read fault at 0x10 (4 bytes)"
    assert got["B9"] == "user memory read fault at 0x10 (1 bytes)"
    assert got["B10"] == "0x10|0x"
    assert got["B11"] == "Unable to access user space data at 0x10"
    ulong = 2**32 - 7 if m32 else -7
    ints = f"-2 254 -300 65236 -70000 4294897296 -5000000000 -5000000000 -7 {ulong}"
    assert got["I1"] == got["I2"] == ints
    assert got["I3"] == f"-2 -300 65236 -70000 -7 {ulong}"
    # a NUL shows as \0 and counts 4 bytes of outlen; a cut at one adds no "..."
    assert got["U1"] == '"a\\0b\\n\\377"|"a"|"a\\0"||'
    # each warning once, though user_string_warn faulted four times; no error counted
    assert [ln[len("WARNING: "):] for ln in r.stderr.splitlines()] == WARNINGS, r.stderr


def test_verbose_prints_every_warning(target: Path, cache: Path) -> None:
    r = run_pydyn(cache, "-v", "-e", 'probe process(@1).mark("bad") { '
                  'a = user_string_warn($arg3); b = user_string_warn($arg3, "x"); '
                  'println(a, b, user_int_warn($arg3)) }', str(target), "-c", str(target))
    assert r.returncode == 0, r.stderr
    assert r.stdout == "x0\n"
    warned = [ln for ln in r.stderr.splitlines() if ln.startswith("WARNING: user")]
    assert warned == ["WARNING: " + WARNINGS[0]] * 2 + ["WARNING: " + WARNINGS[1]], r.stderr


def test_error_forms_are_counted_errors(target: Path, cache: Path) -> None:
    r = run_pydyn(cache, "-e", 'probe process(@1).mark("bad") { println(user_int($arg3)); '
                  'println(user_short_error($arg3)) }', str(target), "-c", str(target))
    assert r.returncode == 1
    assert r.stdout == "0\n"
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("ERROR: ")]
    assert len(errors) == 1 and errors[0].startswith(
        "ERROR: user memory read fault at 0x10 (2 bytes) near identifier "
        "'user_short_error' at <input>:1:"), r.stderr


def test_a_scripts_own_two_argument_form_wins(cache: Path) -> None:
    # stap overloads by the number of arguments: the script's user_string_warn(a, b) is
    # the one its calls with two reach (and the tapset's one-argument form's own call)
    r = run_pydyn(cache, "-e", 'function user_string_warn(a, b) { return sprintf("own %d %s", '
                  'a, b) } probe begin { println(user_string_warn(16, "x")); '
                  'println(user_string_warn(16)); println(user_string_n_warn(16, 2, "t")); '
                  "exit() }")
    assert (r.returncode, r.stdout) == (0, "own 16 x\nown 16 \nt\n"), r.stderr
    assert r.stderr == "WARNING: " + WARNINGS[0] + "\n"
