"""End-to-end tests of the script language: `pydyn -e SCRIPT` / `pydyn FILE ARGS`.

Every script here needs no target process: `begin`, `end` and `timer` probes
run inside the launcher.  Each test runs pydyn as a subprocess (cbuild.start_pydyn)
with the module's cache and compares the whole of stdout with what SystemTap
prints for the same script.  Expectations follow stap's documented semantics
and its testsuite (files named where used);
histogram texts are the runtime's drawing (runtime/pd_hist.c), checked against stap's
.exp files in test_hist_draw.py; exit-report texts those of launcher/stats.py,
checked in test_stats.py.

Tests marked xfail(strict=True) assert stap's behaviour where pydyn differs;
each reason names the bug.
"""

from __future__ import annotations

import os
import platform
import re
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from cbuild import start_pydyn

TIMEOUT = 60
ERRORS_1 = "WARNING: Number of errors: 1, skipped probes: 0"


@dataclass
class Result:
    stdout: str
    stderr: str
    returncode: int | None  # None: killed after the timeout
    elapsed: float

    @property
    def err_lines(self) -> list[str]:
        return self.stderr.splitlines()


class Pydyn:
    def __init__(self, cache: Path, tmp: Path) -> None:
        self.cache = cache
        self.tmp = tmp

    def __call__(self, script: str, *args: str, defines: tuple[str, ...] = (),
                 file: str | None = None, timeout: float = TIMEOUT) -> Result:
        """Run `script` inline (-e) or, with `file`, from tmp/`file`; `args` follow it."""
        argv: list[str] = []
        for d in defines:
            argv += ["-D", d]
        if file is None:
            argv += ["-e", script]
        else:
            path = self.tmp / file
            path.write_text(script)
            argv.append(str(path))
        argv += list(args)
        start = time.monotonic()
        proc = start_pydyn(self.cache, *argv, cwd=self.tmp)
        try:
            out, err = proc.communicate(timeout=timeout)
            rc: int | None = proc.returncode
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            rc = None
        return Result(out, err, rc, time.monotonic() - start)


@pytest.fixture
def pydyn(cache: Path, tmp_path: Path) -> Pydyn:
    return Pydyn(cache, tmp_path)


def ok(r: Result) -> str:
    """stdout of a run that must have succeeded cleanly."""
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    return r.stdout


def assert_script_error(r: Result, file: str, line: int, col: int, message: str) -> None:
    """A clean `FILE:LINE:COL: error: MESSAGE`, the source line and a caret under COL."""
    assert r.returncode == 1
    assert r.stdout == ""
    assert "Traceback" not in r.stderr
    lines = r.err_lines
    assert lines[0] == f"{file}:{line}:{col}: error: {message}", r.stderr
    source, caret = lines[1], lines[2]
    assert source.startswith("    ")   # the offending line, indented by 4
    assert caret.strip().rstrip("~") == "^"   # ^~~~ under the offending token
    assert caret.index("^") == 4 + col - 1


# ------------------------------------------------------------ scalars, operators


def test_scalars_strings_and_operators(pydyn: Pydyn) -> None:
    script = r"""
global g, gs, calls
function bump() { calls++; return 1 }
probe begin {
  g = 7; gs = "glob"
  x = 17; s = "foo"
  s = s . "bar"; s .= "!"
  println(s, " ", gs . "al")
  printf("%d %d %d %d %d\n", x / 5, -x / 5, x % 5, -x % 5, x % -5)
  printf("%d %d %d %d\n", 1 << 4, -16 >> 2, 0xf0 & 0x3c, 0xf0 | 0x0f)
  printf("%d %d %d %d\n", 6 ^ 3, ~0, -x, !x)
  a = 5; b = a++; c = ++a; d = a--; e = --a
  printf("%d %d %d %d %d\n", a, b, c, d, e)
  y = 10; y += 5; y -= 3; y *= 4; y /= 5; y %= 7
  z = 1; z <<= 10; z >>= 3; z |= 3; z &= 0x7e; z ^= 0x41
  printf("%d %d\n", y, z)
  printf("%d %d %d %d\n", "abc" < "abd", "b" < "a", "x" == "x", "x" != "y")
  printf("%d %d %d\n", "a" <= "a", "b" >= "c", s == "foobar!")
  printf("%s %s %s\n", x > 10 ? "big" : "small", s == "foobar!" ? "eq" : "ne",
         1 ? (0 ? "a" : "b") : "c")
  printf("%d %d %d %d\n", g * 2, x > 3 && g < 3 || 1, 1 && 0, 0 || 2)
  printf("%d %d\n", 9223372036854775807 + 1, -9223372036854775807 - 1)
  v = 5; delete v; w = "str"; delete w
  printf("[%d][%s]\n", v, w)
  p = 0 && bump(); q = 1 || bump(); r = 1 && bump(); t = 0 || bump()
  printf("%d %d %d %d calls=%d\n", p, q, r, t, calls)
  exit()
}
"""
    assert ok(pydyn(script)) == (
        "foobar! global\n"
        "3 -3 2 -2 2\n"          # division truncates toward zero, % takes the dividend's sign
        "16 -4 48 255\n"
        "5 -1 -17 0\n"
        "5 5 7 7 5\n"
        "2 67\n"
        "1 0 1 1\n"
        "1 0 1\n"
        "big eq b\n"
        "14 1 0 1\n"
        "-9223372036854775808 -9223372036854775808\n"
        "[0][]\n"
        "0 1 1 1 calls=2\n")      # && and || short-circuit


