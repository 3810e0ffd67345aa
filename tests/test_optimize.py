"""stap's pass-2 optimisation before types (translate/optimize.py): statements whose
value nothing uses are cut down to what has effects, side-effect-free ones dropped with
stap's warnings, constants folded, `@defined($x)` in a probe with no context collapsed
to 0; `-u` keeps everything.  On a real program, m64 and m32: a `/* pure */` guru
function that lies (it fails, setting stap's CONTEXT->last_error) is never called where
its value is unused, while the impure calls beside it still run."""

from __future__ import annotations

from pathlib import Path

import pytest
from cbuild import abi_program_fixture, run_pydyn

from pydyn.launcher.errors import ScriptError
from pydyn.launcher.script import ast, parse_script
from pydyn.launcher.script.elide import elide_unused_functions
from pydyn.launcher.translate.optimize import optimize
from pydyn.launcher.translate.warnings import deduplicate


def optimized(src: str, contextless: tuple[int, ...] = ()) -> tuple[list[str], list[str]]:
    """The dump of each probe's body after optimising, and the warnings as rendered."""
    script = elide_unused_functions(parse_script(src, "<input>", guru=True))
    out = optimize(script, contextless)
    return ([ast.dump(p.body) for p in out.script.probes],
            [w if isinstance(w, str) else str(w) for w in deduplicate(out.warnings)])


@pytest.mark.unit
def test_expressions_whose_value_is_unused_go_before_types() -> None:
    # `g + 2` would add a string; $such has no meaning in a begin probe: both are gone
    # before types look, as in stap; the write of the global stays
    bodies, _ = optimized("global g\nfunction same(x) { return x }\n"
                          "probe begin { a = g + 2; same(same(5)); g = \"s\"; "
                          "no . $such . $thing + $other }")
    assert bodies == ["Block((ExprStatement(Assign('=', Symbol('g'), StringLiteral('s'))),))"]


@pytest.mark.unit
def test_loops_and_conditions_with_nothing_to_do_go() -> None:
    src = ("global arr\nprobe begin { while (24) ; }\nprobe begin { for (i = 0; i < 3; i++) ; }\n"
           "probe begin { foreach (k in arr) arr[k] + 1; }\nprobe begin { v = 1; if (v) { } }\n"
           "probe begin { { { } } }\nprobe begin { arr[1] = 2 }")
    bodies, _ = optimized(src)
    # stap keeps a loop whose controls write a variable (for's i)
    assert bodies[0] == "Block(())" and bodies[2:5] == ["Block(())"] * 3, bodies
    assert bodies[1].startswith("Block((For(Assign("), bodies
    assert bodies[5] != "Block(())"


@pytest.mark.unit
def test_void_expressions_become_the_statements_with_effects() -> None:
    src = """function loud() { printf("x"); return 1 }
function quiet:long () %{ /* pure */ STAP_RETVALUE = 1; %}
probe begin { loud() && quiet(); quiet() || loud(); quiet() ? loud() : quiet();
              sprintf("%d", loud() + quiet()); -loud(); loud() . "s" }"""
    bodies, _ = optimized(src)
    call = "ExprStatement(Call('loud', ()))"
    assert bodies == [f"Block(({call}, If(Unary('!', Call('quiet', ())), {call}, None), "
                      f"If(Call('quiet', ()), {call}, None), {call}, {call}, {call}))"]


@pytest.mark.unit
def test_first_round_warnings_in_stap_words() -> None:
    # the later statements' "Eliding side-effect-free expression" are repeats: counted
    _, warnings = optimized("function noop() { }\nprobe begin { x = 1; noop(); (y) }")
    assert warnings == [
        "WARNING: never-assigned local variable 'y' (similar: x): identifier 'y' at <input>:2:31",
        "WARNING: Eliding assignment to 'x': operator '=' at <input>:2:17",
        "WARNING: Eliding side-effect-free expression : identifier 'x' at <input>:2:15",
        "WARNING: side-effect-free function 'noop': identifier 'noop' at <input>:1:10",
        "Number of similar warning messages suppressed: 2.",
    ]


@pytest.mark.unit
def test_constants_fold() -> None:
    bodies, _ = optimized('probe begin { if (1 + 1 == 2 && "a" < "b") print("y") else print("n") '
                          '; while (0) print("never"); x = 7 / -2; print(x % 3, -(2 * 3)) }')
    assert bodies == ["Block((ExprStatement(Call('print', (StringLiteral('y'),))), "
                      "ExprStatement(Assign('=', Symbol('x'), NumberLiteral(-3))), "
                      "ExprStatement(Call('print', (BinaryOp('%', Symbol('x'), "
                      "NumberLiteral(3)), NumberLiteral(-6))))))"]


