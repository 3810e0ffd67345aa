"""stap's pass-2 warnings about a script's variables and functions, in stap's words and
shape (`WARNING: MESSAGE: TOKEN at FILE:LINE:COL`, ` source:` line, caret), and stap's
-w (no warnings) and -W (warnings are errors, exit 1)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cbuild import run_pydyn

from pydyn.launcher.errors import ScriptWarning, SourceLocation
from pydyn.launcher.script import ast, parse_script
from pydyn.launcher.script.elide import elide_unused_functions
from pydyn.launcher.translate.optimize import optimize
from pydyn.launcher.translate.warnings import deduplicate

REPO = Path(__file__).resolve().parent.parent


def find_warnings(script: ast.Script) -> list[ScriptWarning | str]:
    """The warnings of the optimisation of `script`, as pydyn gives them."""
    return deduplicate(optimize(script).warnings)


def warnings_of(src: str) -> list[str]:
    script = elide_unused_functions(parse_script(src, "<input>"))
    return [str(w) for w in find_warnings(script)]


@pytest.mark.unit
def test_never_assigned_local_with_similar_names() -> None:
    assert warnings_of("global total\nprobe begin { totl = 1; total = cont + totl2 }") == [
        "WARNING: never-assigned local variable 'cont' (similar: totl, total, totl2): "
        "identifier 'cont' at <input>:2:33",
        "WARNING: never-assigned local variable 'totl2' (similar: totl, total, cont): "
        "identifier 'totl2' at <input>:2:40",
        "WARNING: Eliding assignment to 'totl': operator '=' at <input>:2:20",
        # what is left of the assignment, `1`, is a statement that does nothing
        "WARNING: Eliding side-effect-free expression : identifier 'totl' at <input>:2:15",
    ]


@pytest.mark.unit
def test_similar_names_are_the_five_nearest() -> None:
    src = ("probe begin { aa = 1; ab = 1; ac = 1; ad = 1; ae = 1; zzzz = 1;"
           " print(a + aa + ab + ac + ad + ae + zzzz) }")
    assert warnings_of(src) == [
        "WARNING: never-assigned local variable 'a' (similar: aa, ab, ac, ad, ae): "
        "identifier 'a' at <input>:1:71"]


@pytest.mark.unit
def test_function_locals_parameters_and_globals() -> None:
    src = """global g, h = 3, k
function f(a, b) { c = a; return b + d + g + h }
probe begin { k = f(1, 2) }
"""
    assert warnings_of(src) == [
        "WARNING: never-assigned local variable 'd' (similar: a, b, c, g, h): "
        "identifier 'd' at <input>:2:38",
        "WARNING: never-assigned global variable 'g' (similar: h, k): "
        "identifier 'g' at <input>:1:8",
        "WARNING: Eliding assignment to 'c': operator '=' at <input>:2:22",
        "WARNING: Eliding side-effect-free expression : identifier 'c' at <input>:2:20",
    ]


@pytest.mark.unit
def test_uses_that_read_or_write() -> None:
    # compound assignment and ++ read; foreach, catch and <<< write; a parameter is
    # written by its caller, even with a global's name
    src = """global s, arr, seen
