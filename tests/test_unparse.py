"""-p1 prints the parse tree back as script text (launcher/script/unparse.py): what it
prints parses to the same tree, for generated scripts, mutated and real ones; the CLI's
parse tree dump pipes into `pydyn -p1 -` as SystemTap's parseok/unparser.stp does; macro
libraries come from $SYSTEMTAP_TAPSET as from -I."""

from __future__ import annotations

from pathlib import Path

import pytest
from cbuild import run_pydyn
from hypothesis import HealthCheck, assume, given, note, settings
from hypothesis import strategies as st
from test_parser_fuzz import ARGS, MUTATION, SCRIPTS, mutate

from pydyn.launcher.errors import ScriptError
from pydyn.launcher.script import ast, parse_script, recursion_headroom
from pydyn.launcher.script.library import LibraryFile
from pydyn.launcher.script.unparse import expression, parse_tree_dump, quote, unparse_file

ROOT = Path(__file__).resolve().parent.parent
REAL = sorted([*(ROOT / "tests" / "scripts").glob("*.stp"), *(ROOT / "examples").glob("*.stp")])
PROPERTY = settings(max_examples=200, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


def parse(text: str, args: tuple[str, ...] = (), guru: bool = False
          ) -> tuple[ast.Script, LibraryFile]:
    files: list[LibraryFile] = []
    script = parse_script(text, "t.stp", args=args, guru=guru, on_file=files.append)
    return script, files[-1]


def assert_round_trip(text: str, args: tuple[str, ...] = (), guru: bool = False) -> str:
    """unparse(parse(text)) parses to the same tree (the file as written and the script
    with its aliases expanded), and unparsing that gives the same text again."""
    with recursion_headroom():
        script, own = parse(text, args, guru)
        printed = unparse_file(own)
        try:
            again, own_again = parse(printed, guru=guru)
        except ScriptError as exc:
            raise AssertionError(f"the unparsed text does not parse: {exc.render()}\n"
                                 f"{printed}") from None
        assert ast.dump(own_again) == ast.dump(own), printed
        assert ast.dump(again) == ast.dump(script), printed
        assert unparse_file(own_again) == printed
    return printed


# -- generated scripts ------------------------------------------------------------------

ATOMS = st.sampled_from([
    "x", "y", "0", "1", "42", "0x7f", "017", "9223372036854775807", "9223372036854775808",
    "18446744073709551615", '"s"', '"a\\n\\"b\\\\c\\td"', '"\\377\\x01\\0end"', '"ü"',
    '"%d\\n"', "a[1]", 'a[x, "k"]', "f(1)", "f(x, y)", "pid()", "$arg1", "$p->m[2]",
    "$v$", "$p->m$$", "$p[1]$", "$$parms", "&$p->m", "@count(s)", "@variance(s, 3)",
    "@sum(s)", "@defined($x)", "@entry($a)", '@cast(x, "struct t")->m',
    '&@cast(x, "struct t", "mod")->m[1]', '@var("g@f.c")->n', '@var("h", "mod")',
    "(x)->m", "&(y)", "f(x)->n$", "@hist_log(s)[3]", "@hist_linear(s, -5, 10, 2)[0]",
    'user_string_warn(x, "e")', '"con" . "cat"', "0 * x",
])
BINARY = ["+", "-", "*", "/", "%", "<<", ">>", ">>>", "&", "|", "^", ".", "&&", "||", "==",
          "!=", "<", "<=", ">", ">="]
ASSIGN = ["=", "+=", "-=", "*=", "/=", "%=", "<<=", ">>=", "&=", "|=", "^=", ".=", "<<<"]


def _compound(kids: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.tuples(kids, st.sampled_from(BINARY), kids).map(" ".join),
        kids.map(lambda k: f"({k})"),
        st.tuples(st.sampled_from(["-", "+", "!", "~", "- -", "!!"]), kids).map("".join),
        st.tuples(kids, kids, kids).map(lambda t: f"{t[0]} ? {t[1]} : {t[2]}"),
        st.tuples(st.sampled_from(["x", "y", "a[1]", "$p->m"]), st.sampled_from(ASSIGN),
                  kids).map(" ".join),
        st.sampled_from(["x++", "--y", "++a[1]", "a[x]--", "++$p->m"]),
        kids.map(lambda k: f"{k} in a"),
        st.tuples(kids, kids).map(lambda t: f"[{t[0]}, *] in a" if "=" not in t[0] else "1"),
        kids.map(lambda k: f'{k} =~ "^a+\\\\.b"'),
        kids.map(lambda k: f'{k} !~ "x"'),
        st.lists(kids, min_size=1, max_size=3).map(lambda ks: f"f({', '.join(ks)})"),
        st.lists(kids, min_size=1, max_size=2).map(lambda ks: f"a[{', '.join(ks)}]"),
        kids.map(lambda k: f'printf("%d %s\\n", {k}, "s")'),
        kids.map(lambda k: f"@cast({k}, \"struct s\")->f"),
        kids.map(lambda k: f"@defined({k})"),
    )


EXPRS = st.recursive(ATOMS, _compound, max_leaves=12)


def _statements(kids: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.tuples(EXPRS, kids).map(lambda t: f"if ({t[0]}) {t[1]}"),
        st.tuples(EXPRS, kids, kids).map(lambda t: f"if ({t[0]}) {t[1]} else {t[2]}"),
        st.tuples(EXPRS, kids).map(lambda t: f"while ({t[0]}) {{ {t[1]} break }}"),
        st.tuples(EXPRS, EXPRS, kids).map(lambda t: f"for (x = {t[0]}; {t[1]}; x++) {t[2]}"),
        kids.map(lambda k: f"for (;;) {{ continue; {k} }}"),
        st.tuples(st.sampled_from([
            "foreach (k in a)", "foreach ([k, l-] in a[*, 1] limit 3)",
            "foreach (v = [k] in a+)", "foreach (v- = k in a)", "foreach (k in s @sum-)",
            "foreach ([k, l] in a[x, *] @count+ limit x + 1)",
            "foreach (b in @hist_log(s))", "foreach (b in @hist_linear(s, 0, 100, 10))"]),
            kids).map(" ".join),
        st.lists(kids, max_size=3).map(lambda ks: "{ " + "; ".join(ks) + " }"),
        st.tuples(kids, kids).map(lambda t: f"try {{ {t[0]} }} catch (msg) {{ {t[1]} }}"),
        kids.map(lambda k: f"try {{ {k} }} catch {{ }}"),
    )


STATEMENTS = st.recursive(
    st.one_of(EXPRS, st.sampled_from(["next", ";", "delete a", "delete a[1, *]", "delete x",
                                      "print(@hist_log(s))", "println(@hist_linear(s, 1, 9, 2))",
                                      "printd(\",\", x, y)", "exit()"])),
    _statements, max_leaves=6)

HEADS = st.sampled_from([
    "begin", "end", "begin(-5), end(10)", "timer.ms(100).randomize(5)", "error!",
    'process("/bin/true").function("m*a*n").return?',
    'process("a").{mark("x"), function("f").call}',
    "oneshot", "al.sub if (x > 1)", "never if (@defined($x))",
])


# the unit tests (no compiler, no target process) run in `make check`
@pytest.mark.unit
@PROPERTY
@given(st.lists(STATEMENTS, min_size=1, max_size=4), HEADS, EXPRS)
def test_generated_scripts_round_trip(body: list[str], head: str, ret: str) -> None:
    text = ('@define twice(v) %( (@v * 2) %)\n'
            'global a, s, x = -3, y = "init", big[100], w%\nprivate global p%[5]\n'
            f"probe {head} {{\n  " + "\n  ".join(body) + "\n}\n"
            "probe al = begin, end { x = @twice(x) }\nprobe al2 += al { y = \"\" }\n"
            f"function f:long (x, y:string) : 2 {{ {body[0]}\n return {ret} }}\n"
            f"private function g(k) {{ return }}\nfunction h:string () {{ return \"h\" }}\n")
    note(text)
    try:
        parse(text)
    except ScriptError:
        assume(False)
    assert_round_trip(text)


@pytest.mark.unit
@PROPERTY
@given(st.sampled_from(range(len(SCRIPTS))), st.lists(MUTATION, min_size=1, max_size=6),
       ARGS)
def test_mutated_corpus_round_trips(index: int, mutations: list[tuple[str, int, int, str]],
                                    args: tuple[str, ...]) -> None:
    text = mutate(SCRIPTS[index], mutations)
    try:
        parse(text, args)
    except (ScriptError, RecursionError):
        assume(False)
    assert_round_trip(text, args)


@pytest.mark.unit
@pytest.mark.parametrize("path", REAL, ids=lambda p: p.name)
def test_real_scripts_round_trip(path: Path) -> None:
    assert_round_trip(path.read_text(), args=("1", "2", "3"))


# -- what the printed text looks like -----------------------------------------------------


@pytest.mark.unit
def test_strings_escape_what_they_hold() -> None:
    assert quote('a"b\\c\n\t') == '"a\\"b\\\\c\\n\\t"'
    # a byte escape (kept as a lone surrogate) and a control character: octal
    assert quote("\udcff\x01x") == '"\\377\\001x"'
    assert quote("ü") == '"ü"'


@pytest.mark.unit
def test_operands_are_parenthesised_as_stap_prints_them() -> None:
    _, own = parse("probe begin { x = -1 + 2 * y ? z : !w; print(x++, --y) }")
    body = own.probes[0].body.statements
    assert isinstance(body[0], ast.ExprStatement)
    assert expression(body[0].expr) == "(x) = (((-(1)) + ((2) * (y)))?(z):(!(w)))"
    assert isinstance(body[1], ast.ExprStatement)
    assert expression(body[1].expr) == "print((x)++, --(y))"
    # 2**63 wraps negative: it prints as the literal that gives it, not as a negation
    _, own = parse("probe begin { x = 9223372036854775808 }")
    stmt = own.probes[0].body.statements[0]
    assert isinstance(stmt, ast.ExprStatement)
    assert expression(stmt.expr) == "(x) = (9223372036854775808)"


@pytest.mark.unit
def test_the_dump_keeps_the_file_as_written() -> None:
    # aliases stay aliases, the file's order is stap's (globals, aliases, probes,
    # functions), brace groups print expanded
    text = ('function f(x) { return x }\nprobe p.{a, b}? { f(1) }\n'
            'global g = 1\nprobe al = begin { }\n')
    _, own = parse(text)
    assert parse_tree_dump([own]).splitlines() == [
        "# parse tree dump", "# file t.stp",
        "global g = 1",
        "probe al = begin {", "}",
        "probe p.a?, p.b? {", "  f(1);", "}",
        "function f (x) {", "  return x;", "}",
        ""]


# -- the command line --------------------------------------------------------------------


def test_p1_output_parses_again(cache: Path, tmp_path: Path) -> None:
    script = tmp_path / "s.stp"
    script.write_text('global n\nprobe begin { n = 5; if (n > 1) printf("%d\\n", n) '
                      'else { n++ } }\nprobe end { delete n }\n')
    first = run_pydyn(cache, "-p1", str(script))
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith(f"# parse tree dump\n# file {script}\nglobal n\n"), \
        first.stdout
    again = run_pydyn(cache, "-p1", "-", input=first.stdout)
    assert again.returncode == 0, again.stderr
    assert again.stdout == first.stdout.replace(f"# file {script}", "# file <stdin>")
    inline = run_pydyn(cache, "-p1", "-e", "probe begin { exit() }")
    assert inline.stdout == "# parse tree dump\n# file <input>\nprobe begin {\n  exit();\n}\n\n"


def test_p1_v_prints_the_tapsets_too(cache: Path, tmp_path: Path) -> None:
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "t.stp").write_text("function twice(x) { return 2 * x }\n")
    res = run_pydyn(cache, "-v", "-p1", "-I", str(lib), "-e", "probe begin { twice(1) }")
    assert res.returncode == 0, res.stderr
    assert f"# file {lib / 't.stp'}\nfunction twice (x) {{\n  return (2) * (x);\n}}\n" \
        in res.stdout, res.stdout
    quiet = run_pydyn(cache, "-p1", "-I", str(lib), "-e", "probe begin { twice(1) }")
    assert "twice (x)" not in quiet.stdout


