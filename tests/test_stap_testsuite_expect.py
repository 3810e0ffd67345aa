"""The runner's reading of an .exp that builds variants with procs and switch, sources
a .tcl per variant and judges a spawned stap by its expect block (the shape of
systemtap.exelib): the block's patterns are counted as expect counts them, in order,
the output read through a pty's \\r\\n, and the commands after the block pass or fail
the test.  A fake stap (a shell script) prints the output."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import stap_testsuite  # noqa: E402

EXP = r"""
proc twice {word} {
    set out [list $word]
    lappend out $word
    return
}
set names {}
switch -regexp $::tcl_platform(machine) {
    {^no-such-machine$} { set names [list wrong] }
    default { set names [list one two] }
}
foreach name $names {
    if {$name == "skipped"} { continue; }
    twice $name
    set testname $name
    source $srcdir/$subdir/judge.tcl
}
"""
JUDGE = r"""
set hits 0
set other 0
spawn stap FAKE $testname
expect {
  -timeout 60
# a comment line between the pairs
    -re {^hit [0-9]\r\n} {incr hits; exp_continue}
    -re {^other[^\r\n]*\r\n} {incr other; exp_continue}
    timeout { fail "judge-$testname (timeout)" }
    eof { }
}
catch {close}
if {$hits == 2} { pass "hits-$testname" } { fail "hits-$testname ($hits)" }
if {$other == 1} { pass "other-$testname" } { fail "other-$testname ($other)" }
"""


def _collect(tmp_path: Path, fake_output: str) -> list[stap_testsuite.Test]:
    suite = tmp_path / "testsuite"
    d = suite / "systemtap.exelib"
    d.mkdir(parents=True)
    (d / "variants.exp").write_text(EXP)
    fake = tmp_path / "fake.sh"
    fake.write_text(f"#!/bin/sh\nprintf '{fake_output}'\n")
    fake.chmod(0o755)
    (d / "judge.tcl").write_text(JUDGE.replace("stap FAKE", f"{fake}"))
    work = tmp_path / "work"
    work.mkdir()
    it = stap_testsuite.Interp(suite, d / "variants.exp", work)
    it.run((d / "variants.exp").read_text())
    for t in it.tests:
        stap_testsuite.run_one(t, {"PATH": "/usr/bin:/bin"}, 20)
    return it.tests


@pytest.mark.unit
def test_spawned_run_counted_and_judged(tmp_path: Path) -> None:
    tests = _collect(tmp_path, "hit 1\\nother x\\nhit 2\\n")
    assert [t.name.rsplit(": ", 1)[1] for t in tests] == ["fake-one", "fake-two"]
    assert all(t.mode == "expect" and t.passed for t in tests), [t.first_error for t in tests]


@pytest.mark.unit
def test_a_line_no_pattern_matches_ends_the_counting(tmp_path: Path) -> None:
    # expect's patterns are anchored at what is unread: "stray" stops the block, so the
    # second hit is never counted and the .exp's check fails the test
    tests = _collect(tmp_path, "hit 1\\nother\\nstray\\nhit 2\\n")
    assert tests and not any(t.passed for t in tests)
    assert "fail: " not in tests[0].first_error
    assert tests[0].first_error.startswith("hits-one (1)"), tests[0].first_error
    assert "stray" in tests[0].first_error


@pytest.mark.unit
def test_other_directories_keep_expect_out_of_scope(tmp_path: Path) -> None:
    d = tmp_path / "testsuite" / "systemtap.base"
    d.mkdir(parents=True)
    exp = d / "spawns.exp"
    exp.write_text("spawn stap -e {probe begin {exit()}}\nexpect { eof { } }\n")
    (tmp_path / "work").mkdir()
    it = stap_testsuite.Interp(tmp_path / "testsuite", exp, tmp_path / "work")
    with pytest.raises(stap_testsuite.Unsupported):
        it.run(exp.read_text())
