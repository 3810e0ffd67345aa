"""The unparser: a parsed script printed back in SystemTap's syntax, as `stap -p1` prints
its parse tree (the print methods of stap's staptree.cxx, `# parse tree dump` in main.cxx).

What it prints parses again to the same tree (tests/test_unparse.py checks that), so
`pydyn -p1 FILE | pydyn -p1 -` works as SystemTap's parseok/unparser.stp has it.  The
layout is stap's: every operand of an operator in parentheses (`(a) + (1)`, `-(x)`,
`(c)?(a):(b)`), a file's top-level embedded C, then its globals, probe aliases, probes
and functions, each group in source order.  What differs, so that the text parses back
to the same tree rather than a near one:

- blocks are indented, and only simple statements end with `;` (stap puts one after
  every statement of a block, `if` included);
- a function prints its declared types (`function f:long (x:string)`), `private` and
  its priority; an alias's names are separated by `,` (stap prints ` = `);
- a string escapes what it holds (`\\n`, `\\\\`, bytes as `\\ooo`): pydyn keeps strings
  decoded where stap keeps the escapes as written;
- a number that only a literal above 2**63-1 gives (one that wrapped negative) prints
  as that unsigned literal, since `-N` would be a negation of N;
- `try` prints one block (stap nests the body in a second one), and embedded C keeps
  its exact text between `%{` and `%}`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from . import ast, lexer
from .aliases import AliasDef
from .library import LibraryFile
from .tapset import ARITY_NAMES

# the name a call is written with, for the arity-named tapset functions (tapset.py)
_WRITTEN = {(named, n): name for (name, n), named in ARITY_NAMES.items()}
_INDENT = "  "
_ATOMS = (ast.NumberLiteral, ast.StringLiteral, ast.Symbol, ast.Wildcard, ast.Index,
          ast.Call, ast.StatOp, ast.TargetSymbol, ast.Cast, ast.AtVar, ast.Defined,
          ast.Entry, ast.Embedded)


def quote(value: str) -> str:
    """A string literal that lexes back to `value` (bytes and control characters as
    `\\ooo`)."""
    return lexer.quote(value, octal=True)


def literal(value: str | int) -> str:
    """A literal where stap's grammar takes a signed one (global initialisers, probe
    point arguments)."""
    return quote(value) if isinstance(value, str) else str(value)


def _number(value: int) -> str:
    # in an expression `-N` is the negation of N: a value that wrapped negative is
    # written as the unsigned literal that gives it
    return str(value if value >= 0 else value + (1 << 64))


def call_name(name: str, nargs: int) -> str:
    """The name a call (or function) is written with."""
    return _WRITTEN.get((name, nargs), name)


def _operand(e: ast.Expr) -> str:
    return "(" + expression(e) + ")"


def _key(e: ast.Expr) -> str:
    """A key of `[k] in a`: stap's grammar takes a comparison there, so anything
    looser goes in parentheses."""
    return expression(e) if isinstance(e, _ATOMS) else _operand(e)


def _components(components: Iterable[ast.TargetComponent]) -> str:
    out = []
    for c in components:
        if isinstance(c, ast.Member):
            out.append("->" + c.name)
        elif isinstance(c, ast.Subscript):
            out.append("[" + expression(c.index) + "]")
        else:
            out.append(c.dollars)
    return "".join(out)


def _module(module: str | None) -> str:
    return "" if module is None else ", " + quote(module)


def expression(e: ast.Expr) -> str:
    """One expression, every operand of an operator parenthesised as stap prints it."""
    if isinstance(e, ast.NumberLiteral):
        return _number(e.value)
    if isinstance(e, ast.StringLiteral):
        return quote(e.value)
    if isinstance(e, ast.Symbol):
        return e.name
    if isinstance(e, ast.Wildcard):
        return "*"
    if isinstance(e, (ast.BinaryOp, ast.Comparison, ast.Logical, ast.Assign)):
        left = e.target if isinstance(e, ast.Assign) else e.left
        right = e.value if isinstance(e, ast.Assign) else e.right
        return f"{_operand(left)} {e.op} {_operand(right)}"
    if isinstance(e, ast.RegexMatch):
        # the pattern is a literal: stap's grammar takes no parentheses around it
        return f"{_operand(e.left)} {e.op} {quote(e.pattern.value)}"
    if isinstance(e, ast.Unary):
        return e.op + _operand(e.operand)
    if isinstance(e, ast.IncDec):
        return e.op + _operand(e.operand) if e.prefix else _operand(e.operand) + e.op
    if isinstance(e, ast.Ternary):
        return f"{_operand(e.cond)}?{_operand(e.then)}:{_operand(e.else_)}"
    if isinstance(e, ast.Index):
        return f"{expression(e.base)}[{', '.join(expression(k) for k in e.indexes)}]"
    if isinstance(e, ast.ArrayIn):
        return f"[{', '.join(_key(k) for k in e.keys)}] in {expression(e.array)}"
    if isinstance(e, ast.Call):
        args = ", ".join(expression(a) for a in e.args)
        return f"{call_name(e.name, len(e.args))}({args})"
    if isinstance(e, (ast.StatOp, ast.HistOp)):
        name = e.op if isinstance(e, ast.StatOp) else "hist_" + e.kind
        params = "".join(f", {p}" for p in e.params)
        return f"@{name}({expression(e.operand)}{params})"
    if isinstance(e, (ast.Defined, ast.Entry)):
        name = "defined" if isinstance(e, ast.Defined) else "entry"
        return f"@{name}({expression(e.operand)})"
    if isinstance(e, ast.Embedded):
        return f"%{{{e.code}%}}"
    amp = "&" if getattr(e, "addressof", False) else ""
    if isinstance(e, ast.TargetSymbol):
        return amp + e.name + _components(e.components)
    if isinstance(e, ast.Cast):
        return (f"{amp}@cast({expression(e.operand)}, {quote(e.type_name)}"
                f"{_module(e.module)}){_components(e.components)}")
    if isinstance(e, ast.AtVar):
        return f"{amp}@var({quote(e.name)}{_module(e.module)}){_components(e.components)}"
    if isinstance(e, ast.AutoCast):
        return amp + _operand(e.operand) + _components(e.components)
    raise TypeError(f"no unparser for {type(e).__name__}")


# -- statements ----------------------------------------------------------------------

_COMPOUND = (ast.Block, ast.If, ast.While, ast.For, ast.Foreach, ast.Try)


class _Writer:
    """Lines of text with the indentation of the block being written."""

    def __init__(self, depth: int = 0) -> None:
        self.lines: list[str] = []
        self.depth = depth
        self.line = ""
        self.line_depth = 0   # the depth where the line being written began

    def write(self, text: str) -> None:
        if not self.line:
            self.line_depth = self.depth
        self.line += text

    def newline(self) -> None:
        self.lines.append(_INDENT * self.line_depth + self.line if self.line else "")
        self.line = ""

    def text(self) -> str:
        if self.line:
            self.newline()
        return "\n".join(self.lines)


def _block(w: _Writer, b: ast.Block) -> None:
    w.write("{")
    w.depth += 1
    for s in b.statements:
        w.newline()
        _statement(w, s)
    w.depth -= 1
    w.newline()
    w.write("}")


def _sort_marker(sort: ast.SortSpec | None, column: int) -> str:
    if sort is None or sort.column != column:
        return ""
    agg = f" @{sort.aggregate}" if column == 0 and sort.aggregate else ""
    return agg + ("-" if sort.descending else "+")


def _foreach(f: ast.Foreach) -> str:
    value = f"{f.value.name} = " if f.value is not None else ""
    keys = ", ".join(k.name + _sort_marker(f.sort, i) for i, k in enumerate(f.keys, 1))
    sliced = "" if f.slice is None else "[" + ", ".join(expression(k) for k in f.slice) + "]"
    limit = "" if f.limit is None else " limit " + expression(f.limit)
    return (f"foreach ({value}[{keys}] in {expression(f.array)}{sliced}"
            f"{_sort_marker(f.sort, 0)}{limit}) ")


def _statement(w: _Writer, s: ast.Stmt) -> None:
    """One statement; a simple one with its `;`, so that an `else` or any statement
    may follow it."""
    if isinstance(s, ast.Block):
        _block(w, s)
    elif isinstance(s, ast.If):
        w.write(f"if ({expression(s.cond)}) ")
        _statement(w, s.then)
        if s.else_ is not None:
            w.newline()
            w.write("else ")
            _statement(w, s.else_)
    elif isinstance(s, ast.While):
        w.write(f"while ({expression(s.cond)}) ")
        _statement(w, s.body)
    elif isinstance(s, ast.For):
        parts = ("" if x is None else expression(x) for x in (s.init, s.cond, s.step))
        w.write(f"for ({'; '.join(parts)}) ")
        _statement(w, s.body)
    elif isinstance(s, ast.Foreach):
        w.write(_foreach(s))
        _statement(w, s.body)
    elif isinstance(s, ast.Try):
        w.write("try ")
        _block(w, s.body)
        w.write(" catch " + (f"({s.catch_var.name}) " if s.catch_var is not None else ""))
        _block(w, s.handler)
    elif isinstance(s, ast.Empty):
        w.write(";")
    else:
        w.write(simple_statement(s) + ";")


def simple_statement(s: ast.Stmt) -> str:
    if isinstance(s, ast.ExprStatement):
        return expression(s.expr)
    if isinstance(s, ast.Delete):
        return "delete " + expression(s.target)
    if isinstance(s, ast.Return):
        return "return" if s.value is None else "return " + expression(s.value)
    if isinstance(s, ast.Next):
        return "next"
    if isinstance(s, ast.Break):
        return "break"
    if isinstance(s, ast.Continue):
        return "continue"
    raise TypeError(f"no unparser for {type(s).__name__}")


def statement(s: ast.Stmt, depth: int = 0) -> str:
    """A statement as lines of text, indented `depth` levels after the first."""
    w = _Writer(depth)
    _statement(w, s)
    return w.text()


# -- declarations --------------------------------------------------------------------


def probe_point(p: ast.ProbePoint, extras: bool = True) -> str:
    """`process("a").function("f").return?` (with `extras`: `?`, `!` and the
    condition, as stap's probe_point::print)."""
    text = ".".join(c.name if c.arg is None else f"{c.name}({literal(c.arg)})"
                    for c in p.components)
    if not extras:
        return text
    if p.sufficient:
        text += "!"
    elif p.optional:
        text += "?"
    if p.condition is not None:
        text += f" if ({expression(p.condition)})"
    return text


def probe_points(points: Iterable[ast.ProbePoint], sep: str = ", ") -> str:
    return sep.join(probe_point(p) for p in points)


def global_decl(g: ast.Global) -> str:
    text = ("private " if g.private else "") + "global " + g.name
    if g.wrap:
        text += "%"
    if g.size is not None:
        text += f"[{g.size}]"
    if g.init is not None:
        text += " = " + literal(g.init.value)
    return text


def _typed(name: str, type_: str | None) -> str:
    return name if type_ is None else f"{name}:{type_}"


def function_decl(f: ast.Function) -> str:
    params = ", ".join(_typed(p.name, p.type) for p in f.params)
    head = ("private " if f.private else "") + "function " + \
        _typed(call_name(f.name, len(f.params)), f.return_type) + f" ({params})"
    if f.priority is not None:
        head += f" : {f.priority}"
    if isinstance(f.body, ast.Embedded):
        return head + " " + expression(f.body)
    return head + " " + statement(f.body)


def probe_decl(p: ast.Probe) -> str:
    return f"probe {probe_points(p.points)} {statement(p.body)}"


def alias_decl(a: AliasDef) -> str:
    return (f"probe {probe_points(a.names)} {'+=' if a.epilogue else '='} "
            f"{probe_points(a.targets)} {statement(a.body)}")


def iter_file(f: LibraryFile) -> Iterator[str]:
    """A file's declarations, each as text, in stap's order: embedded C, globals,
    aliases, probes, functions."""
    for e in f.embedded:
        yield expression(e)
    yield from (global_decl(g) for g in f.globals)
    yield from (alias_decl(a) for a in f.aliases)
    yield from (probe_decl(p) for p in f.probes)
    yield from (function_decl(fn) for fn in f.functions)


def unparse_file(f: LibraryFile) -> str:
    """The file as script text (no header); it parses back to the same declarations."""
    return "".join(d + "\n" for d in iter_file(f))


def parse_tree_dump(files: Iterable[LibraryFile]) -> str:
    """What `stap -p1` prints: `# parse tree dump`, then each file after `# file NAME`
    and a blank line."""
    out = ["# parse tree dump\n"]
    for f in files:
        out.append(f"# file {f.path}\n{unparse_file(f)}\n")
    return "".join(out)
