"""C++ names and members: a probe point matches the demangled qualified name with
wildcards (`ns::Foo::*`, `twice<int>`), and `ppfunc()`/`probefunc()` give that
name, on tests/progs/dwarf_cxx.cc at -O0 and -O2, m64 and m32; the mangled
symbol still matches too; `$this->v`, `$this$` and usymname() in a method.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cbuild import BUILDS, PROGS, Build, build_c, have_cxx, run_pydyn

from pydyn.launcher.elf.demangle import demangle, function_name

SRC = PROGS / "dwarf_cxx.cc"
ROUNDS = 3

SCRIPT = """global n
probe process("{exe}").function("ns::Foo::*"), process("{exe}").function("twice<int>"),
      process("{exe}").function("_ZN2ns6helperEl") {{ n[ppfunc(), probefunc()]++ }}
probe end {{ foreach ([a, b] in n) printf("%s|%s|%d\\n", a, b, n[a, b]) }}
"""


def test_demangle_and_strip() -> None:
    assert demangle("_ZNK2ns3Foo3getEv") == "ns::Foo::get() const"
    assert function_name("_ZNK2ns3Foo3getEv") == "ns::Foo::get"
    assert function_name("_Z5twiceIiET_S0_") == "twice<int>"
    assert function_name("_ZN2nsltERKNS_3FooES2_") == "ns::operator<"
    assert function_name("main") == "main" and demangle("_Znot-a-name") == "_Znot-a-name"


@pytest.mark.parametrize("b", BUILDS, ids=[b.id for b in BUILDS])
def test_demangled_probe_points_and_names(tmp_path: Path, b: Build, cache: Path) -> None:
    if not have_cxx(b.m32):
        pytest.skip("no C++ toolchain for this ABI (g++-multilib)")
    exe = build_c(SRC, tmp_path / "cxx", m32=b.m32, opt=b.opt, extra=("-g", "-lstdc++"))
    res = run_pydyn(cache, "-e", SCRIPT.format(exe=exe), "-c",
                    f"{exe} {ROUNDS}", timeout=120)
    assert res.returncode == 0, res.stderr
    lines = [ln for ln in res.stdout.splitlines() if "|" in ln]
    # the constructor may be emitted as C1 and C2 at one address: one site
    assert sorted(lines) == [f"{name}|{name}|{count}" for name, count in (
        ("ns::Foo::Foo", ROUNDS), ("ns::Foo::bar", 2 * ROUNDS), ("ns::Foo::get", ROUNDS),
        ("ns::helper", ROUNDS), ("twice<int>", ROUNDS))], res.stdout
    assert f"sum={sum(i + 1 + i + 6 + i + 2 * i + 2 * i for i in range(ROUNDS))}" in res.stdout


MEMBERS = """probe process("{exe}").function("ns::Foo::bar") {{
  printf("m %s v=%d k=%d %s %s\\n", ppfunc(), $this->v, $k, $this$,
         usymname(strtol(tokenize(ubacktrace(), " "), 16)))
}}
"""


@pytest.mark.parametrize("b", BUILDS, ids=[b.id for b in BUILDS])
def test_this_members_and_usymname(tmp_path: Path, b: Build, cache: Path) -> None:
    if not have_cxx(b.m32):
        pytest.skip("no C++ toolchain for this ABI (g++-multilib)")
    exe = build_c(SRC, tmp_path / "cxx", m32=b.m32, opt=b.opt, extra=("-g", "-lstdc++"))
    res = run_pydyn(cache, "-e", MEMBERS.format(exe=exe), "-c",
                    f"{exe} {ROUNDS}", timeout=120)
    assert res.returncode == 0, res.stderr
    assert [ln for ln in res.stdout.splitlines() if ln.startswith("m ")] == [
        f"m ns::Foo::bar v={i} k={k} {{.v={i}}} ns::Foo::bar"
        for i in range(ROUNDS) for k in (1, 2)], res.stdout