# ------------------------------------------------------------------------ arrays


ARRAYS = r"""
global one, two, three, names, small[3]
probe begin {
  one[1] = 10; one[2] = 20; one[-5] = 30
  two["a", 1] = 100; two["b", 2] = 200
  three[1, "x", 2] = 7; three[2, "y", 3] = 8
  names["k1"] = "v1"; names["k2"] = "v2"
  printf("%d %d %d %d\n", one[1], one[2], one[-5], one[99])
  printf("%d %d %d\n", two["a", 1], two["b", 2], three[2, "y", 3])
  printf("%s %s [%s]\n", names["k1"], names["k2"], names["nope"])
  printf("%d %d %d %d\n", 1 in one, 3 in one, ["a", 1] in two, ["a", 2] in two)
  printf("%d %d\n", [1, "x", 2] in three, [1, "x", 3] in three)
  k = "b"; n = 2
  if ([k, n] in two) println("found b,2")
  if (!(99 in one)) println("no 99")
  delete one[2]
  printf("%d %d\n", 2 in one, 1 in one)
  n = 0; foreach (i in one) n++; printf("one has %d\n", n)
  delete two
  n = 0; foreach ([a, b] in two) n++; printf("two has %d\n", n)
  two["c", 3] = 1
  printf("%d\n", two["c", 3])
  one[1] += 5; one[7]++; q = one[7]++; q2 = ++one[7]
  printf("%d %d %d %d\n", one[1], one[7], q, q2)
  names["k1"] .= "+"
  println(names["k1"])
  small[1] = 1; small[2] = 2; small[3] = 3
  small[1] = 11
  delete small[2]
  small[4] = 4
  foreach (sk+ in small) printf("%d=%d ", sk, small[sk]); println("")
  small[5] = 5
  println("not reached")
}
probe end { println("end") }
"""


def test_arrays(pydyn: Pydyn) -> None:
    r = pydyn(ARRAYS)
    assert r.stdout == (
        "10 20 30 0\n"
        "100 200 8\n"
        "v1 v2 []\n"
        "1 0 1 0\n"
        "1 0\n"
        "found b,2\n"
        "no 99\n"
        "0 1\n"
        "one has 2\n"
        "two has 0\n"
        "1\n"
        "15 3 1 3\n"
        "v1+\n"
        "1=11 3=3 4=4 \n")   # (no "end": stap's error state runs no end probe)
    # a full `global small[3]` refuses a fourth key: an error ends the probe
    assert r.returncode == 1
    assert len(r.err_lines) == 3, r.stderr  # the error, the summary, the advice
    assert r.err_lines[0].startswith("ERROR: ")
    assert "rray overflow, check size limit (3)" in r.err_lines[0]
    assert r.err_lines[2].startswith("hint: Array overflow: raise -D MAXMAPENTRIES")
    assert r.err_lines[1] == ERRORS_1


# ---------------------------------------------------------------- foreach, loops


