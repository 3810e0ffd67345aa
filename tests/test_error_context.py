"""A handler error in stap's form with its call chain (stap's runtime/handler-error.h):
`MESSAGE near STATEMENT (called from CALL) ... in probe PP`, innermost call first.  A
function that returned names nothing; an error a `catch` took leaves no chain behind.
Checked on a real process, m64 and m32."""

from __future__ import annotations

from pathlib import Path

from cbuild import PROGS, abi_program_fixture, run_pydyn

target = abi_program_fixture(PROGS / "error_chain.c", "error_chain")

SCRIPT = """\
global y, z
function inner(n) { if (n == 0) error("boom")
  return 10 / (n - 1) }
function outer(n) { x = inner(n); return x }
function ok() { println("ok") }
probe process("EXE").mark("tick") {
  ok()
  try { outer(0) } catch (msg) { println("caught ", msg) }
  y = outer($arg1)
  z = 1 / ($arg1 - 2)
}
"""


def test_error_names_its_call_chain_and_probe(target: Path, cache: Path) -> None:
    res = run_pydyn(cache, "-D", "MAXERRORS=10", "-e", SCRIPT.replace("EXE", str(target)),
                    "-c", str(target))
    assert "Traceback" not in res.stderr
    assert res.stdout.splitlines() == [*["ok", "caught boom"] * 3, "y=10", "z=0"], \
        res.stdout
    pp = f'process("{target}").mark("tick")'
    chain = ("(called from identifier 'inner' at <input>:4:25) "
             "(called from identifier 'outer' at <input>:9:7)")
    errors = [line for line in res.stderr.splitlines() if line.startswith("ERROR: ")]
    assert errors == [
        f"ERROR: boom near identifier 'error' at <input>:2:33 {chain} in probe {pp}",
        f"ERROR: division by 0 near operator '/' at <input>:3:13 {chain} in probe {pp}",
        # after ok() returned and a caught error: the probe's own statement alone
        f"ERROR: division by 0 near operator '/' at <input>:10:9 in probe {pp}",
    ], res.stderr
    assert res.stderr.count("WARNING") == 1, res.stderr
    assert "WARNING: Number of errors: 3, skipped probes: 0" in res.stderr


STATES = """\
probe process("EXE").mark("tick") { if ($arg1 == 1) println(1 / ($arg1 - 1)) }
probe end { println("end") }
probe error { println("error") }
"""


def test_end_or_error_probes_by_session_state(target: Path, cache: Path) -> None:
    """stap's session states: errors beyond MAXERRORS run the `error` probes and not
    `end`; errors within it run `end` and not `error`."""
    script = STATES.replace("EXE", str(target))
    over = run_pydyn(cache, "-e", script, "-c", str(target))
    assert over.returncode == 1
    assert over.stdout.splitlines() == ["error"], over.stdout + over.stderr
    within = run_pydyn(cache, "-D", "MAXERRORS=10", "-e", script, "-c", str(target))
    assert within.stdout.splitlines() == ["end"], within.stdout + within.stderr
    for res in (over, within):
        assert "WARNING: Number of errors: 1, skipped probes: 0" in res.stderr, res.stderr


def test_statement_reaching_maxaction_fails(target: Path, cache: Path) -> None:
    """stap's actionremaining: the statement that uses up the budget is the error, so a
    handler of three statements needs MAXACTION=4."""
    script = (f'global x, y, z probe process("{target}").mark("tick") '
              "{ x = 1; y = 2; z = 3 }")
    short = run_pydyn(cache, "-D", "MAXACTION=3", "-e", script, "-c", str(target))
    assert short.returncode == 1
    errors = [line for line in short.stderr.splitlines() if line.startswith("ERROR: ")]
    assert errors == ["ERROR: MAXACTION exceeded near operator '=' at <input>:1:"
                      f"{script.index('z = 3') + 3} in probe "
                      f'process("{target}").mark("tick")'], short.stderr
    enough = run_pydyn(cache, "-D", "MAXACTION=4", "-e", script, "-c", str(target))
    assert enough.returncode == 0, enough.stderr
    assert enough.stdout.splitlines() == ["x=1", "y=2", "z=3"], enough.stdout


def test_for_loop_counts_as_stap(target: Path, cache: Path) -> None:
    """A `for` is its own statement, its initialisation one more, each test of its
    condition one more: with MAXACTION=5 the third test fails, at i == 2 (stap's
    systemtap.base/suppress-time-limit stops its loop at 9997 of MAXACTION 10000)."""
    script = (f'global i probe process("{target}").mark("tick") '
              "{ for (i = 0; i < 5; i++) {} } probe error { println(i) }")
    res = run_pydyn(cache, "-D", "MAXACTION=5", "-e", script, "-c", str(target))
    assert res.stdout == "2\n", res.stdout + res.stderr
    assert "ERROR: MAXACTION exceeded near keyword 'for'" in res.stderr, res.stderr
