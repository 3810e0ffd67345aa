"""Tests of the script front end: lexer, preprocessor, parser, AST shapes, errors."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from pydyn.launcher.errors import ScriptError
from pydyn.launcher.script import ast, parse_script
from pydyn.launcher.script.lexer import Kind, tokenize
from pydyn.launcher.script.preprocess import strverscmp

pytestmark = pytest.mark.unit   # no compiler, no target process: `make check`

SCRIPTS = sorted((Path(__file__).parent / "scripts").glob("*.stp"))


def parse(src: str, **kw: object) -> ast.Script:
    return parse_script(src, "t.stp", **kw)  # type: ignore[arg-type]


def body(src: str, **kw: object) -> tuple[ast.Stmt, ...]:
    """The statements of the only probe in `src`."""
    (probe,) = parse(src, **kw).probes
    return probe.body.statements


def expr(src: str) -> str:
    """The dump of one expression, parsed as `probe begin { SRC }`."""
    (stmt,) = body("probe begin { " + src + " }")
    assert isinstance(stmt, ast.ExprStatement)
    return ast.dump(stmt.expr)


def a(name: str) -> str:
    return f"Symbol({name!r})"


def n(value: int) -> str:
    return f"NumberLiteral({value})"


# -- the corpus ---------------------------------------------------------------


def test_corpus_is_big_enough() -> None:
    assert len(SCRIPTS) >= 15


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
@pytest.mark.parametrize("args", [(), ("250", "hello")], ids=["noargs", "args"])
def test_corpus_parses(path: Path, args: tuple[str, ...]) -> None:
    script = parse_script(path.read_text(), str(path), args=args)
    assert script.probes
    for probe in script.probes:
        assert probe.loc.file == str(path)
        loc = probe.loc
        assert loc.source_line[loc.column - 1:].startswith("probe")


def test_corpus_count_marks_shape() -> None:
    path = Path(__file__).parent / "scripts" / "count_marks.stp"
    script = parse_script(path.read_text(), "count_marks.stp")
    assert [g.name for g in script.globals] == ["hits"]
    tick = script.probes[0]
    assert ast.dump(tick.points) == (
        "(ProbePoint((Component('process', './a.out'), Component('mark', 'tick')), "
        "False, False, None),)")
    assert ast.dump(tick.body) == (
        "Block((ExprStatement(IncDec('++', False, "
        "Index(Symbol('hits'), (StringLiteral('tick'),)))),))")
    end = script.probes[2]
    (loop,) = end.body.statements
    assert isinstance(loop, ast.Foreach)
    assert ast.dump(loop.keys) == "(Symbol('name'),)"
    assert isinstance(loop.body, ast.ExprStatement)


def test_corpus_preprocessor_follows_arguments() -> None:
    src = (Path(__file__).parent / "scripts" / "preprocessor.stp").read_text()
    timer_default = parse(src).probes[1].points[0]
    assert timer_default.components[1] == ast.Component("ms", 100,
                                                        timer_default.components[1].loc)
    with_args = parse(src, args=["250", "hello"]).probes[1]
    assert with_args.points[0].components[1].arg == 250
    printf = with_args.body.statements[0]
    assert isinstance(printf, ast.ExprStatement) and isinstance(printf.expr, ast.Call)
    assert ast.dump(printf.expr.args[1]) == "StringLiteral('hello')"
    i386 = parse(src, arch="i686")
    assert ast.dump(i386.globals[0].init) == n(4)
    kernel = parse(src, runtime="kernel", arch="arm64")
    assert ast.dump(kernel.globals[0].init) == n(0)
    assert "kernel runtime" in ast.dump(kernel.probes[0].body)


# -- precedence and associativity ------------------------------------------------


def test_multiplication_binds_tighter_than_addition() -> None:
    assert expr("a + b * c") == f"BinaryOp('+', {a('a')}, BinaryOp('*', {a('b')}, {a('c')}))"
    assert expr("a * b + c") == f"BinaryOp('+', BinaryOp('*', {a('a')}, {a('b')}), {a('c')})"


def test_concatenation_is_left_associative_and_looser_than_plus() -> None:
    assert expr("x . y . z") == f"BinaryOp('.', BinaryOp('.', {a('x')}, {a('y')}), {a('z')})"
    # stap: parse_concatenation sits between shifts and additive.
    assert expr("x . y + z") == f"BinaryOp('.', {a('x')}, BinaryOp('+', {a('y')}, {a('z')}))"
    assert expr("x << y . z") == f"BinaryOp('<<', {a('x')}, BinaryOp('.', {a('y')}, {a('z')}))"


def test_assignment_is_right_associative() -> None:
    assert expr("a = b = c") == f"Assign('=', {a('a')}, Assign('=', {a('b')}, {a('c')}))"
    assert expr("a += b .= c") == f"Assign('+=', {a('a')}, Assign('.=', {a('b')}, {a('c')}))"
    assert expr("s <<< x + 1") == (
        f"Assign('<<<', {a('s')}, BinaryOp('+', {a('x')}, {n(1)}))")


def test_in_binds_tighter_than_logical_and() -> None:
    assert expr("k in arr && c") == (
        f"Logical('&&', ArrayIn(({a('k')},), {a('arr')}), {a('c')})")
    assert expr("[a, b] in arr || !(x in arr)") == (
        f"Logical('||', ArrayIn(({a('a')}, {a('b')}), {a('arr')}), "
        f"Unary('!', ArrayIn(({a('x')},), {a('arr')})))")
    # The key is a whole comparison: stap's parse_array_in.
    assert expr("a + 1 in arr") == (
        f"ArrayIn((BinaryOp('+', {a('a')}, {n(1)}),), {a('arr')})")
    assert expr("x = [k, *] in arr") == (
        f"Assign('=', {a('x')}, ArrayIn(({a('k')}, Wildcard()), {a('arr')}))")


def test_ternary_nests_in_either_branch() -> None:
    assert expr("a ? b : c ? d : e") == (
        f"Ternary({a('a')}, {a('b')}, Ternary({a('c')}, {a('d')}, {a('e')}))")
    assert expr("a ? b ? c : d : e") == (
        f"Ternary({a('a')}, Ternary({a('b')}, {a('c')}, {a('d')}), {a('e')})")
    assert expr("x = a || b ? 1 : 2") == (
        f"Assign('=', {a('x')}, Ternary(Logical('||', {a('a')}, {a('b')}), {n(1)}, {n(2)}))")


def test_bitwise_and_logical_levels() -> None:
    assert expr("a || b && c") == (
        f"Logical('||', {a('a')}, Logical('&&', {a('b')}, {a('c')}))")
    assert expr("a | b ^ c & d") == (
        f"BinaryOp('|', {a('a')}, BinaryOp('^', {a('b')}, BinaryOp('&', {a('c')}, {a('d')})))")
    assert expr("a & b == c") == f"BinaryOp('&', {a('a')}, Comparison('==', {a('b')}, {a('c')}))"
    assert expr("a < b == c") == (
        f"Comparison('==', Comparison('<', {a('a')}, {a('b')}), {a('c')})")
    assert expr("a - b - c") == f"BinaryOp('-', BinaryOp('-', {a('a')}, {a('b')}), {a('c')})"


def test_unary_and_crement() -> None:
    assert expr("-a * b") == f"BinaryOp('*', Unary('-', {a('a')}), {a('b')})"
    assert expr("!a == b") == f"Comparison('==', Unary('!', {a('a')}), {a('b')})"
    assert expr("- -~x") == f"Unary('-', Unary('-', Unary('~', {a('x')})))"
    assert expr("x++ + ++y") == (
        f"BinaryOp('+', IncDec('++', False, {a('x')}), IncDec('++', True, {a('y')}))")
    assert expr("-x--") == f"Unary('-', IncDec('--', False, {a('x')}))"


def test_regex_match() -> None:
    assert expr('s =~ "a.*b"') == f"RegexMatch('=~', {a('s')}, StringLiteral('a.*b'))"
    assert expr('s . t !~ "x"') == (
        f"RegexMatch('!~', BinaryOp('.', {a('s')}, {a('t')}), StringLiteral('x'))")


def test_values() -> None:
    assert expr("f()") == "Call('f', ())"
    assert expr("f(a, g(b))[1]") == (
        f"AutoCast(Call('f', ({a('a')}, Call('g', ({a('b')},)))), (Subscript({n(1)}),), False)")
    assert expr("arr[a, b]") == f"Index({a('arr')}, ({a('a')}, {a('b')}))"
    assert expr("@count(s[k])") == f"StatOp('count', Index({a('s')}, ({a('k')},)), ())"
    assert expr("@variance(s, 3)") == f"StatOp('variance', {a('s')}, (3,))"
    assert expr("@hist_linear(s, -10, 10, 2)[4]") == (
        f"Index(HistOp('linear', {a('s')}, (-10, 10, 2)), ({n(4)},))")
    assert expr("@defined($x) ? @entry($x) : 0") == (
        "Ternary(Defined(TargetSymbol('$x', (), False)), "
        f"Entry(TargetSymbol('$x', (), False)), {n(0)})")
    assert expr("print(@hist_log(s))") == f"Call('print', (HistOp('log', {a('s')}, ()),))"


def test_context_variables() -> None:
    assert expr("$arg1") == "TargetSymbol('$arg1', (), False)"
    for name in ("$name", "$$name", "$$provider", "$$parms", "$$vars", "$$return", "$return"):
        assert expr(name) == f"TargetSymbol({name!r}, (), False)"
    assert expr("$p->a->b[2]") == (
        f"TargetSymbol('$p', (Member('a'), Member('b'), Subscript({n(2)})), False)")
    assert expr("$p$") == "TargetSymbol('$p', (PrettyPrint('$'),), False)"
    assert expr("$$parms$$") == "TargetSymbol('$$parms', (PrettyPrint('$$'),), False)"
    assert expr("$p->next$") == "TargetSymbol('$p', (Member('next'), PrettyPrint('$')), False)"
    assert expr("&$p->x") == "TargetSymbol('$p', (Member('x'),), True)"
    assert expr('@cast(p, "struct s", "./lib.so")->f') == (
        f"Cast({a('p')}, 'struct s', './lib.so', (Member('f'),), False)")
    assert expr('@var("v@a.c")->x') == "AtVar('v@a.c', None, (Member('x'),), False)"


def test_numbers() -> None:
    assert expr("0x1F + 017 + 9") == (
        f"BinaryOp('+', BinaryOp('+', {n(31)}, {n(15)}), {n(9)})")
    # Above 2**63-1 wraps like stap's (int64_t) cast.
    assert expr("0xffffffffffffffff") == n(-1)
    assert expr("-9223372036854775808") == f"Unary('-', {n(-(1 << 63))})"
    script = parse("global a = -9223372036854775808, b = 0x10 probe begin {}")
    assert [g.init for g in script.globals] == [
        ast.NumberLiteral(-(1 << 63), script.globals[0].init.loc),  # type: ignore[union-attr]
        ast.NumberLiteral(16, script.globals[1].init.loc)]  # type: ignore[union-attr]


def test_string_escapes_and_concatenation() -> None:
    (stmt,) = body(r'probe begin { x = "a\n\t\\\"\0101\x41\q" "tail" }')
    assert isinstance(stmt, ast.ExprStatement) and isinstance(stmt.expr, ast.Assign)
    lit = stmt.expr.value
    assert isinstance(lit, ast.StringLiteral)
    assert lit.value == 'a\n\t\\"\x081AqTail'.replace("T", "t")
    (stmt,) = body(r'probe begin { x = "\377é\0" }')
    assert isinstance(stmt, ast.ExprStatement) and isinstance(stmt.expr, ast.Assign)
    assert isinstance(stmt.expr.value, ast.StringLiteral)
    assert stmt.expr.value.as_bytes() == b"\xff\xc3\xa9\x00"


def test_comments() -> None:
    src = "# shell\n// c++\n/* c\n * block */ probe begin { x = 1 /* in */ + 2 # end\n }"
    (stmt,) = body(src)
    assert ast.dump(stmt) == f"ExprStatement(Assign('=', {a('x')}, BinaryOp('+', {n(1)}, {n(2)})))"


# -- statements ------------------------------------------------------------------------


def test_statements_need_no_semicolons() -> None:
    stmts = body("probe begin { a = 1 b = 2; ; c++ }")
    assert [ast.dump(s) for s in stmts] == [
        f"ExprStatement(Assign('=', {a('a')}, {n(1)}))",
        f"ExprStatement(Assign('=', {a('b')}, {n(2)}))",
        f"ExprStatement(IncDec('++', False, {a('c')}))",
    ]


def test_if_else_chain() -> None:
    (stmt,) = body("probe begin { if (a) x = 1 else if (b) ; else { next } }")
    assert ast.dump(stmt) == (
        f"If({a('a')}, ExprStatement(Assign('=', {a('x')}, {n(1)})), "
        f"If({a('b')}, Empty(), Block((Next(),))))")
    (stmt,) = body("probe begin { if (a) if (b) x() else y() }")
    assert ast.dump(stmt) == (
        f"If({a('a')}, If({a('b')}, ExprStatement(Call('x', ())), "
        f"ExprStatement(Call('y', ()))), None)")


def test_loops() -> None:
    stmts = body("probe begin { for (;;) break  for (i = 0; i < 3; i++) continue  "
                 "while (x) x-- }")
    assert ast.dump(stmts[0]) == "For(None, None, None, Break())"
    assert ast.dump(stmts[1]) == (
        f"For(Assign('=', {a('i')}, {n(0)}), Comparison('<', {a('i')}, {n(3)}), "
        f"IncDec('++', False, {a('i')}), Continue())")
    assert ast.dump(stmts[2]) == (
        f"While({a('x')}, ExprStatement(IncDec('--', False, {a('x')})))")


@pytest.mark.parametrize(("head", "keys", "value", "sort", "limit", "slice_"), [
    ("k in arr", "(Symbol('k'),)", "None", "None", "None", "None"),
    ("[a, b] in arr", "(Symbol('a'), Symbol('b'))", "None", "None", "None", "None"),
    ("[a, b-] in arr", "(Symbol('a'), Symbol('b'))", "None", "SortSpec(2, True, None)",
     "None", "None"),
    ("k+ in arr", "(Symbol('k'),)", "None", "SortSpec(1, False, None)", "None", "None"),
    ("k in arr- limit 5", "(Symbol('k'),)", "None", "SortSpec(0, True, None)",
     "NumberLiteral(5)", "None"),
    ("v = [k] in arr", "(Symbol('k'),)", "Symbol('v')", "None", "None", "None"),
    ("v- = k in arr", "(Symbol('k'),)", "Symbol('v')", "SortSpec(0, True, None)", "None",
     "None"),
    ("[a, b] in s @sum+ limit n * 2", "(Symbol('a'), Symbol('b'))", "None",
     "SortSpec(0, False, 'sum')", "BinaryOp('*', Symbol('n'), NumberLiteral(2))", "None"),
    ("[a, b] in arr[*, 3]", "(Symbol('a'), Symbol('b'))", "None", "None", "None",
     "(Wildcard(), NumberLiteral(3))"),
])
def test_foreach_forms(head: str, keys: str, value: str, sort: str, limit: str,
                       slice_: str) -> None:
    (stmt,) = body(f"probe begin {{ foreach ({head}) next }}")
    assert isinstance(stmt, ast.Foreach)
    assert (ast.dump(stmt.keys), ast.dump(stmt.value), ast.dump(stmt.sort),
            ast.dump(stmt.limit), ast.dump(stmt.slice)) == (keys, value, sort, limit, slice_)


def test_foreach_over_histogram() -> None:
    (stmt,) = body("probe end { foreach (b in @hist_log(s)) println(b) }")
    assert isinstance(stmt, ast.Foreach)
    assert ast.dump(stmt.array) == "HistOp('log', Symbol('s'), ())"


def test_delete_try_return() -> None:
    stmts = body("probe begin { delete a[k] delete a delete a[*, 1] "
                 "try { x() } catch { } try { } catch (e) { println(e) } }")
    assert [ast.dump(s) for s in stmts[:3]] == [
        f"Delete(Index({a('a')}, ({a('k')},)))", f"Delete({a('a')})",
        f"Delete(Index({a('a')}, (Wildcard(), {n(1)})))"]
    assert ast.dump(stmts[3]) == "Try(Block((ExprStatement(Call('x', ())),)), None, Block(()))"
    assert ast.dump(stmts[4]) == (
        "Try(Block(()), Symbol('e'), Block((ExprStatement(Call('println', (Symbol('e'),))),)))")
    fn = parse("function f() { return } function g:string() { return \"x\" }").functions
    assert ast.dump(fn[0].body) == "Block((Return(None),))"
    assert ast.dump(fn[1].body) == "Block((Return(StringLiteral('x')),))"


# -- declarations --------------------------------------------------------------------------


def test_globals() -> None:
    script = parse('global a, b = 1, c[100], d%, e%[50], f = "s"; global g')
    assert [ast.dump(g) for g in script.globals] == [
        "Global('a', None, None, False, False)",
        "Global('b', NumberLiteral(1), None, False, False)",
        "Global('c', None, 100, False, False)",
        "Global('d', None, None, True, False)",
        "Global('e', None, 50, True, False)",
        "Global('f', StringLiteral('s'), None, False, False)",
        "Global('g', None, None, False, False)",
    ]
    assert not script.probes


def test_functions() -> None:
    (f,) = parse("function f(a, b:string, c:long):long { }").functions
    assert ast.dump(f) == (
        "Function('f', (Param('a', None), Param('b', 'string'), Param('c', 'long')), "
        "'long', Block(()), False, None)")
    (g,) = parse("private function g:string(x) : 3 { return x }").functions
    assert (g.return_type, g.private, g.priority) == ("string", True, 3)


def test_probe_points() -> None:
    cases = {
        "begin": "(Component('begin', None),)",
        'process("./a.out").mark("tick")':
            "(Component('process', './a.out'), Component('mark', 'tick'))",
        'process.mark("x")': "(Component('process', None), Component('mark', 'x'))",
        'process("p").provider("prov").mark("n*")':
            "(Component('process', 'p'), Component('provider', 'prov'), "
            "Component('mark', 'n*'))",
        'process("p").library("libc.so.6").mark("x")':
            "(Component('process', 'p'), Component('library', 'libc.so.6'), "
            "Component('mark', 'x'))",
        "timer.ms(100).randomize(10)":
            "(Component('timer', None), Component('ms', 100), Component('randomize', 10))",
        'process("p").function("f").return':
            "(Component('process', 'p'), Component('function', 'f'), "
            "Component('return', None))",
        "process(1234).end": "(Component('process', 1234), Component('end', None))",
        "sys*call.*_read*": "(Component('sys*call', None), Component('*_read*', None))",
    }
    for spelling, components in cases.items():
        (probe,) = parse(f"probe {spelling} {{ }}").probes
        (point,) = probe.points
        assert ast.dump(point.components) == components, spelling
        assert (point.optional, point.sufficient, point.condition) == (False, False, None)


def test_probe_point_suffixes_and_groups() -> None:
    (probe,) = parse('probe a ?, b !, c if (x > 1), process("p").{mark("m"), end}? { }').probes
    assert [(p.components[-1].name, p.optional, p.sufficient) for p in probe.points] == [
        ("a", True, False), ("b", True, True), ("c", False, False),
        ("mark", True, False), ("end", True, False)]
    assert ast.dump(probe.points[2].condition) == f"Comparison('>', {a('x')}, {n(1)})"
    assert [len(p.components) for p in probe.points] == [1, 1, 1, 2, 2]


def test_locations_point_at_defining_tokens() -> None:
    src = "global g\nprobe begin {\n  x = a +\n    b * c\n}\n"
    script = parse(src)
    (probe,) = script.probes
    (stmt,) = probe.body.statements
    assert (stmt.loc.line, stmt.loc.column, stmt.loc.source_line) == (3, 3, "  x = a +")
    assert isinstance(stmt, ast.ExprStatement) and isinstance(stmt.expr, ast.Assign)
    assign = stmt.expr
    assert (assign.loc.line, assign.loc.column) == (3, 5)
    plus = assign.value
    assert isinstance(plus, ast.BinaryOp) and isinstance(plus.right, ast.BinaryOp)
    assert (plus.loc.line, plus.loc.column) == (3, 9)
    assert (plus.right.loc.line, plus.right.loc.column, plus.right.loc.source_line) == (
        4, 7, "    b * c")
    assert (script.globals[0].loc.line, script.globals[0].loc.column) == (1, 8)
    assert (probe.loc.line, probe.loc.column) == (2, 1)


def test_empty_script() -> None:
    # stap: nothing left to parse (comments only, or all preprocessed away) is an error
    for text in ("# nothing\n", "@define foo %( 1 %)\n"):
        with pytest.raises(ScriptError, match="the script is empty"):
            parse(text)


# -- preprocessor ----------------------------------------------------------------------------


def cond(condition: str, **kw: object) -> bool:
    """Whether `%( CONDITION %? ... %)` keeps its THEN part."""
    (probe,) = parse(f"%( {condition} %? probe begin {{ }} %: probe end {{ }} %)", **kw).probes
    return probe.points[0].components[0].name == "begin"


def test_conditions() -> None:
    assert cond('runtime == "dyninst"')
    assert not cond('runtime == "kernel"')
    assert cond('runtime != "bpf"')
    assert cond('arch == "x86_64"')
    assert cond('arch == "x86_*"') and cond('arch == "i?86"', arch="i686")
    assert not cond('arch != "x86_64"')
    assert cond('arch == "[ax]*"')
    assert cond("$# == 0") and cond("$# > 1", args=["a", "b"])
    assert cond('@# == "2"', args=["a", "b"])
    assert cond("1 < 2 && 2 < 3") and not cond("1 < 2 && 3 < 2")
    assert cond("1 > 2 || 2 < 3 && 3 < 4") and not cond("1 > 2 || 2 < 3 && 4 < 3")
    assert cond('"abc" < "abd"') and cond("0x10 == 16")
    assert cond('kernel_v >= "2.6.9"', kernel_release="5.10.0-8-amd64")
    assert not cond('kernel_v < "5.9"', kernel_release="5.10.0-8-amd64")
    assert cond('kernel_vr == "5.10.*-amd64"', kernel_release="5.10.0-8-amd64")
    assert cond('systemtap_v >= "4.0"')
    assert not cond('CONFIG_SMP == "y"')
    # an unset option is "" and, against a number, 0 (stap's empty kernel_config)
    assert cond("CONFIG_NR_CPUS >= 0") and not cond("CONFIG_NR_CPUS == 13")
    assert cond("$1 == 7", args=["7"]) and cond('@1 == "x y"', args=["x y"])


def test_nested_conditionals_and_else() -> None:
    src = ('%( arch == "x86_64" %? %( $# > 0 %? probe a {} %: probe b {} %) '
           '%: %( 1 == 1 %? probe c {} %) %) probe d {}')
    names = [p.points[0].components[0].name for p in parse(src).probes]
    assert names == ["b", "d"]
    names = [p.points[0].components[0].name for p in parse(src, args=["1"]).probes]
    assert names == ["a", "d"]
    names = [p.points[0].components[0].name for p in parse(src, arch="i386").probes]
    assert names == ["c", "d"]


def test_skipped_branches_may_hold_errors() -> None:
    # As in stap: an unterminated string, embedded C or a missing argument in a
    # branch that is not taken is not an error.
    src = ('%( runtime == "kernel" %? %{ #include <x.h> %} probe kernel.x {\n'
           '"oops }\n %: %)\n'
           "probe begin { x = %( $# > 0 %? $1 %: 1 %) }")
    (stmt,) = body(src)
    assert ast.dump(stmt) == f"ExprStatement(Assign('=', {a('x')}, {n(1)}))"


def test_arguments() -> None:
    stmts = body("probe begin { x = $1; y = @1; z = $# + @# }", args=["a + 2"])
    assert [ast.dump(s) for s in stmts] == [
        f"ExprStatement(Assign('=', {a('x')}, BinaryOp('+', {a('a')}, {n(2)})))",
        f"ExprStatement(Assign('=', {a('y')}, StringLiteral('a + 2')))",
        f"ExprStatement(Assign('=', {a('z')}, BinaryOp('+', {n(1)}, StringLiteral('1'))))",
    ]
    (probe,) = parse("probe process(@1).mark(@2) { }", args=["./x", "m"]).probes
    assert [c.arg for c in probe.points[0].components] == ["./x", "m"]
    # Tokens from an argument are located at the $N that produced them.
    src = "probe begin {\n  x = $1 }"
    (stmt,) = body(src, args=["7"])
    assert isinstance(stmt, ast.ExprStatement) and isinstance(stmt.expr, ast.Assign)
    assert (stmt.expr.value.loc.line, stmt.expr.value.loc.column) == (2, 7)


def test_macros() -> None:
    src = ("@define ONE %( 1 %)\n@define add(a, b) %( (@a + @b) %)\n"
           "@define twice(x) %( @add(@x, @x) %)\n"
           "probe begin { y = @twice(@ONE * 3) z = @add(f(1, 2), k in arr) }")
    stmts = body(src)
    mul = f"BinaryOp('*', {n(1)}, {n(3)})"
    assert ast.dump(stmts[0]) == (
        f"ExprStatement(Assign('=', {a('y')}, BinaryOp('+', {mul}, {mul})))")
    assert ast.dump(stmts[1]) == (
        # Expansion is textual: `(f(1, 2) + k in arr)`.
        f"ExprStatement(Assign('=', {a('z')}, ArrayIn((BinaryOp('+', Call('f', ({n(1)}, {n(2)})), "
        f"{a('k')}),), {a('arr')})))")
    # A macro body may hold conditionals, evaluated where it is expanded.
    src = '@define W %( %( arch == "x86_64" %? 8 %: 4 %) %) probe begin { w = @W }'
    (stmt,) = body(src, arch="i386")
    assert ast.dump(stmt) == f"ExprStatement(Assign('=', {a('w')}, {n(4)}))"


def test_strverscmp() -> None:
    assert strverscmp("2.6.9", "2.6.10") < 0
    assert strverscmp("5.10.0", "5.10.0") == 0
    assert strverscmp("5.10", "5.9.1") > 0
    assert strverscmp("1.01", "1.1") < 0
    assert strverscmp("abc", "abd") < 0 and strverscmp("a", "") > 0


def test_lexer_ws_flags_and_kinds() -> None:
    toks = tokenize("probe a.b *x $1 @count <<<= %( $$p", "t")
    assert [(t.kind, t.text, t.ws_before) for t in toks] == [
        (Kind.KEYWORD, "probe", False), (Kind.IDENT, "a", True), (Kind.OP, ".", False),
        (Kind.IDENT, "b", False), (Kind.OP, "*", True), (Kind.IDENT, "x", False),
        (Kind.ARG, "$1", True), (Kind.AT, "@count", True), (Kind.OP, "<<<", True),
        (Kind.OP, "=", False), (Kind.OP, "%(", True), (Kind.IDENT, "$$p", True),
        (Kind.EOF, "", False)]


# -- errors -------------------------------------------------------------------------------------

BAD: list[tuple[str, str, dict[str, object], str, str]] = [
    # (id, source, parse kwargs, "LINE:COL", message fragment)
    ("unterminated-string", 'probe begin {\n  x = "abc\n}', {}, "2:7",
     "unterminated string literal"),
    ("unterminated-comment", "probe begin { }\n  /* never closed\n", {}, "2:3",
     "unterminated comment"),
    ("missing-semicolon", "probe begin { x = 1 ) }", {}, "1:21",
     "expected ';' or '}' but found ')'"),
    ("missing-brace-before-probe", "probe begin { x = 1\nprobe end { }", {}, "2:1",
     "expected ';' or '}' but found 'probe'"),
    ("unclosed-block", "probe begin {\n  x = 1\n", {}, "2:8",
     "expected '}' but found end of input"),
    ("bad-top-level", "probe begin { }\nxyz = 1", {}, "2:1",
     "expected 'probe', 'global' or 'function' but found 'xyz'"),
    ("unknown-at-operator", "probe begin { x = @frob(1) }", {}, "1:19",
     "unknown operator '@frob'"),
    ("unknown-character", "probe begin { x = 1 ` 2 }", {}, "1:21", "unknown operator '`'"),
    ("bad-number", "probe begin { x = 12abc }", {}, "1:19", "invalid number '12abc'"),
    ("bad-octal", "global g = 09", {}, "1:12", "invalid number '09'"),
    ("number-too-big", "probe begin { x = 18446744073709551616 }", {}, "1:19",
     "number out of range"),
    ("unmatched-open", 'probe begin { }\n%( arch == "x86_64" %?\nprobe end { }\n', {}, "2:1",
     "missing '%)'"),
    ("stray-close", "probe begin { } %)", {}, "1:17", "'%)' without a matching '%('"),
    ("duplicate-else", "%( 1 == 1 %? %: %: %)", {}, "1:17", "duplicate '%:'"),
    ("bad-condition", "%( foo == 1 %? %)", {}, "1:4", "expected 'arch', 'runtime'"),
    ("condition-needs-marker", "%( 1 == 1 probe begin { } %)", {}, "1:11",
     "expected '&&', '||' or '%?'"),
    ("missing-argument", "probe begin {\n  print($2) }", {"args": ["x"]}, "2:9",
     "command line argument $2 not given"),
    ("embedded-c", "%{ #include <stdio.h> %}\nprobe begin { }", {}, "1:1",
     "embedded C is not supported"),
    ("embedded-function", "function f() %{ return; %}", {}, "1:14",
     "embedded C is not supported"),
    ("probe-alias-optional", "probe myalias? = process.mark(\"x\") { }", {}, "1:7",
     "an alias name takes no '?', '!' or condition"),
    ("return-in-probe", "probe begin { return 1 }", {}, "1:15", "'return' outside a function"),
    ("missing-paren", "probe begin { if (x { } }", {}, "1:21", "expected ')' but found '{'"),
    ("bad-probe-arg", "probe timer.ms(x) { }", {}, "1:16",
     "expected a string or number literal but found 'x'"),
    ("foreach-no-in", "probe begin { foreach (k arr) { } }", {}, "1:26",
     "expected 'in' but found 'arr'"),
    ("multiple-sorts", "probe begin { foreach ([a-, b+] in arr) { } }", {}, "1:30",
     "multiple sort directives"),
    ("printf-format", "probe begin { printf(fmt, 1) }", {}, "1:22",
     "literal format string"),
    ("bare-histogram", "probe begin { x = @hist_log(s) }", {}, "1:19",
     "histogram can only be printed or indexed"),
    ("array-init", "global a[10] = 1", {}, "1:14", "only scalar globals can be initialized"),
    ("array-size", "global a[0]", {}, "1:10", "array size out of range"),
    ("duplicate-global", "global a\nglobal b, a", {}, "2:11", "duplicate global name 'a'"),
    ("duplicate-param", "function f(a, a) { }", {}, "1:15", "duplicate parameter name 'a'"),
    ("macro-arity", "@define m(a, b) %( @a @b %)\nprobe begin { x = @m(1) }", {}, "2:23",
     "too few parameters for macro '@m'"),
    ("recursive-macro", "@define r %( @r %)\nprobe begin { @r }", {}, "1:14",
     "macro expansion"),
    ("bad-escape", 'probe begin { x = "ab\\x" }', {}, "1:22", "\\x used with no following hex"),
    ("bad-member", "probe begin { x = $p->1 }", {}, "1:23",
     "expected a member name but found '1'"),
    ("wildcard-outside-index", "probe begin { x = [*] }", {}, "1:20",
     "'*' is only allowed as an array key"),
    ("keys-without-in", "probe begin { x = [a, b] }", {}, "1:26",
     "expected 'in' after a list of keys"),
    ("else-without-if", "probe begin { else x }", {}, "1:15",
     "expected a statement but found 'else'"),
]


@pytest.mark.parametrize(("src", "kw", "where", "fragment"),
                         [case[1:] for case in BAD], ids=[case[0] for case in BAD])
def test_bad_scripts(src: str, kw: dict[str, object], where: str, fragment: str) -> None:
    with pytest.raises(ScriptError) as info:
        parse_script(src, "bad.stp", **kw)  # type: ignore[arg-type]
    err = info.value
    assert err.location is not None
    assert f"{err.location}" == f"bad.stp:{where}"
    assert fragment in err.message
    line = src.split("\n")[err.location.line - 1]
    assert err.location.source_line == line
    rendered = err.render()
    assert rendered.startswith(f"bad.stp:{where}: error: ")
    assert rendered.splitlines()[1] == "    " + line.expandtabs(1)


def test_render_has_caret_under_the_token() -> None:
    with pytest.raises(ScriptError) as info:
        parse("probe begin {\n\tx = 1 +\n}")
    lines = info.value.render().splitlines()
    assert lines[0] == "t.stp:3:1: error: expected an expression but found '}'"
    assert lines[1:] == ["    }", "    ^"]


# -- robustness ------------------------------------------------------------------------------


def test_deep_nesting_parses_up_to_the_limit() -> None:
    depth = 150
    (stmt,) = body("probe begin { x = " + "(" * depth + "1" + ")" * depth + " }")
    assert isinstance(stmt, ast.ExprStatement)
    blocks = "probe begin { " + "{ " * depth + "x = 1" + " }" * depth + " }"
    assert parse(blocks).probes
    ifs = "probe begin { " + "if (a) " * depth + "x = 1 }"
    assert parse(ifs).probes
    # The most Python frames per level: every binary precedence level is open.
    # Its tree is deeper than MAX_TREE_DEPTH, which only the check after the parse
    # says: a parse out of frames would have said "nested too deeply" without a limit.
    worst = "a || a && a | a ^ a & a == a << a . a + a * -!++("
    with pytest.raises(ScriptError, match=r"nested too deeply \(more than 500 levels\)"):
        parse("probe begin { x = " + worst * depth + "1" + ")" * depth + " }")


@pytest.mark.parametrize("src", [
    "probe begin { x = " + "(" * 5000 + "1" + ")" * 5000 + " }",
    "probe begin { " + "{" * 5000 + "}" * 5000 + " }",
    "probe begin { x = " + "f(" * 5000 + ")" * 5000 + " }",
    "probe begin { x = " + "a[" * 5000 + "1" + "]" * 5000 + " }",
    "probe " + "{" * 5000 + "begin" + "}" * 5000 + " { }",
], ids=["parens", "blocks", "calls", "indexes", "probe-groups"])
def test_excessive_nesting_is_a_script_error(src: str) -> None:
    with pytest.raises(ScriptError, match="nested too deeply"):
        parse(src)


def test_long_flat_chains_do_not_recurse() -> None:
    n_ = 240  # far beyond MAX_NESTING, within MAX_TREE_DEPTH (test_robust_session.py)
    chains = [
        "x = " + " + ".join(["a"] * n_),
        "x = " + " = ".join(["a"] * n_),
        "x = " + "!" * n_ + "a",
        "x = " + " ".join(f"c{i} ? {i} :" for i in range(n_)) + " 0",
        "if (a) x = 1 " + "else if (b) x = 2 " * n_,
    ]
    for src in chains:
        assert parse("probe begin { " + src + " }").probes


def _time_parse(src: str) -> float:
    start = time.perf_counter()
    parse(src)
    return time.perf_counter() - start


def test_parsing_time_is_linear() -> None:
    unit = (Path(__file__).parent / "scripts" / "foreach_sorting.stp").read_text()
    unit = unit.replace("global arr, names", "")
    small = "global arr, names\n" + unit * 20
    large = "global arr, names\n" + unit * 160
    t_small = min(_time_parse(small) for _ in range(3))
    t_large = min(_time_parse(large) for _ in range(3))
    # 8x the input: allow generous slack, but not quadratic (64x).
    assert t_large < t_small * 20 + 0.05
