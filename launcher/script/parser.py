"""Recursive-descent parser for SystemTap scripts, after stap's parse.cxx.

The grammar and precedence are stap's (loosest first): assignment (`=` ...
`<<<`, right-associative) < `?:` < `||` < `&&` < `|` < `^` < `&` < `in` <
comparisons and `=~` < shifts < `.` < `+ -` < `* / %` < unary < `++ --` <
values.  `;` only separates statements and is optional.

One token of lookahead, no backtracking; binary levels use precedence climbing
and statement/else-if/assignment/ternary chains are loops, so recursion grows
with real nesting only, which is bounded by MAX_NESTING.  A chain still makes a
tree as deep as it is long (`1 + 1 + ...` is left-deep, `!!!x` and `else if`
nest), and the later passes walk trees recursively: `check_depth` bounds the
tree's depth, every construct alike, by MAX_TREE_DEPTH (stap's parser has limits
too), with the same "nested too deeply" error.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import NoReturn

from ..errors import ScriptError, SourceLocation
from ..guru import embedded_is_pure
from . import ast
from .aliases import BUILTIN, AliasDef
from .aliases import expand as expand_aliases
from .lexer import Kind, Token, parse_number, split_lines, to_int64, tokenize
from .library import LibraryFile, merge_library
from .preprocess import Config, Macro, Preprocessor, library_macros, strverscmp
from .tapset import ARITY_NAMES, macro_groups_for
from .tapset import groups_for as tapset_groups_for

# stap's limit on a print's values (PR10750)
_MAX_PRINT_ARGS = 32
MAX_NESTING = 200  # blocks, parentheses, brackets, calls ... inside each other
_FRAMES_PER_NESTING = 24  # Python frames one nesting level can take (measured: <= 21)
# Statements and expressions inside each other, each operator of a chain one level: 200
# nested blocks (a Block and an If each) fit, a 500-term `1 + 1 + ...` does not.
MAX_TREE_DEPTH = 500
# Python frames the translator's walk may take per tree level (recursion_headroom).
_FRAMES_PER_TREE_LEVEL = 10

_ASSIGN_OPS = frozenset({"=", "<<<", "+=", "-=", "*=", "/=", "%=", "<<=", ">>=", "&=", "^=",
                         "|=", ".="})
_LOGICAL_PREC = {"||": 1, "&&": 2, "|": 3, "^": 4, "&": 5}
_ARITH_PREC = {"<<": 1, ">>": 1, ">>>": 1, ".": 2, "+": 3, "-": 3, "*": 4, "/": 4, "%": 4}
_COMPARISONS = frozenset({"==", "!=", "<", "<=", ">", ">="})
_STAT_OPS = frozenset({"count", "sum", "min", "max", "avg", "variance"})
# @-operators stap has that pydyn does not: kernel-only, guru-only or too new.
_UNSUPPORTED_AT = frozenset({"probewrite"})
_TARGET_AT = frozenset({"perf", "kregister", "kderef", "uregister", "uderef"})
_EXPR_START_OPS = frozenset({"(", "-", "+", "!", "~", "++", "--", "&", "["})
_STMT_KEYWORDS = frozenset({"try", "if", "for", "foreach", "while", "return", "delete",
                            "break", "continue", "next"})
_HIST_PRINTERS = frozenset({"print", "println", "sprint", "sprintln"})
_NUMERIC = re.compile(r"0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*")  # well-formed, maybe too big
_INT_MAX = (1 << 31) - 1
_MAX_PROBE_POINTS = 10_000  # bound on brace-group expansion `p.{a,b}.{c,d}...`


def _print_format(name: str) -> tuple[bool, bool] | None:
    """(takes a format, takes a delimiter) if `name` is one of stap's print family.

    stap recognises `[s]print[f][d][ln]` and `print_char` by spelling.
    """
    if name == "print_char":
        return False, False
    rest = name[1:] if name.startswith("s") else name
    if not rest.startswith("print"):
        return None
    rest = rest[5:]
    fmt = rest.startswith("f")
    rest = rest[1:] if fmt else rest
    delim = rest.startswith("d")
    rest = rest[1:] if delim else rest
    rest = rest[2:] if rest.startswith("ln") else rest
    return None if rest else (fmt, delim)


class Parser:
    def __init__(self, tokens: Iterator[Token], filename: str, lines: list[str],
                 guru: bool = False, library: Sequence[LibraryFile] = (),
                 autocast: bool = True) -> None:
        self._guru = guru
        # stap parses suffixes on an ordinary value (an autocast) from 2.6 on: under an
        # older --compatible, `&x` is an error and `x->m` ends the value before `->`
        self._autocast = autocast
        self.library = library
        self._src = tokens
        self._filename = filename
        self._lines = lines
        self._tok = next(tokens)
        self._depth = 0
        self._in_function = False
        self._loops = 0            # loops around the statement being parsed
        # the file's own declarations as written, once script() has them (-p1 prints them)
        self.own: LibraryFile | None = None
        # False: stop where stap's pass 1 does (-p1), no alias expanded and none of the
        # checks stap makes only in its later passes
        self.elaborate = True
        # --compatible before 2.0: a comment between string literals keeps them apart
        self.glue_across_comments = True

    # -- token helpers ----------------------------------------------------------

    def peek(self) -> Token:
        return self._tok

    def advance(self) -> Token:
        tok = self._tok
        if tok.kind is not Kind.EOF:
            self._tok = next(self._src)
        return tok

    def fail(self, expected: str, tok: Token | None = None, hint: str | None = None) -> NoReturn:
        tok = tok or self._tok
        raise ScriptError(f"expected {expected} but found {tok.describe()}", tok.loc, hint)

    def expect_op(self, op: str, what: str | None = None) -> Token:
        if not self._tok.is_op(op):
            self.fail(what or f"'{op}'")
        return self.advance()

    def expect_ident(self, what: str) -> Token:
        if self._tok.kind is not Kind.IDENT:
            self.fail(what)
        return self.advance()

    @contextmanager
    def nest(self, tok: Token) -> Iterator[None]:
        self._depth += 1
        try:
            if self._depth > MAX_NESTING:
                raise ScriptError(f"script nested too deeply (more than {MAX_NESTING} levels)",
                                  tok.loc)
            yield
        finally:
            self._depth -= 1

    # -- top level ----------------------------------------------------------------

    def parts(self) -> tuple[list[ast.Probe], list[ast.Function], list[ast.Global],
                             list[ast.Embedded], list[AliasDef]]:
        """The file's declarations in source order: probes, functions, globals, top-level
        embedded C and probe aliases (not yet expanded)."""
        probes: list[ast.Probe] = []
        functions: list[ast.Function] = []
        globals_: list[ast.Global] = []
        embedded: list[ast.Embedded] = []
        seen_globals: dict[str, ast.Global] = {}
        aliases: list[AliasDef] = []
        while True:
            t = self._tok
            if t.kind is Kind.EOF:
                break
            if t.is_kw("probe"):
                probe = self.probe()
                if isinstance(probe, AliasDef):
                    aliases.append(probe)
                else:
                    probes.append(probe)
                continue
            private = False
            if t.is_kw("private"):
                self.advance()
                private = True
                t = self._tok
                if not (t.is_kw("function", "global") or t.kind is Kind.IDENT):
                    self.fail("'function', 'global' or a variable name after 'private'")
            if t.is_kw("function"):
                self.advance()
                functions.append(self.function(private))
            elif t.is_kw("global") or (private and t.kind is Kind.IDENT):
                if t.is_kw("global"):
                    self.advance()
                for g in self.globals(private):
                    if g.name in seen_globals:
                        raise ScriptError(f"duplicate global name '{g.name}'", g.loc,
                                          hint=f"first declared at {seen_globals[g.name].loc}")
                    seen_globals[g.name] = g
                    globals_.append(g)
            elif t.kind is Kind.EMBEDDED:
                embedded.append(self._embedded(self.advance()))
            else:
                self.fail("'probe', 'global' or 'function'")
        return probes, functions, globals_, embedded, aliases

    def script(self) -> ast.Script:
        probes, functions, globals_, embedded, aliases = self.parts()
        first = self._lines[0] if self._lines else ""
        if not (probes or functions or globals_ or embedded or aliases):
            # stap: a script with nothing left after preprocessing is a parse error
            raise ScriptError("the script is empty (nothing left after preprocessing)",
                              self._tok.loc)
        self.own = LibraryFile(self._filename, tuple(probes), tuple(functions),
                               tuple(globals_), tuple(aliases), tuple(embedded))
        functions = _arity_named(functions)
        if self.library:
            lib = merge_library(probes, functions, globals_, aliases, self.library)
            aliases.extend(lib.aliases)
            functions.extend(lib.functions)
            globals_.extend(lib.globals)
            probes = [*lib.probes, *probes]
        if self.elaborate:
            probes = expand_aliases(probes, aliases, _builtin_aliases)
        return ast.Script(tuple(probes), tuple(functions), tuple(globals_),
                          SourceLocation(self._filename, 1, 1, first), tuple(embedded),
                          self._guru)

    def _embedded(self, tok: Token) -> ast.Embedded:
        if not self._guru:
            raise ScriptError("embedded C is not supported without guru mode", tok.loc,
                              hint="run with -g to allow embedded C (it runs unchecked "
                                   "inside the target)")
        return ast.Embedded(tok.text, tok.loc)

    def globals(self, private: bool) -> list[ast.Global]:
        out: list[ast.Global] = []
        while True:
            name = self.expect_ident("a global variable name")
            wrap = False
            size: int | None = None
            init: ast.NumberLiteral | ast.StringLiteral | None = None
            if self._tok.is_op("%"):
                self.advance()
                wrap = True
            if self._tok.is_op("["):
                self.advance()
                size_tok = self._tok
                lit = self.literal()
                if not isinstance(lit, ast.NumberLiteral):
                    self.fail("an array size", size_tok)
                if not 0 < lit.value <= _INT_MAX:
                    raise ScriptError("array size out of range", size_tok.loc)
                size = lit.value
                self.expect_op("]")
            if self._tok.is_op("="):
                eq = self.advance()
                if wrap or size is not None:
                    raise ScriptError("only scalar globals can be initialized", eq.loc)
                init = self.literal()
            out.append(ast.Global(name.text, init, size, wrap, private, name.loc))
            if self._tok.is_op(";"):
                self.advance()
                return out
            if not self._tok.is_op(","):
                return out
            self.advance()

    def _type(self) -> str:
        if not self._tok.is_kw("long", "string"):
            self.fail("'long' or 'string'")
        return self.advance().text

    def function(self, private: bool) -> ast.Function:
        name = self.expect_ident("a function name")
        return_type: str | None = None
        if self._tok.is_op(":"):
            self.advance()
            return_type = self._type()
        self.expect_op("(")
        params: list[ast.Param] = []
        if self._tok.is_op(")"):
            self.advance()
        else:
            while True:
                p = self.expect_ident("a parameter name")
                if any(q.name == p.text for q in params):
                    raise ScriptError(f"duplicate parameter name '{p.text}'", p.loc)
                ptype: str | None = None
                if self._tok.is_op(":"):
                    self.advance()
                    ptype = self._type()
                params.append(ast.Param(p.text, ptype, p.loc))
                if self._tok.is_op(","):
                    self.advance()
                    continue
                self.expect_op(")", "',' or ')'")
                break
        priority: int | None = None
        if self._tok.is_op(":"):
            self.advance()
            if self._tok.is_kw("long", "string"):
                # `function f(x):long` - not stap's spelling (`function f:long(x)`),
                # but unambiguous, so accepted.
                if return_type is not None:
                    raise ScriptError("return type given twice", self._tok.loc)
                return_type = self._type()
            else:
                prio_tok = self._tok
                lit = self.literal()
                if not isinstance(lit, ast.NumberLiteral):
                    self.fail("a return type or a priority number", prio_tok)
                if lit.value < 1:
                    raise ScriptError("function priority must be > 0", prio_tok.loc)
                priority = lit.value
        body: ast.Block | ast.Embedded
        if self._tok.kind is Kind.EMBEDDED:
            body = self._embedded(self.advance())
        else:
            self._in_function = True
            loops, self._loops = self._loops, 0
            try:
                body = self.block()
            finally:
                self._in_function = False
                self._loops = loops
        return ast.Function(name.text, tuple(params), return_type, body, private, priority,
                            name.loc)

    # -- probes -------------------------------------------------------------------

    def probe(self) -> ast.Probe | AliasDef:
        kw = self.advance()
        points = self.probe_points(in_braces=False)
        t = self._tok
        if t.is_op("=", "+="):
            self.advance()
            for p in points:
                if p.optional or p.condition is not None:
                    raise ScriptError("an alias name takes no '?', '!' or condition", p.loc)
                if any("*" in c.name for c in p.components):
                    if self.elaborate:   # stap: a pass 2 error
                        raise ScriptError("an alias name cannot have wildcards", p.loc)
            targets = self.probe_points(in_braces=False)
            if not self._tok.is_op("{"):
                self.fail("'{'")
            return AliasDef(tuple(points), tuple(targets), self.block(), t.text == "+=",
                            kw.loc)
        return ast.Probe(tuple(points), self.block(), kw.loc)

    def probe_points(self, in_braces: bool) -> list[ast.ProbePoint]:
        points: list[ast.ProbePoint] = []
        while True:
            points.extend(self.probe_point())
            if len(points) > _MAX_PROBE_POINTS:
                raise ScriptError("too many probe points", points[0].loc)
            t = self._tok
            if t.is_op(","):
                self.advance()
                continue
            if in_braces and t.is_op("}"):
                return points
            if not in_braces and t.is_op("{", "=", "+="):
                return points
            self.fail("',' or '}'" if in_braces else "',' or '{'")

    def probe_point(self) -> list[ast.ProbePoint]:
        points: list[ast.ProbePoint] | None = None
        while True:
            suffix = self.probe_component()
            if points is None:
                points = suffix
            else:
                for p in points:
                    if p.optional or p.condition is not None:
                        raise ScriptError("'?', '!' or a condition may only follow the whole "
                                          "probe point", p.loc)
                if len(points) * len(suffix) > _MAX_PROBE_POINTS:
                    raise ScriptError("too many probe points", points[0].loc)
                points = [ast.ProbePoint(p.components + s.components, s.optional, s.sufficient,
                                         s.condition, p.loc) for p in points for s in suffix]
            if not self._tok.is_op("."):
                break
            self.advance()
        t = self._tok
        if t.is_op("?", "!"):
            self.advance()
            for p in points:
                if p.optional:
                    raise ScriptError("'?' or '!' given twice", t.loc)
            points = [ast.ProbePoint(p.components, True, t.text == "!", p.condition, p.loc)
                      for p in points]
        if self._tok.is_kw("if"):
            if_tok = self.advance()
            self.expect_op("(")
            with self.nest(if_tok):
                cond = self.expression()
            self.expect_op(")")
            for p in points:
                if p.condition is not None:
                    raise ScriptError("probe point condition given twice", if_tok.loc)
            points = [ast.ProbePoint(p.components, p.optional, p.sufficient, cond, p.loc)
                      for p in points]
        return points

    def probe_component(self) -> list[ast.ProbePoint]:
        t = self.advance()
        if t.is_op("{"):
            with self.nest(t):
                points = self.probe_points(in_braces=True)
            self.expect_op("}")
            return points
        if not (t.kind in (Kind.IDENT, Kind.KEYWORD) or t.is_op("*")):
            self.fail("a probe point", t)
        # Glue adjacent pieces back into one wildcard name: `sys_*read*`.
        name = t.text
        while True:
            u = self._tok
            if u.ws_before or not (u.kind in (Kind.IDENT, Kind.KEYWORD) or u.is_op("*")):
                break
            name += self.advance().text
        arg: str | int | None = None
        if self._tok.is_op("("):
            self.advance()
            arg = self.literal().value
            self.expect_op(")")
        return [ast.ProbePoint((ast.Component(name, arg, t.loc),), False, False, None, t.loc)]

    # -- literals -------------------------------------------------------------------

    def _number(self, tok: Token, negative: bool = False) -> int:
        value = parse_number(tok.text)
        spelled = ("-" if negative else "") + tok.text
        if value is None and not _NUMERIC.fullmatch(tok.text):
            raise ScriptError(f"invalid number '{spelled}'", tok.loc)
        if value is None or (negative and value > 1 << 63):
            raise ScriptError(f"number out of range: '{spelled}'", tok.loc,
                              hint="numbers are 64-bit")
        return to_int64(-value if negative else value)

    def string_literal(self) -> ast.StringLiteral:
        t = self._tok
        if t.kind is not Kind.STRING:
            self.fail("a string literal")
        self.advance()
        # stap (since 2.0, PR11208) joins adjacent string literals.
        parts = [t.text]
        while self._tok.kind is Kind.STRING and (self.glue_across_comments
                                                 or not self._tok.comment_before):
            parts.append(self.advance().text)
        return ast.StringLiteral("".join(parts), t.loc)

    def literal(self) -> ast.NumberLiteral | ast.StringLiteral:
        """A string, or a number with an optional '-' (global initialisers, probe args)."""
        t = self._tok
        if t.kind is Kind.STRING:
            return self.string_literal()
        negative = t.is_op("-")
        if negative:
            self.advance()
        n = self._tok
        if n.kind is not Kind.NUMBER:
            self.fail("a number" if negative else "a string or number literal")
        self.advance()
        return ast.NumberLiteral(self._number(n, negative), t.loc)

    # -- statements -------------------------------------------------------------------

    def block(self) -> ast.Block:
        lb = self.expect_op("{")
        statements: list[ast.Stmt] = []
        with self.nest(lb):
            while True:
                t = self._tok
                if t.is_op("}"):
                    self.advance()
                    break
                if t.kind is Kind.EOF:
                    raise ScriptError("expected '}' but found end of input", t.loc,
                                      hint=f"the block opened at {lb.loc} is not closed")
                s = self.statement()
                if not isinstance(s, ast.Empty):
                    statements.append(s)
        return ast.Block(tuple(statements), lb.loc)

    @staticmethod
    def _starts_expression(t: Token) -> bool:
        return t.kind in (Kind.IDENT, Kind.NUMBER, Kind.STRING, Kind.AT, Kind.EMBEDDED) or (
            t.kind is Kind.OP and t.text in _EXPR_START_OPS)

    def _starts_statement(self, t: Token) -> bool:
        return (self._starts_expression(t) or t.is_op(";", "{")
                or (t.kind is Kind.KEYWORD and t.text in _STMT_KEYWORDS))

    def statement(self) -> ast.Stmt:
        t = self._tok
        if t.is_op("{"):
            return self.block()  # which counts the nesting itself
        with self.nest(t):
            if t.is_op(";"):
                self.advance()
                return ast.Empty(t.loc)
            if t.is_kw("if"):
                return self.if_statement()
            if t.is_kw("while"):
                return self.while_loop()
            if t.is_kw("for"):
                return self.for_loop()
            if t.is_kw("foreach"):
                return self.foreach_loop()
            if t.is_kw("try"):
                return self.try_statement()
            stmt: ast.Stmt
            if t.is_kw("return"):
                stmt = self.return_statement()
            elif t.is_kw("delete"):
                self.advance()
                stmt = ast.Delete(self.expression(), t.loc)
            elif t.is_kw("next"):
                self.advance()
                stmt = ast.Next(t.loc)
            elif t.is_kw("break", "continue"):
                self.advance()
                if not self._loops and self.elaborate:   # stap: a pass 3 error
                    raise ScriptError(f"'{t.text}' outside a loop", t.loc)
                stmt = ast.Break(t.loc) if t.text == "break" else ast.Continue(t.loc)
            elif self._starts_expression(t):
                stmt = ast.ExprStatement(self.expression(), t.loc)
            else:
                self.fail("a statement")
            # A trailing ';' belongs to the statement; anything else must be
            # able to follow one.
            n = self._tok
            if n.is_op(";"):
                self.advance()
            elif not (n.kind is Kind.EOF or n.is_op("}") or n.is_kw("else")
                      or self._starts_statement(n)):
                self.fail("';' or '}'")
            return stmt

    def _paren_expression(self) -> ast.Expr:
        lp = self.expect_op("(")
        with self.nest(lp):
            e = self.expression()
        self.expect_op(")")
        return e

    def if_statement(self) -> ast.Stmt:
        # `else if` chains are collected in a loop, so they do not nest.
        chain: list[tuple[Token, ast.Expr, ast.Stmt]] = []
        while True:
            kw = self.advance()
            cond = self._paren_expression()
            chain.append((kw, cond, self.statement()))
            if not self._tok.is_kw("else"):
                result: ast.Stmt | None = None
                break
            self.advance()
            if not self._tok.is_kw("if"):
                result = self.statement()
                break
        for kw, cond, then in reversed(chain):
            result = ast.If(cond, then, result, kw.loc)
        assert result is not None
        return result

    def _loop_body(self) -> ast.Stmt:
        self._loops += 1
        try:
            return self.statement()
        finally:
            self._loops -= 1

    def while_loop(self) -> ast.While:
        kw = self.advance()
        cond = self._paren_expression()
        return ast.While(cond, self._loop_body(), kw.loc)

    def for_loop(self) -> ast.For:
        kw = self.advance()
        lp = self.expect_op("(")
        with self.nest(lp):
            init = None if self._tok.is_op(";") else self.expression()
            self.expect_op(";")
            cond = None if self._tok.is_op(";") else self.expression()
            self.expect_op(";")
            step = None if self._tok.is_op(")") else self.expression()
        self.expect_op(")")
        return ast.For(init, cond, step, self._loop_body(), kw.loc)

    def _sort(self, tok: Token, column: int, current: ast.SortSpec | None,
              aggregate: str | None = None) -> ast.SortSpec:
        if current is not None:
            raise ScriptError("multiple sort directives", tok.loc)
        return ast.SortSpec(column, tok.text == "-", aggregate, tok.loc)

    def foreach_loop(self) -> ast.Foreach:
        kw = self.advance()
        lp = self.expect_op("(")
        keys: list[ast.Symbol] = []
        value: ast.Symbol | None = None
        sort: ast.SortSpec | None = None
        with self.nest(lp):
            # `v = [k] in a`, `v- = k in a`, `k- in a`, `[a, b+] in a`
            first: ast.Symbol | None = None
            first_sort: Token | None = None
            if self._tok.kind is Kind.IDENT:
                t = self.advance()
                first = ast.Symbol(t.text, t.loc)
                if self._tok.is_op("+", "-"):
                    first_sort = self.advance()
                if self._tok.is_op("="):
                    self.advance()
                    value = first
                    if first_sort is not None:
                        sort = self._sort(first_sort, 0, sort)
                    first = first_sort = None
            if first is not None:
                keys.append(first)
                if first_sort is not None:
                    sort = self._sort(first_sort, 1, sort)
            else:
                bracketed = self._tok.is_op("[")
                if bracketed:
                    self.advance()
                while True:
                    t = self.expect_ident("a key variable")
                    keys.append(ast.Symbol(t.text, t.loc))
                    if self._tok.is_op("+", "-"):
                        sort = self._sort(self.advance(), len(keys), sort)
                    if not bracketed:
                        break
                    if self._tok.is_op(","):
                        self.advance()
                        continue
                    self.expect_op("]", "',' or ']'")
                    break
            if not self._tok.is_kw("in"):
                self.fail("'in'")
            self.advance()
            array = self.indexable()
            slice_: tuple[ast.Expr, ...] | None = None
            if self._tok.is_op("["):
                slice_ = self._index_list(self.advance())
            aggregate: str | None = None
            if self._tok.kind is Kind.AT:
                at = self.advance()
                if at.text[1:] not in _STAT_OPS:
                    self.fail("a statistical operation (@count, @sum ...)", at)
                aggregate = at.text[1:]
                if not self._tok.is_op("+", "-"):
                    self.fail(f"'+' or '-' after '{at.text}'")
            if self._tok.is_op("+", "-"):
                sort = self._sort(self.advance(), 0, sort, aggregate)
            limit = None
            if self._tok.is_kw("limit"):
                self.advance()
                limit = self.expression()
        self.expect_op(")")
        body = self._loop_body()
        return ast.Foreach(tuple(keys), value, array, slice_, sort, limit, body, kw.loc)

    def return_statement(self) -> ast.Return:
        kw = self.advance()
        if not self._in_function:
            raise ScriptError("'return' outside a function", kw.loc,
                              hint="use 'next' to leave a probe handler early")
        if self._tok.is_op(";", "}"):
            return ast.Return(None, kw.loc)
        return ast.Return(self.expression(), kw.loc)

    def try_statement(self) -> ast.Try:
        kw = self.advance()
        body = self.block()
        if not self._tok.is_kw("catch"):
            self.fail("'catch'")
        self.advance()
        var: ast.Symbol | None = None
        if self._tok.is_op("("):
            self.advance()
            v = self.expect_ident("a variable name")
            var = ast.Symbol(v.text, v.loc)
            self.expect_op(")")
        return ast.Try(body, var, self.block(), kw.loc)

    # -- expressions --------------------------------------------------------------------

    def expression(self) -> ast.Expr:
        first = self.ternary()
        if not (self._tok.kind is Kind.OP and self._tok.text in _ASSIGN_OPS):
            return first
        # Right-associative: collect `a = b += c` then fold from the right.
        items = [first]
        ops: list[Token] = []
        while self._tok.kind is Kind.OP and self._tok.text in _ASSIGN_OPS:
            ops.append(self.advance())
            items.append(self.ternary())
        result = items[-1]
        for op, target in zip(reversed(ops), reversed(items[:-1]), strict=True):
            result = ast.Assign(op.text, target, result, op.loc)
        return result

    def ternary(self) -> ast.Expr:
        cond = self.logical(1)
        if not self._tok.is_op("?"):
            return cond
        # `a ? b : c ? d : e` nests in the false branch: collect, fold right.
        arms: list[tuple[Token, ast.Expr, ast.Expr]] = []
        while self._tok.is_op("?"):
            q = self.advance()
            with self.nest(q):
                then = self.expression()
            self.expect_op(":")
            arms.append((q, cond, then))
            cond = self.logical(1)
        result = cond
        for q, c, then in reversed(arms):
            result = ast.Ternary(c, then, result, q.loc)
        return result

    def logical(self, min_prec: int) -> ast.Expr:
        left = self.array_in()
        while True:
            t = self._tok
            prec = _LOGICAL_PREC.get(t.text) if t.kind is Kind.OP else None
            if prec is None or prec < min_prec:
                return left
            self.advance()
            right = self.logical(prec + 1)
            if prec <= 2:
                left = ast.Logical(t.text, left, right, t.loc)
            else:
                left = ast.BinaryOp(t.text, left, right, t.loc)

    def array_in(self) -> ast.Expr:
        keys: list[ast.Expr]
        bracketed = self._tok.is_op("[")
        if bracketed:
            keys = list(self._index_list(self.advance(), keys_of_in=True))
        else:
            keys = [self.comparison()]
        t = self._tok
        if t.is_kw("in"):
            self.advance()
            return ast.ArrayIn(tuple(keys), self.indexable(), t.loc)
        if len(keys) != 1:
            self.fail("'in' after a list of keys")
        if isinstance(keys[0], ast.Wildcard):
            raise ScriptError("'*' is only allowed as an array key", keys[0].loc)
        return keys[0]

    def comparison(self) -> ast.Expr:
        left = self.arith(1)
        t = self._tok
        if t.is_op("=~", "!~"):
            self.advance()
            return ast.RegexMatch(t.text, left, self.string_literal(), t.loc)
        while t.kind is Kind.OP and t.text in _COMPARISONS:
            self.advance()
            left = ast.Comparison(t.text, left, self.arith(1), t.loc)
            t = self._tok
        return left

    def arith(self, min_prec: int) -> ast.Expr:
        left = self.unary()
        while True:
            t = self._tok
            prec = _ARITH_PREC.get(t.text) if t.kind is Kind.OP else None
            if prec is None or prec < min_prec:
                return left
            self.advance()
            right = self.arith(prec + 1)
            if t.text == "." and isinstance(left, ast.StringLiteral) and \
                    isinstance(right, ast.StringLiteral):
                # folded as stap's constant folding does: "foo" . "bar" is "foobar"
                left = ast.StringLiteral(left.value + right.value, left.loc)
                continue
            if t.text == "*" and (_is_zero(left) and _no_effects(right) or
                                  _is_zero(right) and _no_effects(left)):
                # 0 * x with x free of side effects is 0, as stap folds it (x, a pure
                # embedded C expression, is then never compiled)
                left = ast.NumberLiteral(0, left.loc)
                continue
            left = ast.BinaryOp(t.text, left, right, t.loc)

    def unary(self) -> ast.Expr:
        ops: list[Token] = []
        while self._tok.is_op("+", "-", "!", "~"):
            ops.append(self.advance())
        operand = self.crement()
        for op in reversed(ops):
            operand = ast.Unary(op.text, operand, op.loc)
        return operand

    def crement(self) -> ast.Expr:
        t = self._tok
        if t.is_op("++", "--"):
            self.advance()
            return ast.IncDec(t.text, True, self.target_value(), t.loc)
        value = self.target_value()
        t = self._tok
        if t.is_op("++", "--"):
            self.advance()
            return ast.IncDec(t.text, False, value, t.loc)
        return value

    def _peek_components(self) -> bool:
        t = self._tok
        return t.is_op("->", "[") or (t.kind is Kind.IDENT and t.text.strip("$") == "")

    def target_value(self) -> ast.Expr:
        """A value with optional `&` prefix and `->m` / `[i]` / `$` suffixes."""
        amp = self.advance() if self._tok.is_op("&") else None
        addressof = amp is not None
        t = self._tok
        if t.kind is Kind.IDENT and t.text.startswith("$"):
            self.advance()
            name = t.text
            components: list[ast.TargetComponent] = []
            base = name.rstrip("$")
            if base and base != name:  # `$var$`: pretty-print, no further suffixes
                components.append(ast.PrettyPrint(name[len(base):], t.loc))
                name = base
            return ast.TargetSymbol(name, self._components(components), addressof, t.loc)
        if t.kind is Kind.AT and t.text == "@cast":
            self.advance()
            lp = self.expect_op("(")
            with self.nest(lp):
                operand = self.expression()
                self.expect_op(",")
                type_tok = self._tok
                type_name = self.string_literal().value
                if not type_name:
                    raise ScriptError("@cast needs a non-empty type name", type_tok.loc)
                module = None
                if self._tok.is_op(","):
                    self.advance()
                    module = self.string_literal().value
            self.expect_op(")")
            return ast.Cast(operand, type_name, module, self._components([]), addressof, t.loc)
        if t.kind is Kind.AT and t.text == "@var":
            self.advance()
            self.expect_op("(")
            var_name = self.string_literal().value
            module = None
            if self._tok.is_op(","):
                self.advance()
                module = self.string_literal().value
            self.expect_op(")")
            return ast.AtVar(var_name, module, self._components([]), addressof, t.loc)
        if addressof and not self._autocast:
            self.fail("@cast, @var or $var (--compatible older than 2.6)")
        value = self.value()
        if not self._autocast:
            return value
        if addressof and isinstance(value, (ast.TargetSymbol, ast.Cast, ast.AtVar,
                                            ast.AutoCast)) and value.addressof:
            raise ScriptError("cannot take an address more than once", t.loc)
        if addressof or self._peek_components():
            loc = amp.loc if amp is not None else self._tok.loc
            return ast.AutoCast(value, self._components([]), addressof, loc)
        return value

    def _components(self, components: list[ast.TargetComponent]
                    ) -> tuple[ast.TargetComponent, ...]:
        pretty = bool(components)
        while not pretty:
            t = self._tok
            if t.is_op("->"):
                self.advance()
                m = self.advance()
                if m.kind not in (Kind.IDENT, Kind.KEYWORD):
                    self.fail("a member name", m)
                base = m.text.rstrip("$")
                if base:
                    components.append(ast.Member(base, m.loc))
                if base != m.text:
                    components.append(ast.PrettyPrint(m.text[len(base):], m.loc))
                    pretty = True
            elif t.is_op("["):
                self.advance()
                with self.nest(t):
                    index = self.expression()
                self.expect_op("]")
                components.append(ast.Subscript(index, t.loc))
            else:
                break
        t = self._tok
        if not pretty and t.kind is Kind.IDENT and t.text.strip("$") == "":
            self.advance()
            components.append(ast.PrettyPrint(t.text, t.loc))
            pretty = True
        if pretty and self._tok.is_op("->", "["):
            raise ScriptError("'->' and '[' are not allowed after a pretty-printed value",
                              self._tok.loc)
        return tuple(components)

    def value(self) -> ast.Expr:
        t = self._tok
        if t.kind is Kind.EMBEDDED:
            return self._embedded(self.advance())
        if t.is_op("("):
            return self._paren_expression()
        if t.kind is Kind.STRING:
            return self.string_literal()
        if t.kind is Kind.NUMBER:
            self.advance()
            return ast.NumberLiteral(self._number(t), t.loc)
        if t.kind is Kind.AT:
            return self.at_operator()
        if t.kind is Kind.IDENT:
            self.advance()
            if self._tok.is_op("("):
                return self.call(t)
            sym = ast.Symbol(t.text, t.loc)
            if self._tok.is_op("["):
                return ast.Index(sym, self._index_list(self.advance()), t.loc)
            return sym
        self.fail("an expression")

    def _index_list(self, lb: Token, keys_of_in: bool = False) -> tuple[ast.Expr, ...]:
        """The keys after an already consumed '[', up to and including ']'.

        Like stap, the keys of `[a, b] in arr` are comparisons, not full
        expressions (`[a || b] in arr` is an error, as in stap).
        """
        keys: list[ast.Expr] = []
        with self.nest(lb):
            while True:
                if self._tok.is_op("*"):
                    keys.append(ast.Wildcard(self.advance().loc))
                else:
                    keys.append(self.comparison() if keys_of_in else self.expression())
                if self._tok.is_op(","):
                    self.advance()
                    continue
                self.expect_op("]", "',' or ']'")
                return tuple(keys)

    def indexable(self) -> ast.Symbol | ast.HistOp:
        t = self._tok
        if t.kind is Kind.AT and t.text in ("@hist_linear", "@hist_log"):
            return self.hist_op()
        if t.kind is not Kind.IDENT or t.text.startswith("$"):
            self.fail("an array name")
        self.advance()
        return ast.Symbol(t.text, t.loc)

    def hist_op(self) -> ast.HistOp:
        t = self.advance()
        lp = self.expect_op("(")
        params: list[int] = []
        with self.nest(lp):
            operand = self.expression()
            if t.text == "@hist_linear":
                for what in ("low bound", "high bound", "bucket width"):
                    if not self._tok.is_op(","):
                        self.fail(f"',' and the {what} of @hist_linear")
                    self.advance()
                    params.append(self._literal_number(what))
        self.expect_op(")")
        return ast.HistOp(t.text[len("@hist_"):], operand, tuple(params), t.loc)

    def _literal_number(self, what: str) -> int:
        t = self._tok
        negative = t.is_op("-")
        if negative:
            self.advance()
        n = self._tok
        if n.kind is not Kind.NUMBER:
            self.fail(f"a literal number ({what})")
        self.advance()
        return self._number(n, negative)

    def at_operator(self) -> ast.Expr:
        t = self._tok
        name = t.text[1:]
        if name in ("hist_linear", "hist_log"):
            hist = self.hist_op()
            if not self._tok.is_op("["):
                raise ScriptError("a histogram can only be printed or indexed here", t.loc,
                                  hint="print(@hist_log(s)) prints it; "
                                       "@hist_log(s)[i] is one bucket")
            return ast.Index(hist, self._index_list(self.advance()), t.loc)
        if name in ("defined", "entry"):
            self.advance()
            operand = self._paren_expression()
            return (ast.Defined if name == "defined" else ast.Entry)(operand, t.loc)
        if name in _STAT_OPS:
            self.advance()
            lp = self.expect_op("(")
            params: list[int] = []
            with self.nest(lp):
                operand = self.expression()
                if name == "variance" and self._tok.is_op(","):
                    self.advance()
                    params.append(self._literal_number("bit shift"))
            self.expect_op(")", "')'" if params or name != "variance" else "',' or ')'")
            return ast.StatOp(name, operand, tuple(params), t.loc)
        if name == "const":
            # @const("NAME"): the C constant NAME as a long, in guru mode only (stap's rule)
            if not self._guru:
                raise ScriptError("@const is only allowed in guru mode", t.loc,
                                  hint="run with -g")
            self.advance()
            self.expect_op("(")
            if self._tok.kind is not Kind.STRING:
                self.fail("a literal string naming a C constant")
            code = self.string_literal().value
            self.expect_op(")")
            return ast.Embedded(code, t.loc)
        if name in _TARGET_AT:
            return self._target_at(t)
        raise ScriptError(f"unknown operator '{t.text}'", t.loc,
                          hint="no macro of that name is defined (@define) before this use")

    def _target_at(self, t: Token) -> ast.Call:
        """@perf("name"), @kregister(N), @uregister(N), @kderef(N, addr), @uderef(N, addr),
        parsed with stap's rules (so -p1 takes them, or refuses what stap refuses) into a
        call: @uderef and the registers are translated, @kderef and @perf the semantic
        pass refuses (kernel memory and perf counters pydyn has no access to)."""
        name = t.text[1:]
        if name.startswith("k") and not self._guru:
            raise ScriptError(f"using {t.text} operator not permitted; need stap -g", t.loc,
                              hint="run with -g")
        self.advance()
        lp = self.expect_op("(")
        args: list[ast.Expr] = []
        with self.nest(lp):
            if name == "perf":
                if self._tok.kind is not Kind.STRING:
                    self.fail("a literal string naming a perf counter")
                lit = self.string_literal()
                if not lit.value:
                    raise ScriptError("expected non-empty string", lit.loc)
                args.append(lit)
            else:
                n = self._tok
                if n.kind is not Kind.NUMBER:
                    self.fail("a literal number (register or size)")
                self.advance()
                args.append(ast.NumberLiteral(self._number(n, False), n.loc))
                if name.endswith("deref"):
                    self.expect_op(",")
                    args.append(self.expression())
        self.expect_op(")")
        return ast.Call(t.text, tuple(args), t.loc)

    def call(self, name: Token) -> ast.Call:
        lp = self.advance()
        args: list[ast.Expr] = []
        fmt = _print_format(name.text)
        with self.nest(lp):
            t = self._tok
            if (name.text in _HIST_PRINTERS and t.kind is Kind.AT
                    and t.text in ("@hist_linear", "@hist_log")):
                hist = self.hist_op()
                if self._tok.is_op("["):
                    args.append(ast.Index(hist, self._index_list(self.advance()), t.loc))
                else:
                    args.append(hist)
                    self.expect_op(")")
                    return ast.Call(name.text, tuple(args), name.loc)
            elif fmt is not None and (fmt[0] or fmt[1]):
                if self._tok.kind is not Kind.STRING:
                    what = "format" if fmt[0] else "delimiter"
                    self.fail(f"a literal {what} string as the first argument of "
                              f"{name.text}()")
                args.append(self.string_literal())
            elif not self._tok.is_op(")"):
                args.append(self.expression())
            while self._tok.is_op(","):
                self.advance()
                args.append(self.expression())
        self.expect_op(")", "',' or ')'")
        if fmt is not None and len(args) - (fmt[0] or fmt[1]) > _MAX_PRINT_ARGS and \
                self.elaborate:   # stap: a pass 3 error
            raise ScriptError(f"{name.text}() takes at most {_MAX_PRINT_ARGS} values", name.loc)
        if fmt is not None and fmt[1] and len(args) < 3:
            # stap's parser: a delimiter joins at least two values
            raise ScriptError(f"{name.text}() needs a delimiter and at least two values",
                              name.loc)
        return ast.Call(ARITY_NAMES.get((name.text, len(args)), name.text), tuple(args),
                        name.loc)


def check_depth(script: ast.Script) -> None:
    """ScriptError at the first node deeper than MAX_TREE_DEPTH (iterative: the check
    itself never recurses)."""
    stack: list[tuple[object, int]] = [(script, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, ast.Node):
            depth += 1
            if depth > MAX_TREE_DEPTH:
                raise ScriptError(
                    f"script nested too deeply (more than {MAX_TREE_DEPTH} levels)", node.loc,
                    hint="each operator of a chain (a + b + ...), each prefix operator and "
                         "each 'else if' is one level: split long chains with temporaries")
        if isinstance(node, (tuple, list)):
            stack.extend((child, depth) for child in node)
        elif dataclasses.is_dataclass(node):
            for f in dataclasses.fields(node):
                value = getattr(node, f.name)
                if isinstance(value, (ast.Node, tuple, list)) or dataclasses.is_dataclass(value):
                    stack.append((value, depth))


def _frame_depth() -> int:
    depth = 0
    frame = sys._getframe()
    while frame is not None:
        depth += 1
        frame = frame.f_back  # type: ignore[assignment]
    return depth


@contextmanager
def recursion_headroom() -> Iterator[None]:
    """Make room for MAX_NESTING levels of recursive descent, and for a recursive walk
    of a tree MAX_TREE_DEPTH deep (the translator's).

    Python's default limit (1000 frames) would allow only ~45 levels; real
    scripts nest far less than MAX_NESTING, but fuzzed ones must not turn into
    a RecursionError.  Python-to-Python calls do not use the C stack (3.11).
    """
    old = sys.getrecursionlimit()
    needed = _frame_depth() + max(MAX_NESTING * _FRAMES_PER_NESTING,
                                  MAX_TREE_DEPTH * _FRAMES_PER_TREE_LEVEL) + 200
    if needed > old:
        sys.setrecursionlimit(needed)
    try:
        yield
    finally:
        if needed > old:
            sys.setrecursionlimit(old)


def _builtin_aliases() -> list[AliasDef]:
    """pydyn's own aliases (aliases.BUILTIN), parsed when a script names one."""
    filename = "<pydyn aliases>"
    lines = split_lines(BUILTIN)
    parser = Parser(Preprocessor(tokenize(BUILTIN, filename, lines), Config()), filename,
                    lines, False)
    out = []
    while parser.peek().kind is not Kind.EOF:
        d = parser.probe()
        assert isinstance(d, AliasDef)
        out.append(d)
    return out


def _is_zero(e: ast.Expr) -> bool:
    return isinstance(e, ast.NumberLiteral) and e.value == 0


def _no_effects(e: ast.Expr) -> bool:
    return isinstance(e, ast.NumberLiteral) or \
        isinstance(e, ast.Embedded) and embedded_is_pure(e.code)


def parse_script(text: str, filename: str, *, args: Sequence[str] = (), arch: str = "x86_64",
                 runtime: str = "dyninst", kernel_release: str | None = None,
                 guru: bool = False, compatible: str | None = None,
                 library: Sequence[tuple[str, str]] = (),
                 macro_files: Sequence[tuple[str, str]] = (),
                 warn: Callable[[str], None] | None = None,
                 on_file: Callable[[LibraryFile], None] | None = None,
                 elaborate: bool = True) -> ast.Script:
    """Preprocess and parse a script; every problem is a ScriptError located in `text`.

    `args` are the script's command-line arguments ($1/@1 ...); `arch` and
    `runtime` are what `%( arch == ... %)` and `%( runtime == ... %)` test;
    `kernel_release` (default: the host's) is for `kernel_v`/`kernel_vr`;
    `guru` (-g) allows embedded C and sets `guru_mode`; `compatible` (--compatible)
    is what `systemtap_v` compares against; `library` holds the (text, path) of tapset
    files (-I), each parsed, what the script uses of them taken (library.py);
    `macro_files` the (text, path) of macro libraries (.stpm, -I), whose macros the
    script and the tapsets may invoke, after pydyn's own (tapset.py).  A tapset that
    does not parse, a macro library that does not preprocess or defines a macro another
    one has, is skipped with a warning (`warn`), as stap skips it.  `on_file` is given
    each file's declarations as written (aliases not expanded, nothing of a tapset
    joined): each `library` tapset that parses, then the script's own.  `elaborate` False
    stops where stap's pass 1 does: no alias expanded, and what stap checks only in its
    later passes (an alias that does not expand, a wildcard in an alias name, `break`
    outside a loop, more than 32 values printed, more than 9 indexes) not checked.
    """
    extra: dict[str, str] = {}
    if kernel_release is not None:
        extra["kernel_release"] = kernel_release
    if compatible is not None:
        extra["systemtap_version"] = compatible
    config = Config(args=tuple(args), arch=arch, runtime=runtime, guru=guru, **extra)
    macros: dict[str, Macro] = {}
    for lib_text, lib_path in [*macro_groups_for(text), *macro_files]:
        try:
            found = library_macros(tokenize(lib_text, lib_path, split_lines(lib_text)), config)
            twice = sorted(found.keys() & macros.keys())
            if twice:
                raise ScriptError(f"duplicate definition of library macro '@{twice[0]}'",
                                  found[twice[0]].name.loc)
        except ScriptError as exc:
            if warn is not None:
                warn(f"{exc.location or lib_path}: {exc.message}: macro library {lib_path} "
                     "skipped")
            continue
        macros.update(found)
    with recursion_headroom():
        files = []
        own = tapset_groups_for(text)
        for lib_text, lib_path in [*library, *own]:
            # tapsets may hold embedded C without -g, as stap's own do
            lib_lines = split_lines(lib_text)
            try:
                lp = Parser(Preprocessor(tokenize(lib_text, lib_path, lib_lines),
                                         dataclasses.replace(config, guru=True), macros),
                            lib_path, lib_lines, True)
                try:
                    probes, funcs, globs, _, aliases = lp.parts()
                except RecursionError:
                    raise ScriptError("script nested too deeply", lp.peek().loc) from None
            except ScriptError as exc:
                if (lib_text, lib_path) in own:
                    raise
                # a -I tapset that does not parse is skipped with a warning, as stap
                # skips one (-W makes it the error)
                if warn is not None:
                    warn(f"{exc.location or lib_path}: {exc.message}: tapset {lib_path} "
                         "skipped")
                continue
            parsed = LibraryFile(lib_path, tuple(probes), tuple(_arity_named(funcs)),
                                 tuple(globs), tuple(aliases))
            if on_file is not None and (lib_text, lib_path) not in own:
                on_file(parsed)
            files.append(parsed)
        lines = split_lines(text)
        parser = Parser(Preprocessor(tokenize(text, filename, lines), config, macros), filename,
                        lines, guru, files, autocast=compatible is None or
                        strverscmp(compatible, "2.6") >= 0)
        parser.glue_across_comments = strverscmp(config.systemtap_version, "2.0") >= 0
        parser.elaborate = elaborate
        try:
            script = parser.script()
        except RecursionError:
            raise ScriptError("script nested too deeply", parser.peek().loc) from None
    check_depth(script)
    if on_file is not None and parser.own is not None:
        on_file(parser.own)
    if compatible is not None and strverscmp(compatible, "1.3") < 0:
        script = dataclasses.replace(script, legacy_p=True)
    return script


def _arity_named(functions: list[ast.Function]) -> list[ast.Function]:
    """A script's or tapset's own `user_string_warn(a, b)` under the name its calls take
    (tapset.ARITY_NAMES), so that they reach it rather than pydyn's tapset's."""
    return [dataclasses.replace(f, name=ARITY_NAMES[(f.name, len(f.params))])
            if (f.name, len(f.params)) in ARITY_NAMES else f for f in functions]