def test_macro_libraries_of_systemtap_tapset(cache: Path, tmp_path: Path) -> None:
    # $SYSTEMTAP_TAPSET names a directory read as -I reads one, before the -I ones: a
    # file of the same name in a later directory is not read (stap's rule)
    env_dir, inc = tmp_path / "env", tmp_path / "inc"
    env_dir.mkdir()
    inc.mkdir()
    (env_dir / "m.stpm").write_text("%( 1 == 1 %?\n@define seven %( 7 %)\n%:\n"
                                    "@define never %( 0 %)\n%)\n")
    (inc / "m.stpm").write_text("@define seven %( 8 %)\n")
    (inc / "other.stpm").write_text("@define eight %( 8 %)\n")
    env = {"SYSTEMTAP_TAPSET": str(env_dir)}
    res = run_pydyn(cache, "-p1", "-I", str(inc), "-e",
                    "probe begin { println(@seven, @eight) }", env=env)
    assert res.returncode == 0, res.stderr
    assert "  println(7, 8);" in res.stdout.splitlines(), res.stdout
    res = run_pydyn(cache, "-p1", "-e", "probe begin { println(@never) }", env=env)
    assert res.returncode == 1 and "'@never'" in res.stderr, res.stderr
    # without the variable the macro is not there
    res = run_pydyn(cache, "-p1", "-e", "probe begin { println(@seven) }",
                    env={"SYSTEMTAP_TAPSET": str(tmp_path / "missing")})
    assert res.returncode == 1 and "'@seven'" in res.stderr, res.stderr
    # a library with an unterminated conditional is skipped with a warning
    (env_dir / "m.stpm").write_text("%( 1 == 1 %?\n@define seven %( 7 %)\n")
    res = run_pydyn(cache, "-p1", "-e", "probe begin { println(@seven) }", env=env)
    assert res.returncode == 1 and "m.stpm skipped" in res.stderr, res.stderr


def test_p1_stops_where_stap_pass_1_does(cache: Path) -> None:
    # aliases are expanded, and these checked, in stap's later passes: -p1 takes them,
    # -p2 refuses each
    values = ", ".join(str(i) for i in range(33))
    keys = ", ".join(str(i) for i in range(10))
    script = (f"global a probe w.* = begin {{ }} probe r = r.x {{ }} probe r {{ }}\n"
              f"probe end {{ break; println({values}); a[{keys}] = 1 }}")
    res = run_pydyn(cache, "-p1", "-e", script)
    assert res.returncode == 0, res.stderr
    assert "probe w.* = begin {" in res.stdout.splitlines(), res.stdout
    res = run_pydyn(cache, "-p2", "-e", script)
    assert res.returncode == 1 and "an alias name cannot have wildcards" in res.stderr