function f(seen) { return seen }
probe begin {
  n += 1; m++; s <<< n + m
  arr[1] = 2; foreach ([k] in arr) print(k)
  foreach (v = [q] in arr) print(v + q)
  try { error("x") } catch (msg) { print(msg) }
  print(f(@count(s)))
}"""
    assert warnings_of(src) == []


@pytest.mark.unit
def test_side_effect_free_function_and_uncalled_ones() -> None:
    # stap names a called function whose body is empty (after the call of it, a
    # statement that does nothing); one nothing calls is elided before (without -u)
    # and gets nothing
    src = "function noop() { } function unused() { x = y }\nprobe begin { noop() }"
    assert warnings_of(src) == [
        "WARNING: Eliding side-effect-free expression : identifier 'noop' at <input>:2:15",
        "WARNING: side-effect-free function 'noop': identifier 'noop' at <input>:1:10"]


@pytest.mark.unit
def test_repeated_messages_are_given_once_and_counted() -> None:
    src = "probe begin { x = 1 } probe end { x = 2 }"
    assert warnings_of(src) == [
        "WARNING: Eliding assignment to 'x': operator '=' at <input>:1:17",
        "WARNING: Eliding side-effect-free expression : identifier 'x' at <input>:1:15",
        "Number of similar warning messages suppressed: 2."]


@pytest.mark.unit
def test_clean_scripts_warn_about_nothing() -> None:
    for path in sorted((REPO / "examples").glob("*.stp")):
        script = elide_unused_functions(parse_script(path.read_text(), str(path)))
        assert find_warnings(script) == [], path


@pytest.mark.unit
def test_render_in_stap_shape() -> None:
    line = "probe begin {\tprint(x) }"
    w = ScriptWarning("never-assigned local variable 'x'", "identifier 'x'",
                      SourceLocation("t.stp", 3, 20, line))
    assert w.render().splitlines() == [
        "WARNING: never-assigned local variable 'x': identifier 'x' at t.stp:3:20",
        " source: probe begin { print(x) }",
        " " * 9 + " " * 19 + "^"]
    assert "\033[1;35mWARNING:\033[0m" in w.render(color=True)
    assert ScriptWarning.from_json(w.to_json()) == w


def test_cli_warnings_w_u_and_errors(cache: Path) -> None:
    script = "global total\nprobe begin { total = cont + 1; print(total) }"
    r = run_pydyn(cache, "-p2", "-e", script)
    assert r.returncode == 0, r.stderr
    assert r.stderr.splitlines() == [
        "WARNING: never-assigned local variable 'cont' (similar: total): "
        "identifier 'cont' at <input>:2:23",
        " source: probe begin { total = cont + 1; print(total) }",
        " " * 9 + " " * 22 + "^"]
    for flag in ("-w", "-u"):
        r = run_pydyn(cache, "-p2", flag, "-e", script)
        assert (r.returncode, r.stderr) == (0, ""), (flag, r.stderr)
    # a script in error gets its one error, not the warnings too
    r = run_pydyn(cache, "-p2", "-e", "probe begin { x = 1; print(y) }")
    assert r.returncode == 1
    assert r.stderr.splitlines()[0] == \
        "<input>:1:28: error: unresolved type for identifier 'y'", r.stderr
    assert "WARNING" not in r.stderr


def test_w_silences_and_W_fails_on_a_real_process(cache: Path) -> None:
    counter = str(REPO / "examples" / "bin" / "counter")
    script = ('global hits\nprobe process("' + counter + '").function("main") '
              '{ hits++; last = 1 }\nprobe end { printf("hits=%d\\n", hits) }')
    r = run_pydyn(cache, "-e", script, "-c", f"{counter} 10")
    assert r.returncode == 0, r.stderr
    assert r.stdout.endswith("hits=1\n"), r.stdout
    assert r.stderr.startswith("WARNING: Eliding assignment to 'last': operator '=' at "
                               "<input>:2:"), r.stderr
    quiet = run_pydyn(cache, "-w", "-e", script, "-c", f"{counter} 10")
    assert (quiet.returncode, quiet.stderr) == (0, ""), quiet.stderr
    assert quiet.stdout.endswith("hits=1\n"), quiet.stdout
    # -W: the warning is the error, rendered once with its place, and nothing runs
    failed = run_pydyn(cache, "-W", "-e", script, "-c", f"{counter} 10")
    assert failed.returncode == 1
    assert failed.stdout == ""
    assert failed.stderr.splitlines()[0].endswith(": error: Eliding assignment to 'last'")
    assert "hint: -W makes warnings errors" in failed.stderr
    assert "Traceback" not in failed.stderr
