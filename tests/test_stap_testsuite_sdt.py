"""bench/stap_testsuite.py's SDT tests: the flag lists read from an .exp, one test a build
variant and ABI, the build command target_compile would run, and how a `checks` test
is judged.  The .exp here is written for this test, in the shape the runner reads."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import stap_testsuite  # noqa: E402

pytestmark = pytest.mark.unit

EXP = r"""
set test "sdt"
set result_string10 {_
1}
set result_string12 {
1 2}
set extra_flags {{additional_flags=-O2}
    {c++ additional_flags=-std=c++98 additional_flags=-x additional_flags=c++}
}
set extra_mssgs {-O2 c++98}
set type_pedantics_idx {1 2}
set type_pedantics {{} additional_flags=-pedantic}
set type_pedantic_mssgs {{} -pedantic}
set pbtype_flags {{""} {additional_flags=-DSTAP_SDT_V2}}
set pbtype_mssgs {{uprobe} {V2_uprobe}}
for {set p 0} {$p < [llength $pbtype_flags]} {incr p} {
    set nested {only here}
}
"""


def test_exp_sets_reads_literal_lists_at_any_depth() -> None:
    sets = stap_testsuite.exp_sets(EXP)
    assert sets["extra_mssgs"] == "-O2 c++98"
    assert sets["nested"] == "only here"
    assert sets["result_string10"] == "_\n1"


def test_sdt_builds_each_variant_for_each_abi(tmp_path: Path) -> None:
    suite = tmp_path / "testsuite"
    base = suite / "systemtap.base"
    base.mkdir(parents=True)
    exp = base / "sdt.exp"
    exp.write_text(EXP)
    (base / "sdt.stp").write_text('probe process(@1).mark("mark_z") { }\n')
    tests = stap_testsuite.sdt_tests(suite, exp, tmp_path / "work", ["m64", "m32"])
    # per ABI and probe type: -O2 once, c++98 with and without -pedantic
    assert len(tests) == 12
    names = [t.name for t in tests]
    assert "systemtap.base/sdt.exp: sdt c++98 -pedantic V2_uprobe (dyninst) [m32]" in names
    first = tests[0]
    assert first.build is not None and first.build[0] == "gcc"
    assert first.build[-4:-2] == ["-m64", str(base / "sdt.c")]
    assert first.expected == "_\n1\n1 2"               # v3: the 11- and 12-argument lines
    assert first.argv == ["stap", "--runtime=dyninst", "-w", str(base / "sdt.stp"),
                          "sdt.c.exe.0", "-c", "./sdt.c.exe.0"]
    cxx = next(t for t in tests if t.name.endswith("c++98 -pedantic V2_uprobe (dyninst) [m32]"))
    assert cxx.build is not None and cxx.build[0] == "g++"
    # the flags before the source, so that `-x c++` applies to it
    src = cxx.build.index(str(base / "sdt.c"))
    assert cxx.build[:src] == [
        "g++", "-g", f"-isystem{suite}", "-Wall", "-Wextra", "-Werror", "-DSTAP_SDT_V2",
        "-std=c++98", "-x", "c++", "-pedantic",
        "-m32", "-idirafter", "/usr/include/x86_64-linux-gnu"]
    assert cxx.expected == "_\n1"                       # v2 has no 11- and 12-argument marks


def _checks(out: str, float_exempt: bool) -> stap_testsuite.Test:
    t = stap_testsuite.Test("g", "g/t", [], Path("."), mode="checks")
    t.check_prefix, t.float_exempt = "sdt_types", float_exempt
    stap_testsuite.judge_checks(t, out)
    return t


def test_checks_every_line_must_pass() -> None:
    assert _checks("sdt_types PASS: a\nsdt_types PASS: b\n", False).passed
    t = _checks("sdt_types PASS: a\nWARNING: something\n", False)
    assert not t.passed and "WARNING" in t.first_error
    assert not _checks("", False).passed
    t = _checks("sdt_types PASS: a\nsdt_types FAIL: int_var (0x1 != 0x2)\n", True)
    assert not t.passed and "int_var" in t.first_error


def test_checks_float_failures_exempt_only_where_the_exp_says() -> None:
    out = "sdt_types PASS: a\nsdt_types FAIL: float_var (1 != 2)\n"
    assert _checks(out, True).passed
    assert not _checks(out, False).passed