def test_foreach_sorting_and_loops(pydyn: Pydyn) -> None:
    script = r"""
global arr, cnt
probe begin {
  arr[3, "c"] = 30; arr[1, "z"] = 10; arr[2, "a"] = 50; arr[1, "b"] = 20; arr[2, "q"] = 40
  foreach ([k1, k2] in arr) printf("%d%s ", k1, k2); println("")
  foreach (v = [k1, k2] in arr) printf("%d ", v); println("")
  foreach ([k1, k2-] in arr) printf("%d%s ", k1, k2); println("")
  foreach ([k1+, k2] in arr) printf("%d%s ", k1, k2); println("")
  foreach ([k1-, k2] in arr) printf("%d%s ", k1, k2); println("")
  foreach ([k1, k2] in arr-) printf("%d ", arr[k1, k2]); println("")
  foreach ([k1, k2] in arr+ limit 2) printf("%d ", arr[k1, k2]); println("")
  n = 1
  foreach (v- = [k1, k2] in arr limit n + 2) printf("%d ", v); println("")
  cnt["x"] = 3; cnt["y"] = 1; cnt["w"] = 2
  foreach (k in cnt) printf("%s ", k); println("")
  foreach (k+ in cnt) printf("%s ", k); println("")
  foreach (v = [k] in cnt) printf("%s=%d ", k, v); println("")
  foreach (v = [k] in cnt+) printf("%s=%d ", k, v); println("")
  for (i = 0; i < 10; i++) { if (i == 2) continue; if (i == 5) break; printf("%d ", i) }
  println("")
  j = 0; while (j < 100) { j++; if (j % 2) continue; if (j > 8) break; printf("%d ", j) }
  println("")
  foreach ([k1, k2] in arr) {
    if (k1 == 2) continue
    if (k2 == "b") break
    printf("%d%s ", k1, k2)
  }
  println("")
  for (i = 0; i < 3; i++) for (j = 0; j < 3; j++) { if (j > i) break; printf("%d%d ", i, j) }
  println("")
  exit()
}
"""
    assert ok(pydyn(script)) == (
        "3c 1z 2a 1b 2q \n"        # insertion order
        "30 10 50 20 40 \n"
        "1z 2q 3c 1b 2a \n"        # by the second key, descending
        "1z 1b 2a 2q 3c \n"        # by the first key; ties keep insertion order
        "3c 2a 2q 1z 1b \n"
        "50 40 30 20 10 \n"
        "10 20 \n"
        "50 40 30 \n"
        "x y w \n"
        "w x y \n"
        "x=3 y=1 w=2 \n"
        "y=1 w=2 x=3 \n"
        "0 1 3 4 \n"
        "2 4 6 8 \n"
        "3c 1z \n"
        "00 10 11 20 21 22 \n")


# -------------------------------------------------------------------- statistics


HIST_LOG = """\
value |-------------------------------------------------- count
    0 |@                                                  1
    1 |@                                                  1
    2 |@                                                  1
    4 |@                                                  1
    8 |@                                                  1
   16 |                                                   0
   32 |                                                   0
      ~
  128 |                                                   0
  256 |                                                   0
  512 |@@@                                                3
 1024 |                                                   0
 2048 |                                                   0

"""

HIST_LINEAR = """\
value |-------------------------------------------------- count
   <0 |@                                                  1
    0 |@                                                  1
   10 |@@                                                 2
   20 |                                                   0
   30 |                                                   0
   40 |@                                                  1
   50 |                                                   0
   60 |                                                   0
   70 |                                                   0
   80 |                                                   0
   90 |@                                                  1
  100 |                                                   0
 >100 |@                                                  1

"""

HIST_LINEAR_FULL = """\
value |-------------------------------------------------- count
    0 |@@                                                 2
   10 |@@                                                 2
   20 |@@                                                 2
   30 |@@                                                 2
   40 |@@                                                 2
   50 |@@                                                 2
   60 |@@                                                 2
   70 |@@                                                 2
   80 |@@                                                 2
   90 |@@                                                 2
  100 |                                                   0

"""


STATS = r"""
global s, two, one, byname, lin, full, e, u, top
probe begin {
  s <<< 3; s <<< 5; s <<< 10; s <<< 1; s <<< 0; s <<< 1000; s <<< 1000; s <<< 1000
  printf("%d %d %d %d %d\n", @count(s), @sum(s), @min(s), @max(s), @avg(s))
  two <<< 3; two <<< 5; one <<< 42
  printf("%d %d\n", @variance(two), @variance(one))
  byname["a"] <<< 5; byname["b"] <<< 1; byname["b"] <<< 1; byname["b"] <<< 1
  byname["c"] <<< 100; byname["c"] <<< 1
  foreach (k in byname @count-) printf("%s:%d ", k, @count(byname[k])); println("")
  foreach (k in byname @sum+) printf("%s:%d ", k, @sum(byname[k])); println("")
  foreach (k in byname @sum- limit 1) printf("%s ", k); println("")
  printf("%d %d %d\n", @max(byname["c"]), @min(byname["c"]), @avg(byname["c"]))
  lin <<< -5; lin <<< 0; lin <<< 15; lin <<< 15; lin <<< 99; lin <<< 250; lin <<< 42
  for (i = 0; i < 20; i++) full <<< i * 5
  printf("%d\n", @count(e))
  e <<< 7
  delete e
  printf("%d\n", @count(e))
  print(@hist_log(s))
  print(@hist_linear(lin, 0, 100, 10))
  print(@hist_linear(full, 0, 100, 10))
  println("-- variance")
  for (i = 0; i < 100; i++) u <<< i
  printf("%d %d %d %d %d %d\n", @count(u), @sum(u), @min(u), @max(u), @avg(u), @variance(u))
  println("-- upper bound")
  top <<< 1500
  print(@hist_linear(top, 0, 1500, 50))
  exit()
}
"""


