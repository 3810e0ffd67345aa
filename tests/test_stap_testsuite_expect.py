"""The runner's reading of an .exp that builds variants with procs and switch, sources
a .tcl per variant and judges a spawned stap by its expect block (the shape of
systemtap.exelib): the block's patterns are counted as expect counts them, in order,
the output read through a pty's \\r\\n, and the commands after the block pass or fail
the test.  A fake stap (a shell script) prints the output."""

from __future__ import annotations

import re
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
spawn stap $testname
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
    (d / "judge.tcl").write_text(JUDGE)
    return _run(tmp_path, d / "variants.exp", fake_output)


def _fake_stap(tmp_path: Path, output: str) -> dict[str, str]:
    """The environment of a run whose `stap` is a shell script printing output."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    fake = bindir / "stap"
    fake.write_text(f"#!/bin/sh\nprintf '{output}'\n")
    fake.chmod(0o755)
    return {"PATH": f"{bindir}:/usr/bin:/bin"}


def _run(tmp_path: Path, exp: Path, fake_output: str) -> list[stap_testsuite.Test]:
    env = _fake_stap(tmp_path, fake_output)
    work = tmp_path / "work"
    work.mkdir()
    it = stap_testsuite.Interp(tmp_path / "testsuite", exp, work)
    it.run(exp.read_text())
    for t in it.tests:
        stap_testsuite.run_one(t, env, 20)
    return it.tests


@pytest.mark.unit
def test_spawned_run_counted_and_judged(tmp_path: Path) -> None:
    tests = _collect(tmp_path, "hit 1\\nother x\\nhit 2\\n")
    assert [t.name.rsplit(": ", 1)[1] for t in tests] == ["stap-one", "stap-two"]
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


# Two runs in one block and one in a loop, judged each by the commands up to the next
# spawn: glob patterns (no flag), `default`, expect_out, `info procs`.
SEVERAL = r"""
set test "several"
set ended 0
spawn stap -e {probe begin {exit()}}
set seen 0
expect {
    "hit ?" { incr seen; exp_continue }
    default { set ended 1 }
}
if {$seen == 2 && $ended == 1} { pass "$test ($seen)" } { fail "$test ($seen $ended)" }
set test "second"
spawn stap -e {probe begin {exit()}}
set word ""
expect {
    -re {other ([a-z]+)} { set word $expect_out(1,string) }
    eof { }
}
if {$word == "xy"} then { pass $test } else { fail "$test ($word)" }
foreach runtime [list a b] {
    set test "loop $runtime"
    if {[info procs ${runtime}_kfails] ne ""} { fail "no such proc" }
    spawn stap -e {probe begin {exit()}}
    set seen 0
    expect {
        -re {hit [0-9]\r\n} { incr seen; exp_continue }
        eof { }
    }
    if {$seen == 2} { pass $test } { fail "$test $seen" }
}
"""


@pytest.mark.unit
def test_several_runs_each_judged_by_what_follows_it(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    d = tmp_path / "testsuite" / "systemtap.base"
    d.mkdir(parents=True)
    exp = d / "several.exp"
    exp.write_text(SEVERAL)
    monkeypatch.setattr(stap_testsuite, "FULL_TCL_EXPS", {"systemtap.base/several.exp"})
    tests = _run(tmp_path, exp, "hit 1\\nother xy\\nhit 2\\n")
    assert [t.name.rsplit(": ", 1)[1] for t in tests] == [
        "stap-several", "stap-second", "stap-loop a", "stap-loop b"]
    assert all(t.passed for t in tests), [t.first_error for t in tests]
    assert [len(t.expect.after) for t in tests if t.expect] == [2, 1, 1, 1]


@pytest.mark.unit
def test_glob_patterns_match_anywhere_in_what_is_unread() -> None:
    rx = stap_testsuite.expect_regex
    assert rx("-gl", "var @count=0x0") == r"var\ @count=0x0"
    assert re.search(rx("-gl", "a*c?"), "xxabbbcd").group(0) == "abbbcd"
    assert re.search(rx("-gl", "^ab[0-9]"), "ab7") and not re.search(rx("-gl", "^b"), "ab")
    assert rx("-ex", "a.b") == r"a\.b" and rx("-re", "a.b") == "a.b"