@pytest.mark.unit
def test_defined_of_a_context_variable_where_there_is_none_collapses() -> None:
    src = 'probe begin { if (@defined($foo)) print("no") }\nprobe end { print("e") }'
    bodies, warnings = optimized(src, contextless=(0, 1))
    assert bodies[0] == "Block(())"
    assert warnings == ["WARNING: Collapsing unresolved @define to 0 [stapprobes]: "
                        "operator '@defined' at <input>:1:19"]
    # where the probe has a context, types decide it (the site's DWARF)
    bodies, warnings = optimized(src)
    assert "Defined" in bodies[0] and warnings == []


def test_cli_elides_before_types_and_u_keeps_it(cache: Path) -> None:
    script = ('global g\nprobe begin { a = g + 2; g = "s"; $such . $target; '
              'if (@defined($foo)) print("no") }\nprobe end { println(g) }')
    res = run_pydyn(cache, "-p2", "-e", script)
    assert res.returncode == 0, res.stderr
    # `g + 2` left of `a = g + 2` goes first; `$such . $target` repeats the message
    assert res.stderr.splitlines()[3::3] == [
        "WARNING: Eliding side-effect-free expression : identifier 'a' at <input>:2:15",
        "Number of similar warning messages suppressed: 1."], res.stderr
    res = run_pydyn(cache, "-p2", "-u", "-e", script)
    assert res.returncode == 1 and "error:" in res.stderr, res.stderr
    # stap's semko/probe_elision: every probe elided, so none is left
    res = run_pydyn(cache, "-p2", "-e",
                    'probe begin { if (@defined($foo)) { print("no") } }\nprobe end { }')
    assert res.returncode == 1 and "no probes found" in res.stderr, res.stderr
    assert "Probe 'begin' has been elided" in res.stderr, res.stderr
    res = run_pydyn(cache, "-p2", "-u", "-e",
                    'probe begin { if (@defined($foo)) { print("no") } }\nprobe end { }')
    assert res.returncode == 0, res.stderr


SRC = r"""
#include <stdio.h>
#include <stdlib.h>
#include <sys/sdt.h>

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 3;
    for (int i = 0; i < n; i++)
        STAP_PROBE1(optim_test, tick, i);
    printf("done\n");
    return 0;
}
"""
N = 4


prog = abi_program_fixture(None, "optim", "prog", text=SRC)


def test_a_lying_pure_function_is_never_called(cache: Path, prog: Path) -> None:
    script = f'''global loud_calls
function loud() {{ loud_calls++; return 1 }}
function liar:long () %{{ /* pure */ CONTEXT->last_error = "the liar was called"; %}}
probe process("{prog}").mark("tick") {{
    loud() && liar(); loud() || liar(); loud() + liar() * $arg1;
    sprintf("%d", liar() - loud()); loud() ? liar() : loud()
}}
probe end {{ printf("loud=%d\\n", loud_calls) }}'''
    res = run_pydyn(cache, "-g", "-w", "-e", script, "-c", f"{prog} {N}")
    assert res.returncode == 0, res.stderr
    assert "liar" not in res.stderr and "ERROR" not in res.stderr, res.stderr
    # each tick: loud() in &&, ||, +, sprintf and ?: -- five calls
    assert res.stdout.splitlines()[-1] == f"loud={5 * N}", res.stdout
    # -u: no elision, the liar's error (stap's CONTEXT->last_error) is the session's
    res = run_pydyn(cache, "-g", "-w", "-u", "-e", script, "-c", f"{prog} {N}")
    assert "ERROR: the liar was called near identifier 'liar'" in res.stderr, res.stderr


@pytest.mark.unit
@pytest.mark.parametrize("src, message", [
    ("global foo\nprobe begin { foo = 1 }\nprobe end { if (4 in foo) { } }",
     "'foo' is a scalar, not an array"),
    ("global a\nprobe begin { a[1] = 1; a[1, 2]; }",
     "array 'a' used with 2 keys, elsewhere with 1"),
    ("probe begin { x = 1; [4] in x }", "'x' is not a global array"),
    ("probe begin { x = 1 <<< 2 }", "aggregate operations need a global statistic"),
    ("global s\nprobe begin { s <<< 1; %{ /* pragma:read:s */ 0 %} }",
     "Aggregates not available in embedded-C"),
    ("probe begin { %{ /* pragma:write:nope */ 0 %} }", "unresolved pragma:write global nope"),
])
def test_symbol_errors_come_before_the_elision(src: str, message: str) -> None:
    # stap's symbol resolution finds them before its optimisation drops the statement
    script = parse_script(src, "<input>", guru=True)
    with pytest.raises(ScriptError, match=message.replace("[", r"\[")):
        optimize(script)