def test_statistics(pydyn: Pydyn) -> None:
    assert ok(pydyn(STATS)) == (
        "8 3019 0 1000 377\n"
        "2 0\n"
        "b:3 c:2 a:1 \n"
        "b:3 a:5 c:101 \n"
        "c \n"
        "100 1 50\n"
        "0\n"
        "0\n"
        + HIST_LOG + HIST_LINEAR + HIST_LINEAR_FULL +
        "-- variance\n"
        # testsuite/systemtap.maps/linear_under.exp: stap's integer Welford
        # accumulation gives 5741 for 0..99 (the exact variance would be 841)
        "100 4950 0 99 49 5741\n"
        "-- upper bound\n"
        # testsuite/systemtap.maps/elision.exp: a value equal to `hi` is counted
        # in the `hi` bucket, not in the overflow row
        "value |-------------------------------------------------- count\n"
        " 1400 |                                                   0\n"
        " 1450 |                                                   0\n"
        " 1500 |@                                                  1\n"
        "\n")


# --------------------------------------------------------------------- functions


def test_functions_next_and_return(pydyn: Pydyn) -> None:
    script = r"""
function fib(n) { if (n < 2) return n; return fib(n - 1) + fib(n - 2) }
function greet:string(who:string, n:long) {
  r = ""
  for (i = 0; i < n; i++) r .= "hi " . who . ";"
  return r
}
function side(x) { printf("side %d\n", x); return }
function cat(a, b) { return a . "-" . b }
function mod:string(s:string) { s .= "!"; return s }
function twice(x) { println("in twice"); return x * 2 }
function f() {
  try {
    println("return")
    return 0
  } catch {
    println("return-catch")
  }
  println("return-fallthrough")
}
probe begin {
  v = fib(10)
  printf("%d\n", v)
  println(greet("bob", 2))
  side(4)
  println(cat("x", "y") . cat("1", "2"))
  o = "orig"; m = mod(o)
  printf("%s %s\n", o, m)
  printf("r=%d\n", twice(21))
  f()
}
probe begin {
  # testsuite/systemtap.base/overcatcher.stp: next leaves a try block
  try {
    println("next")
    next
  } catch {
    println("next-catch")
  }
  println("next-fallthrough")
}
probe begin { if (1) next; println("not printed") }
probe begin { println("last begin"); exit(); println("after exit") }
probe begin { println("skipped: begin probes after exit() do not run") }
"""
    assert ok(pydyn(script)) == (
        "55\n"
        "hi bob;hi bob;\n"
        "side 4\n"
        "x-y1-2\n"
        "orig orig!\n"
        "in twice\n"              # arguments are evaluated (and print) before printf prints
        "r=42\n"
        "return\n"
        "next\n"
        "last begin\n"
        "after exit\n")


# MAXNESTING (default 10) bounds the call depth: depth(10) works, depth(11) fails
RECURSION = r"""
function depth(n) { return n <= 1 ? 1 : 1 + depth(n - 1) }
probe begin {
  printf("%d\n", depth(10))
  printf("%d\n", depth(11))
  println("not reached")
}
probe end { println("end") }
"""


def test_recursion_limits(pydyn: Pydyn) -> None:
    r = pydyn(RECURSION)
    assert r.stdout == "10\n"   # the error state (MAXERRORS=0): no end probe, as stap
    assert r.returncode == 1
    # stap (handler-error.h) names the call that went too deep, then each call site
    # the error unwound through, innermost first, then the probe: cut at 511 bytes
    call = "identifier 'depth' at <input>:2:45"
    chain = "".join(f" (called from {call})" for _ in range(9))
    full = (f"ERROR: MAXNESTING exceeded near {call}{chain} (called from identifier "
            "'depth' at <input>:4:18) in probe begin")
    assert r.err_lines == [full[:len("ERROR: ") + 511], ERRORS_1,
                           "hint: MAXNESTING exceeded: raise -D MAXNESTING=N"]
    # fib(15) nests 15 deep and runs ~5000 statements: fine with raised limits
    fib = r"""
function fib(n) { if (n < 2) return n; return fib(n - 1) + fib(n - 2) }
probe begin { printf("%d\n", fib(15)); exit() }
"""
    assert ok(pydyn(fib, defines=("MAXNESTING=15", "MAXACTION=100000"))) == "610\n"


# ------------------------------------------------------------------- try / catch


