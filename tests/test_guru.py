"""Guru mode `-g`: embedded C at top level, as function bodies and in
expressions, and `set_user_*` writes into a real target (m64 and m32); a bad or
read-only address is a counted error and the target runs on unchanged.  Also
`user_string_nofault`.  Without `-g` all of it is refused, also on a cache hit of
a module built with `-g`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from cbuild import PROGS, build_c, have_m32, run_pydyn

ABIS = ["m64", "m32"]


@pytest.fixture(scope="module")
def progs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("guru")
    return {abi: build_c(PROGS / "dwarf_params.c", tmp / f"dp-{abi}", m32=abi == "m32",
                         opt="-O2", extra=("-g",))
            for abi in ABIS if abi == "m64" or have_m32()}


def prog(progs: dict[str, Path], abi: str) -> Path:
    if abi not in progs:
        pytest.skip("no -m32 toolchain (gcc -m32 / gcc-multilib missing)")
    return progs[abi]


GURU = r"""
%{
static int64_t triple(int64_t x) { return 3 * x; }
%}
function dbl:long (x:long) %{ /* pure */ STAP_RETVALUE = STAP_ARG_x * 2; %}
function old:long (x:long) %{ THIS->__retvalue = triple(THIS->x); %}
function greet:string (s:string) %{
  strlcpy(STAP_RETVALUE, "hi ", MAXSTRINGLEN);
  strlcat(STAP_RETVALUE, STAP_ARG_s, MAXSTRINGLEN);
%}
function early:long (x:long) %{
  if (STAP_ARG_x > 1)
    STAP_RETURN(100);
  STAP_RETVALUE = -1;
%}
function fails:long () %{ STAP_ERROR("no luck %d", 7); %}
probe process("EXE").function("show") {
  set_user_int($p, 42)
  printf("%d %d %s %d %d %d\n", dbl(21), old(5), greet("bob"), early(2), early(0),
         %{ 7 * 6 %})
  try { fails() } catch (msg) { printf("caught: %s\n", msg) }
}
probe process("EXE").function("shout") { set_user_string($s, "loud"); set_user_char($s, 76) }
"""


@pytest.mark.parametrize("abi", ABIS)
def test_embedded_c_and_writes(progs: dict[str, Path], cache: Path, abi: str) -> None:
    exe = prog(progs, abi)
    res = run_pydyn(cache, "-g", "-e", GURU.replace("EXE", str(exe)), "-c", f"{exe} 3")
    assert res.returncode == 0, res.stderr
    out = res.stdout.splitlines()
    assert "42 15 hi bob 100 -1 42" in out, res.stdout
    assert "caught: no luck 7" in out
    assert "value=42" in out              # show() printed what the probe wrote
    assert "Loud" in out                  # shout(): set_user_string, then one char
    assert "quiet" not in res.stdout and "value=5" not in out
    assert "WARNING" not in res.stderr, res.stderr


@pytest.mark.parametrize("abi", ABIS)
@pytest.mark.parametrize("write, addr, size", [
    ("set_user_long(0, 1)", "0x0", "sizeof_long"),
    ("set_user_char($name, 88)", "NAME", "1"),          # a string literal: read-only
    ("set_user_string($name, \"x\")", "NAME", "2"),
])
def test_bad_write_is_a_counted_error(progs: dict[str, Path], cache: Path, abi: str,
                                      write: str, addr: str, size: str) -> None:
    exe = prog(progs, abi)
    script = (f'probe process("{exe}").function("fill") {{ {write}; '
              'println("not reached") }')
    res = run_pydyn(cache, "-g", "-e", script, "-c", f"{exe} 3")
    assert res.returncode == 1
    assert "Traceback" not in res.stderr
    at = "0x[0-9a-f]+" if addr == "NAME" else addr
    nbytes = ("8" if abi == "m64" else "4") if size == "sizeof_long" else size
    fn = write.split("(")[0]
    assert re.search(rf"^ERROR: user memory write fault at {at} \({nbytes} bytes\) near "
                     rf"identifier '{fn}' at <input>:1:\d+ in probe process\(\"{exe}\"\)"
                     r"\.function\(\"fill\"\)$", res.stderr, re.M), res.stderr
    assert "WARNING: Number of errors: 1" in res.stderr
    # the target ran on, unchanged: its read-only string intact
    assert "not reached" not in res.stdout
    assert "total=3010 buf=hello  len=6" in res.stdout
    assert "greeting=read-only" in res.stdout and "quiet" in res.stdout


@pytest.mark.parametrize("script, message", [
    ("%{ int x; %}\nprobe begin { exit() }", "embedded C is not supported without guru mode"),
    ("function f:long () %{ STAP_RETVALUE = 1; %}\nprobe begin { exit() }",
     "embedded C is not supported without guru mode"),
    ("probe begin { println(%{ 1 %}) }", "embedded C is not supported without guru mode"),
    ("probe begin { set_user_long(0, 1); exit() }",
     "set_user_long() writes into the target's memory: only in guru mode"),
])
def test_without_guru_mode(cache: Path, script: str, message: str) -> None:
    res = run_pydyn(cache, "-e", script)
    assert res.returncode == 1 and res.stdout == ""
    first = res.stderr.splitlines()[0]
    assert first.startswith("<input>:1:") and first.endswith(f"error: {message}"), res.stderr
    assert "-g" in res.stderr   # the hint names the option


def test_guru_mode_is_part_of_the_cache_key(progs: dict[str, Path],
                                            new_cache: Callable[[str], Path]) -> None:
    exe = prog(progs, "m64")
    fresh = new_cache("guru-key")
    script = f'probe process("{exe}").function("show") {{ set_user_int($p, 7) }}'
    first = run_pydyn(fresh, "-g", "-e", script, "-c", f"{exe} 1")
    assert first.returncode == 0 and "value=7" in first.stdout, first.stderr
    again = run_pydyn(fresh, "-v", "-e", script, "-c", f"{exe} 1")
    assert again.returncode == 1 and "only in guru mode" in again.stderr, again.stderr
    assert "using cached" not in again.stderr


def test_guru_mode_condition(cache: Path) -> None:
    script = 'probe begin { println(%( guru_mode == 1 %? "guru" %: "plain" %)); exit() }'
    assert run_pydyn(cache, "-e", script).stdout == "plain\n"
    assert run_pydyn(cache, "-g", "-e", script).stdout == "guru\n"


@pytest.mark.parametrize("abi", ABIS)
def test_user_string_nofault(progs: dict[str, Path], cache: Path, abi: str) -> None:
    exe = prog(progs, abi)
    # stap's tapset: the string, or "" when it cannot be read; never an error
    script = (f'probe process("{exe}").function("fill") {{ printf("[%s][%s][%s]\\n", '
              f'user_string_nofault($name), user_string_nofault(0), '
              f'user_string_nofault(1)) }}')
    res = run_pydyn(cache, "-e", script, "-c", f"{exe} 3")
    assert res.returncode == 0, res.stderr
    assert "[hello world][][]" in res.stdout.splitlines()
    assert "ERROR" not in res.stderr and "WARNING" not in res.stderr
