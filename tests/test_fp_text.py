"""stap's floatingpoint tapset's conversions (runtime/pd_fp.c), in the traced process
(m64 and m32: i386 computes in SSE2 doubles, as IEEE/SoftFloat rounds) and the launcher.

`string_to_fp` and `fp_to_string` are SoftFloat's str_to_f64 and f64_to_str in stap's
runtime/softfloat.c, not strtod and printf: the digits accumulate times ten and are
divided by a power of ten made by repeated multiplication, and the text is the integer
part of the number divided by ten until it is below 1e18 (then `eN`), the fraction's
digits each cut toward zero and the last one raised alone (so 0.96 to one digit is
"0.10").  The expected texts below were worked out by hand from that algorithm in IEEE
doubles; systemtap.base/floatingpoint.exp has more of them.  `fp_to_long(fp, mode,
exact)` is SoftFloat's f64_to_i64, `fp_sqrt` its (IEEE's) square root.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from cbuild import PROGS, abi_program_fixture, run_pydyn, run_pydyn_clean

# (text, precision, what stap's fp_to_string(string_to_fp(text), precision) gives)
CASES = [
    ("2.5e-3", 6, "0.002500"),
    ("1e20", 2, "999999999999999744.00e2"),      # 1e20 / 10 / 10 in doubles
    ("-7.25E+2", 1, "-725.0"),
    ("0.96", 1, "0.10"),                         # the last digit 9, raised: "10"
    ("12345678901234567890123.5", 3, "123456789012345696.000e5"),
    ("+0.1", 20, "0.10000000000000000000"),      # 0.1 * 10 rounds to 1.0 exactly
    ("1e-400", 3, "0.000"),                      # the power of ten overflows: 1 / inf
    ("5e400", 2, "Infinity"),                    # ... underflows: 5 / 0
    ("-5e400", 0, "-Infinity"),
    ("9223372036854775807", 0, "922337203685477760e1"),
]

LONG_CASES = [  # fp_to_long(string_to_fp(text), mode, 0) for modes 0..6
    ("2.5", [2, 2, 2, 3, 3, 2, 2]),
    ("-2.5", [-2, -2, -3, -2, -3, -2, -2]),
    ("3.5", [4, 3, 3, 4, 4, 3, 3]),
    ("-0.25", [0, 0, -1, 0, 0, 0, 0]),
    ("1e30", [2**63 - 1] * 7),
    ("-1e30", [-2**63] * 7),
    ("-9223372036854775808", [-2**63] * 7),
]

def script(head: str) -> str:
    lines = [f'  println(fp_to_string(string_to_fp("{t}"), {p}))' for t, p, _ in CASES]
    for t, _ in LONG_CASES:
        modes = ", ".join(f"fp_to_long(x, {m}, {m % 2})" for m in range(7))
        lines.append(f'  x = string_to_fp("{t}"); printd(" ", {modes})')
        lines.append('  println("")')
    lines.append('  println(fp_to_long(fp_div(long_to_fp(0), long_to_fp(0)), 0, 0), " ", '
                 'fp_to_string(fp_div(long_to_fp(0), long_to_fp(0)), 2), " ", '
                 'fp_to_long(string_to_fp("-7.9")))')
    lines.append('  println(fp_to_string(fp_sqrt(long_to_fp(2)), 15), " ", '
                 'fp_to_string(fp_sqrt(long_to_fp(-1)), 1), " ", '
                 'fp_to_string(fp_sqrt(string_to_fp("6.25e36")), 2))')
    return f"{head} {{\n" + "\n".join(lines) + "\n}\n"


def expected() -> str:
    out = [want for _, _, want in CASES]
    out += [" ".join(str(v) for v in vals) for _, vals in LONG_CASES]
    out.append("0 NaN -7")
    # IEEE's square root (SoftFloat's f64_sqrt); 6.25e36 as str_to_f64 makes it
    out.append("1.414213562373095 NaN 249999999999999936.00e1")
    return "\n".join(out) + "\n"


prog = abi_program_fixture(PROGS / "fp_go.c", "fp_go", "prog")


def test_conversions_in_the_target(prog: Path, cache: Path) -> None:
    r = run_pydyn_clean(cache, "-e", script(f'probe process("{prog}").mark("go")'),
                        "-c", str(prog))
    assert r.stdout == expected()


def test_conversions_in_the_launcher(cache: Path) -> None:
    r = run_pydyn_clean(cache, "-e", script("probe begin") .replace("\n}\n", "\n  exit()\n}\n"))
    assert r.stdout == expected()


@pytest.mark.parametrize("text", ["1.5x", "0e400", "--1", "1e5e", "1 "])
def test_string_to_fp_invalid_format(cache: Path, text: str) -> None:
    # str_to_f64's NaN for text it cannot read to its end (or a 0 / 0): stap's error
    r = run_pydyn(cache, "-e", f'probe begin {{ println(string_to_fp("{text}")); exit() }}')
    assert r.returncode == 1
    assert r.stdout == ""
    assert re.search(r"^ERROR: invalid format near identifier 'string_to_fp'", r.stderr,
                     re.M), r.stderr


def test_long_fraction_is_cut_to_maxstringlen(cache: Path) -> None:
    # digits past MAXSTRINGLEN - 1 cannot show (stap's strlcat); the call still ends
    r = run_pydyn_clean(cache, "-e", 'probe begin { s = fp_to_string(string_to_fp("0.5"), '
                        '2000000000); println(strlen(s), " ", substr(s, 0, 4)); exit() }')
    assert r.stdout == "511 0.50\n"