TRY = r"""
probe begin {
  try { error("boom") } catch (msg) { println("caught ", msg) }
  try { x = 0; y = 10 / x; println("not here ", y) } catch (m) { println("caught: ", m) }
  try { error("quiet") } catch { println("caught without var") }
  try { println("no error") } catch (e) { println("never") }
  try { try { error("inner") } catch (e) { error("re-" . e) } } catch (e2) {
    println("outer got ", e2)
  }
  for (i = 0; i < 5; i++) try { error("me") } catch { break }
  for (j = 0; j < 5; j++) try { error("me") } catch { continue }
  printf("%d %d\n", i, j)
  println("after try")
  z = 0
  printf("%d\n", 10 / z)
  println("unreachable")
}
probe end { println("end") }
"""


def test_try_catch_and_division_by_zero(pydyn: Pydyn) -> None:
    r = pydyn(TRY)
    assert r.stdout == (
        "caught boom\n"
        # translate.cxx visit_try_block copies c->last_error, "division by 0";
        # 'near ...' (c->last_stmt) is only added when an error is reported
        "caught: division by 0\n"
        "caught without var\n"
        "no error\n"
        "outer got re-inner\n"
        "0 5\n"                   # break and continue inside catch act on the loop
        "after try\n")   # the division's error: no end probe (stap's error state)
    assert r.returncode == 1
    assert r.err_lines == ["ERROR: division by 0 near operator '/' at <input>:15:21 "
                           "in probe begin", ERRORS_1]


def test_array_overflow_error_matches_stap(pydyn: Pydyn) -> None:
    # translate.cxx: c->last_error = "Array overflow, check size limit (N)"; the
    # statement's first token is its last_stmt
    assert pydyn(ARRAYS).err_lines[0] == \
        "ERROR: Array overflow, check size limit (3) near identifier 'small' at <input>:32:3" \
        " in probe begin"


# --------------------------------------------------------------------- MAXACTION


def test_maxaction(pydyn: Pydyn) -> None:
    # an endless loop, even with an empty body, is stopped by MAXACTION, which
    # try/catch cannot catch (testsuite/systemtap.base/trycatch.exp, buildok/fortyone.stp);
    # its step writes a variable: a loop whose controls do nothing is elided, as in stap
    endless = r"""
probe begin {
  try { for (i = 0; ; i++) {} } catch { println("KO caught") }
  println("KO after")
}
probe end { println("end") }
"""
    r = pydyn(endless, timeout=30)
    assert r.returncode is not None, "still looping after 30 s"
    assert r.stdout == ""   # no end probe after the error, as stap
    assert r.returncode == 1
    assert len(r.err_lines) == 3, r.stderr
    assert r.err_lines[0].startswith("ERROR: MAXACTION exceeded near ")
    assert r.err_lines[1] == ERRORS_1
    assert r.err_lines[2] == "hint: MAXACTION exceeded: raise -D MAXACTION=N"
    # 50000 iterations need more than begin's default 10 * 1000 actions
    # (MAXACTION_INTERRUPTIBLE)
    loop = "probe begin { for (i = 0; i < 50000; i++) ; println(i); exit() }"
    r = pydyn(loop)
    assert r.stdout == ""
    assert r.returncode == 1
    assert r.err_lines[0].startswith("ERROR: MAXACTION exceeded")
    assert ok(pydyn(loop, defines=("MAXACTION=100000",))) == "50000\n"
    # the module built with -D must not be reused without it
    r = pydyn(loop)
    assert r.returncode == 1
    assert r.err_lines[0].startswith("ERROR: MAXACTION exceeded")


# ------------------------------------------------------------------ printf family


PRINTF = r"""
probe begin {
  printf("%d|%i|%u|%x|%X|%o|%s|%c|%%\n", -42, 42, 42, 255, 255, 8, "str", 65)
  printf("[%5d][%-5d][%05d][%+d][% d]\n", 42, 42, 42, 42, 42)
  printf("[%10s][%-10s][%.2s][%*d][%-*d]\n", "right", "left", "trunc", 6, 7, 4, 8)
  printf("[%#x][%#o][%8.3d][%#X]\n", 255, 8, 5, 255)
  printf("[%p][%u][%x]\n", 0x1234, -1, -1)
  printf("[%5c][%-3c]\n", 66, 67)
  print("a", 1, "b")
  print("\n")
  println("x", 2, "y", 3)
  printd(",", 1, "a", 2)
  print("\n")
  printdln("::", "p", 9, "q")
  s = sprintf("<%d-%s>", 7, "z")
  println(s)
  t = sprint(1, "two", 3)
  println(t)
  u = sprintln("line")
  print(u)
  printf("%s|%s\n", sprintf("%03d", 5), sprintf("%-4s", "ab"))
  printf("%d\n", strlen(sprintf("%10s", "")))
  log("logged")
  println("-- edge")
  printf("[%p][%#x][%#o][%.0d][%*d]\n", 0, 0, 0, 0, -4, 7)
  e = sprintf("[%p][%#x][%#o][%.0d][%*d]", 0, 0, 0, 0, -4, 7)
  println(e)
  exit()
}
"""


def test_printf_family(pydyn: Pydyn) -> None:
    out, edge = ok(pydyn(PRINTF)).split("-- edge\n")
    assert out == (
        "-42|42|42|ff|FF|10|str|A|%\n"
        "[   42][42   ][00042][+42][ 42]\n"
        "[     right][left      ][tr][     7][8   ]\n"
        "[0xff][010][     005][0XFF]\n"
        "[0x1234][18446744073709551615][ffffffffffffffff]\n"
        "[    B][C  ]\n"
        "a1b\n"
        "x2y3\n"
        "1,a,2\n"
        "p::9::q\n"
        "<7-z>\n"
        "1two3\n"
        "line\n"
        "005|ab  \n"
        "10\n"
        "logged\n")
    # stap's vsprintf.c number(): '#' always adds its prefix and a zero keeps
    # its digit whatever the precision; a negative '*' width is clamped to 0
    assert edge.splitlines()[0] == "[0x0][0x0][00][0][7]"


def test_sprintf_formats_like_printf(pydyn: Pydyn) -> None:
    edge = ok(pydyn(PRINTF)).split("-- edge\n")[1]
    assert edge == "[0x0][0x0][00][0][7]\n" * 2


# ------------------------------------------------------------ string, context


def test_string_and_context_builtins(pydyn: Pydyn) -> None:
    script = r"""
probe begin {
  s = "hello world"
  printf("%d %d %d\n", strlen(s), strlen(""), strlen(s . s))
  printf("[%s][%s][%s][%s]\n", substr(s, 0, 5), substr(s, 6, 100), substr(s, 20, 2),
         substr(s, 3, 0))
  printf("%d %d %d\n", isinstr(s, "lo w"), isinstr(s, "xyz"), isinstr(s, ""))
  printf("%d %d %d %d %d\n", strtol("123", 10), strtol("ff", 16), strtol("-17", 10),
         strtol("0777", 8), strtol("101", 2))
  printf("[%s][%s]\n", str_replace(s, "o", "0"), str_replace("aaa", "a", "bb"))
  big = ""; for (i = 0; i < 100; i++) big .= "abcdefgh"
  printf("%d %d\n", strlen(big), strlen(big . big))
  printf("%d %d [%s]\n", pid(), tid(), execname())
  printf("%d\n", gettimeofday_s())
  exit()
}
"""
    before = time.time()
    out = ok(pydyn(script)).splitlines()
    after = time.time()
    assert out[:6] == [
        "11 0 22",
        "[hello][world][][]",
        "1 0 1",
        "123 255 -17 511 5",
        "[hell0 w0rld][bbbbbb]",
        "511 511",                 # strings are truncated to MAXSTRINGLEN - 1
    ]
    m = re.fullmatch(r"(\d+) (\d+) \[(.+)\]", out[6])
    assert m, out[6]
    assert int(m[1]) > 1 and int(m[2]) > 1
    assert 0 < len(m[3]) <= 15
    assert before - 1 <= int(out[7]) <= after + 1
    assert len(out) == 8


# ------------------------------------------------------ preprocessor, arguments


def test_preprocessor_and_arguments(pydyn: Pydyn) -> None:
    script = r"""
probe begin {
  %( arch == "x86_64" %? println("arch x86_64") %: println("arch other") %)
  %( arch != "x86_64" %? println("not x86_64") %)
  %( runtime == "dyninst" %? println("runtime dyninst") %: println("runtime kernel") %)
  printf("argc %d\n", $#)
  printf("n=%d s=%s sum=%d\n", $1, @2, $1 + 10)
  %( $# >= 2 %? println("two or more") %: println("fewer") %)
  %( $# == 3 %? println("three") %: println("not three") %)
  printf("[%s]\n", @1)
  exit()
}
"""
    arch = "arch x86_64\n" if platform.machine() == "x86_64" else "arch other\nnot x86_64\n"
    expected = arch + "runtime dyninst\nargc 2\nn=5 s=hello sum=15\ntwo or more\nnot three\n[5]\n"
    assert ok(pydyn(script, "5", "hello", file="pre.stp")) == expected
    # the same script inline: `pydyn -e SCRIPT ARGS...`
    assert ok(pydyn(script, "5", "hello")) == expected


# ------------------------------------------------------------------------ timers


def test_timer_fires_repeatedly(pydyn: Pydyn) -> None:
    script = r"""
global ticks, first
probe begin { println("start") }
probe timer.ms(50) {
  if (ticks >= 3) next
  ticks++
  if (ticks == 1) first = gettimeofday_ms()
  printf("tick %d\n", ticks)
  if (ticks == 3) {
    printf("spaced %d\n", gettimeofday_ms() - first >= 90)
    exit()
  }
}
probe end { printf("end after %d ticks\n", ticks) }
"""
    r = pydyn(script)
    assert ok(r) == "start\ntick 1\ntick 2\ntick 3\nspaced 1\nend after 3 ticks\n"
    assert r.elapsed >= 0.15


# ------------------------------------------------------------------- exit report


def test_exit_report(pydyn: Pydyn) -> None:
    # alpha..iota: testsuite/systemtap.base/global_end.{stp,exp}, its timer replaced by exit()
    script = r"""
global alpha, beta, gamma, iota
global x, neg, str, arr, sarr, st, empty, multi, readme, lst, unused
probe begin {
 gamma = "abcdefghijklmnopqrstuvwxyz"
 iota["one"] = "eleven"
 iota["two"] = "twelve"
 alpha["one",1] = 1
 alpha["one",2] = 2
 alpha["two",1] = 3
 alpha["two",2] = 4
 beta["one",1] = 1
 beta["one",2] = 2
 beta["two",1] = 3
 beta["two",2] = 4

  x = 5; neg = -1; str = "hi there"
  arr["b"] = 2; arr["a"] = 10; arr["c"] = 2
  multi["k", 1] = 1; multi["j", 2] = 3
  sarr[1] = "one"; sarr[2] = "two"
  st <<< 3; st <<< 5
  lst[3] <<< 1; lst[4] <<< 1; lst[4] <<< 7
  readme = 3
  printf("readme=%d\n", readme)
  if (readme > 3) empty <<< 1   # never fed (`if (0)` would drop it before types)
  exit()
}
probe end {
foreach ([i,j] in beta)
  printf("[%#s,%#x]=%#x ", i, j, beta[i,j])
print("\n")
}
"""
    r = pydyn(script)
    # a global the script never uses is elided, with a warning
    assert r.returncode == 0
    assert len(r.err_lines) == 3, r.stderr   # stap's shape: the warning, source, caret
    assert r.err_lines[0].startswith("WARNING: Eliding unused variable 'unused'")
    assert r.stdout == (
        "readme=3\n"
        "[one,0x1]=0x1 [one,0x2]=0x2 [two,0x1]=0x3 [two,0x2]=0x4 \n"
        # after the end probes: globals written, never read, in declaration order
        'alpha["two",2]=4\n'     # arrays by value, descending
        'alpha["two",1]=3\n'
        'alpha["one",2]=2\n'
        'alpha["one",1]=1\n'
        'gamma="abcdefghijklmnopqrstuvwxyz"\n'
        'iota["two"]="twelve"\n'
        'iota["one"]="eleven"\n'
        "x=5\n"
        "neg=-1\n"
        'str="hi there"\n'
        'arr["a"]=10\n'
        'arr["b"]=2\n'           # ties keep insertion order
        'arr["c"]=2\n'
        'sarr[2]="two"\n'
        'sarr[1]="one"\n'
        "st @count=2 @min=3 @max=5 @sum=8 @avg=4\n"
        "empty @count=0x0\n"
        'multi["j",2]=3\n'
        'multi["k",1]=1\n'
        "lst[4] @count=2 @min=1 @max=7 @sum=8 @avg=4\n"   # stats by @count
        "lst[3] @count=1 @min=1 @max=1 @sum=1 @avg=1\n")


# ------------------------------------------------------------ compile-time errors


def test_type_errors_and_unresolved_identifiers(pydyn: Pydyn) -> None:
    assert_script_error(pydyn(r'probe begin { printf("%d\n", "str"); exit() }'),
                        "<input>", 1, 30, "type mismatch: expected long, found string")
    assert_script_error(pydyn(r'probe begin { printf("%s\n", 5) }'),
                        "<input>", 1, 30, "type mismatch: expected string, found long")
    assert_script_error(pydyn('probe begin { x = 1; x = "s"; println(x) }'),
                        "<input>", 1, 22, "type mismatch for identifier 'x': long vs string")
    assert_script_error(pydyn('probe begin { x = 1 + "a"; println(x) }'),
                        "<input>", 1, 23, "type mismatch: expected long, found string")
    assert_script_error(pydyn("probe begin { println(nosuch(1)) }"),
                        "<input>", 1, 23, "unresolved function 'nosuch'")
    assert_script_error(pydyn("probe begin { nosuch[1] = 2 }"),
                        "<input>", 1, 15, "'nosuch' is not a global array")
    assert_script_error(pydyn('global arr probe begin { arr[1] = 1; arr["a"] = 2 }'),
                        "<input>", 1, 42, "type mismatch for key 1 of 'arr': long vs string")
    assert_script_error(pydyn(r'probe begin { printf("%d %d\n", 1) }'),
                        "<input>", 1, 15, "format string expects 2 argument(s), 1 given")
    # a never-assigned local with no type context has no type (stap: unresolved type)
    assert_script_error(pydyn("probe begin { println(y); exit() }"),
                        "<input>", 1, 23, "unresolved type for identifier 'y'")
    r = pydyn('probe begin {\n  a = 1\n  s = "x" . a\n  println(s)\n}\n', file="bad.stp")
    assert_script_error(r, str(pydyn.tmp / "bad.stp"), 3, 13,
                        "type mismatch for identifier 'a': long vs string")


def test_wildcard_keys_slices_and_wrapping_arrays(pydyn: Pydyn) -> None:
    script = r"""
global a, w%[3]
probe begin {
  a[1,"x"] = 1; a[2,"x"] = 2; a[1,"y"] = 3; a[3,"z"] = 4
  printf("in1=%d in9=%d\n", [1,*] in a, [9,*] in a)
  foreach ([k, s] in a[*, "x"]) printf("slice %d %s\n", k, s)
  delete a[1, *]
  foreach ([k, s] in a) printf("left %d %s %d\n", k, s, a[k, s])
  for (i = 0; i < 5; i++) w[i] = i * 10
  foreach (k in w) printf("w %d %d\n", k, w[k])
  exit()
}
"""
    assert ok(pydyn(script)) == ("in1=1 in9=0\nslice 1 x\nslice 2 x\nleft 2 x 2\nleft 3 z 4\n"
                                 "w 2 20\nw 3 30\nw 4 40\n")


def test_text_str_and_tokenize(pydyn: Pydyn) -> None:
    script = r"""
probe begin {
  println(text_str("a\tb\"c"))
  println(text_strn("abcdef", 3, 1), text_strn("abcdef", 7, 1))
  t = tokenize("a,b,,c", ",")
  while (t != "") { printf("[%s]", t); t = tokenize("", ",") }
  println("")
  println(user_string_quoted(0))
  println(user_string2(1, "unreadable"))
  exit()
}
"""
    assert ok(pydyn(script)) == 'a\\tb\\"c\n""..."ab"...\n[a][b][c]\n0x0\nunreadable\n'


def test_begin_and_end_priorities(pydyn: Pydyn) -> None:
    script = r"""
probe begin(10) { println("ten") }
probe begin { println("zero") }
probe begin(-5) { println("minus") }
probe end(1) { println("end1") }
probe end { println("end0") }
probe begin(20) { exit() }
"""
    assert ok(pydyn(script)) == "minus\nzero\nten\nend0\nend1\n"


def test_floating_point_builtins(pydyn: Pydyn) -> None:
    script = r"""
probe begin {
  a = string_to_fp("1.5"); b = long_to_fp(2)
  println(fp_to_string(fp_mul(a, b), 3), " ", fp_lt(a, b), " ", fp_le(b, a), " ",
          fp_eq(a, a), " ", fp_to_long(fp_div(b, a)), " ", fp_to_string(fp_sub(a, b), 1))
  println(fp_to_string(fp32_to_fp64(0x40490fdb), 5), " ", fp_to_string(fp_add(a, a), 0))
  exit()
}
"""
    assert ok(pydyn(script)) == "3.000 1 0 1 1 -0.5\n3.14159 3\n"


def test_string_and_map_limits_from_the_command_line(pydyn: Pydyn) -> None:
    script = r"""
global a
probe begin {
  s = "0123456789012345678901234567890"
  println(s)
  a[1] = 1; a[2] = 2; a[3] = 3; a[4] = 4
  exit()
}
"""
    r = pydyn(script, defines=("MAXSTRINGLEN=20", "MAXMAPENTRIES=3"))
    assert r.returncode == 1
    assert r.stdout.splitlines()[0] == "01234567890123456789012"   # 20, rounded up to 24
    errors = r.stderr.splitlines()
    # the 4th insertion; an array without a size of its own names the limit, as stap
    assert errors[0] == "ERROR: Array overflow, check MAXMAPENTRIES near identifier 'a' at " \
                        "<input>:6:33 in probe begin"
    assert "WARNING: Number of errors: 1, skipped probes: 0" in errors
    assert any(line.startswith("hint: Array overflow: raise -D MAXMAPENTRIES") for line in errors)
