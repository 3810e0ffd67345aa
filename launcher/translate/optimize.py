"""Pass 2's optimisation, as stap's elaborate.cxx runs it before types are inferred (off
with -u): rounds, until one changes nothing, of

    unused functions     a function no probe reaches any more is dropped (opt1)
    dead assignments     `x = e` (or `x <<< e`) to a local nothing reads is `e` (opt3)
    dead statements      a statement with no side effect goes (opt4, stap's
                         dead_stmtexpr_remover): an expression statement that only
                         reads, `;`, empty blocks, an `if`, `for`, `while`, `foreach` or
                         `try` left with nothing to do; nested blocks are flattened
    void statements      an expression whose value nothing uses becomes the parts of it
                         that may do something (opt5, void_statement_reducer): `a && b`
                         is `if (a) b`, `a ? b : c` an `if`, `f(x) + g()` is `f(x); g()`,
                         a call of a side-effect-free function (or sprint) its
                         arguments, a target value ($x, @cast, @var, autocast) its
                         operand and indexes, `@defined(...)` nothing
    constants            stap's const_folder: literal arithmetic, comparisons, `&&`,
                         `||`, `?:` and concatenation folded; an `if`, `for`, `while` on
                         a constant condition and a `foreach` with a `limit` <= 0 lose
                         what never runs; `@defined($x)` in a probe with no context
                         (begin, end, timers...) is 0 once nothing else changes, as stap
                         collapses an unresolved @defined ("Collapsing unresolved
                         @define to 0")

so a script's bogus expressions whose value nothing uses (a context variable where the
probe has none, a string added to a number) are gone before they are typed, and a probe
left with nothing to do is elided (translate.elide_probes).

Side effects are stap's (varuse_collecting_visitor): writing a variable of the scope
or a global, a print to the output, embedded C not tagged `/* pure */`, a write to a
target value, and calling a function that does one of these; a local of a called
function is its own.  A built-in is free of them when stap's tapset marks it `/* pure */`
(PURE_BUILTINS).

Warnings come from the first round only, as stap prints the later rounds' only at -vvv,
in stap's order: never-assigned variables (warnings.never_assigned), the elided
assignments, the side-effect-free expression statements and functions, a collapsed
@defined.  Only the user's script is warned about.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..errors import ScriptWarning, SourceLocation
from ..guru import embedded_is_pure, pragma_globals
from ..script import ast
from ..script.elide import reachable_functions
from ..script.walk import child_fields, iter_nodes
from .common import _describe, _err
from .types import (
    PRINT_FUNCS,
    arity_mismatch,
    array_without_index,
    not_a_statistic,
    not_assignable,
    not_global_array,
    scalar_not_array,
)
from .warnings import dead_assignments, never_assigned

# The built-ins whose tapset definition stap tags `/* pure */`, or whose tapset body
# only calls such (abs, gettimeofday_s, user_int, the *_arg readers): a call whose
# value nothing uses is only its arguments.  asmlinkage and fastcall are not here:
# pure in x86-64's tapset but i386's set the context's regparm, and one translation
# serves -m32 targets too.
PURE_BUILTINS = frozenset({
    "cpu", "ctime", "errno_p", "errno_str", "euid", "execname",
    "get_cycles", "gettimeofday_ns", "gettimeofday_us", "gettimeofday_ms",
    "gettimeofday_s", "gid", "is_return", "isdigit", "isinstr", "local_clock_ns",
    "matched", "ngroups", "pid", "pn", "pp", "ppfunc", "ppid", "probefunc", "returnstr",
    "returnval", "sprint_ubacktrace", "str_replace", "string_quoted", "stringat",
    "strlen", "strpos", "strtol", "substr", "target", "text_str", "text_strn", "tid",
    "uaddr", "ubacktrace", "uid", "umodname", "usymdata", "usymname", "abs",
    "user_string_n", "user_string_utf16", "user_string_utf32",
    *(f"user_{t}{suffix}" for t in ("char", "short", "ushort", "int", "uint", "long",
                                    "ulong", "int8", "uint8", "int16", "uint16", "int32",
                                    "uint32", "int64", "uint64")
      for suffix in ("", "_error")),
    "int_arg", "uint_arg", "long_arg", "ulong_arg", "longlong_arg", "ulonglong_arg",
    "pointer_arg", "s32_arg", "u32_arg", "s64_arg", "u64_arg",
})

_TARGETS = (ast.TargetSymbol, ast.Cast, ast.AtVar, ast.AutoCast)
_INT64 = 1 << 64

Var = tuple[str | None, str]    # (the scope owning it, None for a global; its name)


@dataclass
class Effects:
    """What evaluating something may change (stap's varuse_collecting_visitor)."""

    written: set[Var] = field(default_factory=set)
    impure: bool = False        # output, impure embedded C, a target write, ...

    def free(self) -> bool:
        """stap's side_effect_free(): writes nothing at all."""
        return not self.written and not self.impure

    def free_wrt(self, owner: str | None) -> bool:
        """stap's side_effect_free_wrt(): writes no global and no variable of the scope
        `owner` (None: only the globals count)."""
        return not self.impure and not any(o is None or o == owner for o, _ in self.written)


class _Analysis:
    """The effects of expressions and statements of one script as it is now."""

    def __init__(self, script: ast.Script) -> None:
        self.globals = {g.name for g in script.globals}
        self.funcs = {f.name: f for f in script.functions}
        self._summaries: dict[str, Effects] = {}

    def var(self, name: str, owner: str, params: Collection[str]) -> Var:
        return (owner, name) if name in params or name not in self.globals else (None, name)

    def of(self, node: object, owner: str, params: Collection[str] = ()) -> Effects:
        eff = Effects()
        self._walk(node, eff, owner, params)
        return eff

    def function(self, name: str) -> Effects:
        """A function's effects, its callees' included (its own locals are owned by
        `function NAME`)."""
        done = self._summaries.get(name)
        if done is not None:
            return done
        eff = self._summaries[name] = Effects()   # a recursive call adds nothing more
        f = self.funcs[name]
        owner = f"function {name}"
        if isinstance(f.body, ast.Embedded):
            self._embedded(f.body.code, eff)
        else:
            self._walk(f.body, eff, owner, {p.name for p in f.params})
        return eff

    def _embedded(self, code: str, eff: Effects) -> None:
        eff.written.update((None, n) for n in pragma_globals(code, "write"))
        eff.impure |= not embedded_is_pure(code)

    def _write(self, target: ast.Expr, eff: Effects, owner: str,
               params: Collection[str]) -> None:
        if isinstance(target, ast.Symbol):
            eff.written.add(self.var(target.name, owner, params))
        elif isinstance(target, ast.Index) and isinstance(target.base, ast.Symbol):
            eff.written.add(self.var(target.base.name, owner, params))
            self._walk(target.indexes, eff, owner, params)
        else:
            # an unresolved target value written: kept for its later error, as stap
            eff.impure |= isinstance(target, _TARGETS)
            self._walk(target, eff, owner, params)

    def _walk(self, node: object, eff: Effects, owner: str, params: Collection[str]) -> None:
        if isinstance(node, ast.Assign):
            self._write(node.target, eff, owner, params)
            self._walk(node.value, eff, owner, params)
        elif isinstance(node, ast.IncDec):
            self._write(node.operand, eff, owner, params)
        elif isinstance(node, ast.Delete):
            self._write(node.target, eff, owner, params)
        elif isinstance(node, ast.Foreach):
            for sym in (*node.keys, *((node.value,) if node.value else ())):
                eff.written.add(self.var(sym.name, owner, params))
            if node.sort is not None and isinstance(node.array, ast.Symbol):
                eff.written.add(self.var(node.array.name, owner, params))
            self._walk((node.array, node.slice, node.limit, node.body), eff, owner, params)
        elif isinstance(node, ast.Try):
            if node.catch_var is not None:
                eff.written.add(self.var(node.catch_var.name, owner, params))
            self._walk((node.body, node.handler), eff, owner, params)
        elif isinstance(node, ast.Call):
            self._walk(node.args, eff, owner, params)
            if node.name in self.funcs:
                callee = self.function(node.name)
                eff.written |= callee.written
                eff.impure |= callee.impure
            elif node.name in PRINT_FUNCS:
                eff.impure |= not node.name.startswith("s")   # sprint* only make a string
            else:
                eff.impure |= node.name not in PURE_BUILTINS
        elif isinstance(node, ast.Embedded):
            self._embedded(node.code, eff)
        elif isinstance(node, tuple):
            for item in node:
                self._walk(item, eff, owner, params)
        elif isinstance(node, ast.Node | ast.Subscript):
            for name in child_fields(type(node)):
                self._walk(getattr(node, name), eff, owner, params)


def _rebuild(node: Any, fn: Callable[[Any], Any]) -> Any:
    """`node` with `fn` applied to each child (tuples item by item); the same object
    when nothing changed."""
    if isinstance(node, tuple):
        items = tuple(fn(x) for x in node)
        return node if all(a is b for a, b in zip(items, node, strict=True)) else items
    changed = {name: new for name in child_fields(type(node))
               for old in [getattr(node, name)] for new in [fn(old)] if new is not old}
    return dataclasses.replace(node, **changed) if changed else node


def _block(stmt: ast.Stmt | None, loc: SourceLocation) -> ast.Block:
    if stmt is None:
        return ast.Block((), loc)
    return stmt if isinstance(stmt, ast.Block) else ast.Block((stmt,), stmt.loc)


def _wrap(value: int) -> int:
    value %= _INT64
    return value - _INT64 if value >= 1 << 63 else value


@dataclass
class Optimized:
    script: ast.Script
    warnings: list[ScriptWarning]   # the first round's, in stap's order (duplicates kept)


class _Optimizer:
    def __init__(self, script: ast.Script, contextless: Collection[int]) -> None:
        self.script = script
        self.user = script.loc.file
        self.contextless = set(contextless)
        self.warn = True                     # the first round's warnings only
        self.warnings: list[ScriptWarning] = []
        # the token each place names in a warning, from the script as parsed: a
        # statement keeps its first token when what it held there is gone
        self.tokens: dict[SourceLocation, str] = {}
        for n in iter_nodes((script.probes, script.functions)):
            if isinstance(n, ast.Expr) and n.loc not in self.tokens:
                self.tokens[n.loc] = _describe(n)
        self.analysis = _Analysis(script)
        self._relaxed = self._collapse = self._collapsed = False

    # -- the rounds ------------------------------------------------------------

    def run(self) -> Optimized:
        for _ in range(100):   # each round removes something: a script is finite
            start = self.script
            self.warnings += never_assigned(self.script) if self.warn else []
            self._functions()
            script, assigned = dead_assignments(self.script)
            self._set(script)
            if self.warn:
                self.warnings += assigned
            self._each(self._dead_body)
            self._each(self._reduce_body)
            self._relaxed, self._collapsed = self.script is start, False
            self._each(self._fold_body)
            self.warn = False
            if self.script is start:
                break
        return Optimized(self.script, self.warnings)

    def _set(self, script: ast.Script) -> None:
        if script is not self.script:
            if script.functions is not self.script.functions:
                self.analysis = _Analysis(script)
            self.script = script

    def _functions(self) -> None:
        used = reachable_functions(self.script)
        if len(used) < len(self.script.functions):
            self._set(dataclasses.replace(self.script, functions=tuple(
                f for f in self.script.functions if f.name in used)))

    def _each(self, fn: Callable[[ast.Block, str], ast.Block]) -> None:
        """`fn(body, owner)` over each probe's body, then each function's (by name, as
        stap's map of functions).  What a function's rewrite removed is still counted
        in this pass's effects of its callers: only ever more than there are."""
        probes = tuple(p if body is p.body else dataclasses.replace(p, body=body)
                       for i, p in enumerate(self.script.probes)
                       for body in [fn(p.body, f"probe {i}")])
        funcs = list(self.script.functions)
        for i in sorted(range(len(funcs)), key=lambda k: funcs[k].name):
            f = funcs[i]
            if not isinstance(f.body, ast.Embedded):
                body = fn(f.body, f"function {f.name}")
                funcs[i] = f if body is f.body else dataclasses.replace(f, body=body)
        changed_funcs = any(a is not b for a, b in zip(funcs, self.script.functions,
                                                        strict=True))
        if changed_funcs or any(a is not b for a, b in zip(probes, self.script.probes,
                                                            strict=True)):
            self._set(dataclasses.replace(
                self.script, probes=probes,
                functions=tuple(funcs) if changed_funcs else self.script.functions))

    def _params(self, owner: str) -> frozenset[str]:
        if not owner.startswith("function "):
            return frozenset()
        f = self.analysis.funcs[owner[len("function "):]]
        return frozenset(p.name for p in f.params)

    def _warning(self, message: str, loc: SourceLocation, token: str | None = None) -> None:
        if self.warn and loc.file == self.user:
            self.warnings.append(ScriptWarning(message, token or self._token(loc), loc))

    def _token(self, loc: SourceLocation) -> str:
        known = self.tokens.get(loc)
        if known is not None:
            return known
        text = loc.source_line[loc.column - 1:loc.column] if loc.source_line else ""
        return f"operator '{text}'" if text and not text.isalnum() else "statement"

    # -- dead statements (opt4) --------------------------------------------------

    def _dead_body(self, body: ast.Block, owner: str) -> ast.Block:
        params = self._params(owner)
        kept = self._dead(body, owner, params)
        if kept is None:
            if owner.startswith("function "):
                name = owner[len("function "):]
                f = self.analysis.funcs[name]
                self._warning(f"side-effect-free function '{name}'", f.loc,
                              f"identifier '{name}'")
            return body if not body.statements else ast.Block((), body.loc)
        return kept if kept is body else _block(kept, body.loc)

    def _free(self, node: object, owner: str, params: Collection[str]) -> bool:
        return self.analysis.of(node, owner, params).free()

    def _dead(self, s: ast.Stmt, owner: str, params: Collection[str]) -> ast.Stmt | None:
        """stap's dead_stmtexpr_remover: `s` without what has no effect; None when
        nothing of it is left."""
        if isinstance(s, ast.Empty):
            return None
        if isinstance(s, ast.Block):
            out: list[ast.Stmt] = []
            for child in s.statements:
                kept = self._dead(child, owner, params)
                if isinstance(kept, ast.Block):
                    out.extend(kept.statements)
                elif kept is not None:
                    out.append(kept)
            if len(out) == len(s.statements) and all(
                    a is b for a, b in zip(out, s.statements, strict=True)):
                return s if out else None
            return None if not out else out[0] if len(out) == 1 else \
                ast.Block(tuple(out), s.loc)
        if isinstance(s, ast.ExprStatement):
            if self.analysis.of(s.expr, owner, params).free_wrt(owner):
                self._warning("Eliding side-effect-free expression ", s.loc)
                return None
            return s
        if isinstance(s, ast.If):
            then = self._dead(s.then, owner, params)
            else_ = self._dead(s.else_, owner, params) if s.else_ is not None else None
            if then is None and else_ is None:
                return None if self._free(s.cond, owner, params) else \
                    ast.ExprStatement(s.cond, s.cond.loc)
            if then is None:
                assert else_ is not None
                return ast.If(ast.Unary("!", s.cond, s.cond.loc), else_, None, s.loc)
            return s if then is s.then and else_ is s.else_ else \
                ast.If(s.cond, then, else_, s.loc)
        if isinstance(s, ast.Foreach):
            body = self._dead(s.body, owner, params)
            return None if body is None else s if body is s.body else \
                dataclasses.replace(s, body=body)
        if isinstance(s, ast.For | ast.While):
            body = self._dead(s.body, owner, params)
            if body is None:
                controls = (s.init, s.cond, s.step) if isinstance(s, ast.For) else s.cond
                if self._free(controls, owner, params):
                    return None
                body = s.body if isinstance(s.body, ast.Empty) else ast.Empty(s.loc)
            return s if body is s.body else dataclasses.replace(s, body=body)
        if isinstance(s, ast.Try):
            body = self._dead(s.body, owner, params)
            if body is None:
                return None
            handler = self._dead(s.handler, owner, params)
            new_body = _block(body, s.body.loc)
            new_handler = s.handler if handler is None and not s.handler.statements else \
                _block(handler, s.handler.loc)
            return s if new_body is s.body and new_handler is s.handler else \
                dataclasses.replace(s, body=new_body, handler=new_handler)
        return s

    # -- void statements (opt5) --------------------------------------------------

    def _reduce_body(self, body: ast.Block, owner: str) -> ast.Block:
        out = self._reduce(body)
        return _block(out, body.loc) if out is not body else body

    def _reduce(self, s: Any) -> Any:
        """stap's void_statement_reducer over the statements below `s`."""
        if isinstance(s, ast.ExprStatement):
            return self._void(s.expr, s)
        if isinstance(s, tuple) or isinstance(s, ast.Stmt) and \
                not isinstance(s, ast.Delete | ast.Return):
            return _rebuild(s, self._reduce_child)
        return s

    def _reduce_child(self, c: Any) -> Any:
        return self._reduce(c) if isinstance(c, ast.Stmt | tuple) else c

    def _statements(self, exprs: Iterable[ast.Expr], loc: SourceLocation) -> ast.Stmt:
        block = ast.Block(tuple(ast.ExprStatement(e, e.loc) for e in exprs), loc)
        return self._reduce(block)

    def _void(self, e: ast.Expr, s: ast.ExprStatement) -> ast.Stmt:
        """The statement(s) doing what `e` does, its value unused (`s`: `e;` itself)."""
        if isinstance(e, ast.Logical):
            cond = e.left if e.op == "&&" else ast.Unary("!", e.left, e.loc)
            return self._reduce(ast.If(cond, ast.ExprStatement(e.right, e.right.loc),
                                       None, e.loc))
        if isinstance(e, ast.Ternary):
            return self._reduce(ast.If(e.cond, ast.ExprStatement(e.then, e.then.loc),
                                       ast.ExprStatement(e.else_, e.else_.loc), e.loc))
        if isinstance(e, ast.BinaryOp | ast.Comparison):
            return self._statements((e.left, e.right), e.loc)
        if isinstance(e, ast.Unary):
            return self._void(e.operand, ast.ExprStatement(e.operand, e.operand.loc))
        if isinstance(e, ast.RegexMatch):
            return self._void(e.left, ast.ExprStatement(e.left, e.left.loc))
        if isinstance(e, ast.Call) and e.args and self._reducible(e):
            return self._statements(e.args, e.loc)
        if isinstance(e, _TARGETS):
            operand = getattr(e, "operand", None)
            return self._statements(
                [*((operand,) if operand is not None else ()),
                 *(c.index for c in e.components if isinstance(c, ast.Subscript))], e.loc)
        if isinstance(e, ast.Defined):
            return ast.Empty(e.loc)
        return s

    def _reducible(self, e: ast.Call) -> bool:
        """Whether a call whose value nothing uses is only its arguments: a function
        that changes no global, a pure built-in, an sprint."""
        if e.name in self.analysis.funcs:
            return self.analysis.function(e.name).free_wrt(None)
        if e.name in PRINT_FUNCS:
            return e.name.startswith("s")
        return e.name in PURE_BUILTINS

    # -- constants ---------------------------------------------------------------

    def _fold_body(self, body: ast.Block, owner: str) -> ast.Block:
        # an unresolved @defined collapses only in a round that changed nothing else,
        # one a round, as stap's
        self._collapse = self._relaxed and not self._collapsed and \
            owner.startswith("probe ") and int(owner.split()[1]) in self.contextless
        out = self._fold(body)
        return _block(out, body.loc) if out is not body else body

    def _fold(self, node: Any) -> Any:
        node = _rebuild(node, self._fold)
        if isinstance(node, ast.If) and isinstance(node.cond, ast.NumberLiteral):
            taken = node.then if node.cond.value else node.else_
            return ast.Empty(node.loc) if taken is None else taken
        if isinstance(node, ast.While | ast.For) and \
                isinstance(node.cond, ast.NumberLiteral) and not node.cond.value:
            init = node.init if isinstance(node, ast.For) else None
            return ast.Empty(node.loc) if init is None else ast.ExprStatement(init, init.loc)
        if isinstance(node, ast.Foreach) and isinstance(node.limit, ast.NumberLiteral) and \
                node.limit.value <= 0:
            return ast.Empty(node.loc)
        return self._fold_expr(node) if isinstance(node, ast.Expr) else node

    def _fold_expr(self, e: ast.Expr) -> ast.Expr:
        num = ast.NumberLiteral
        if isinstance(e, ast.Unary) and isinstance(e.operand, num):
            v = e.operand.value
            value = {"+": v, "-": -v, "!": int(not v), "~": ~v}[e.op]
            return num(_wrap(value), e.loc)
        if isinstance(e, ast.BinaryOp):
            left, right = e.left, e.right
            if isinstance(left, num) and isinstance(right, num):
                folded = _arith(e.op, left.value, right.value)
                return e if folded is None else num(_wrap(folded), e.loc)
            if e.op == "." and isinstance(left, ast.StringLiteral) and \
                    isinstance(right, ast.StringLiteral):
                return ast.StringLiteral(left.value + right.value, e.loc)
        if isinstance(e, ast.Comparison):
            left, right = e.left, e.right
            if isinstance(left, num) and isinstance(right, num) or \
                    isinstance(left, ast.StringLiteral) and isinstance(right, ast.StringLiteral):
                a: Any = left.value if isinstance(left, num) else left.as_bytes()
                b: Any = right.value if isinstance(right, num) else right.as_bytes()
                ops = {"==": a == b, "!=": a != b, "<": a < b, "<=": a <= b, ">": a > b,
                       ">=": a >= b}
                return num(int(ops[e.op]), e.loc)
        if isinstance(e, ast.Logical):
            return self._fold_logical(e)
        if isinstance(e, ast.Ternary) and isinstance(e.cond, num):
            return e.then if e.cond.value else e.else_
        if isinstance(e, ast.Defined) and self._collapse and \
                isinstance(_leftmost(e.operand), ast.TargetSymbol):
            self._collapse, self._collapsed = False, True
            self._warning("Collapsing unresolved @define to 0 [stapprobes]", e.loc,
                          "operator '@defined'")
            return num(0, e.loc)
        return e

    def _fold_logical(self, e: ast.Logical) -> ast.Expr:
        num = ast.NumberLiteral
        left = e.left.value if isinstance(e.left, num) else None
        right = e.right.value if isinstance(e.right, num) else None
        decides = (lambda v: v is not None and bool(v)) if e.op == "||" else \
            (lambda v: v is not None and not v)
        if left is not None and right is not None:
            value = (left or right) if e.op == "||" else (left and right)
            return num(int(bool(value)), e.loc)
        if decides(left) or decides(right) and \
                self.analysis.of(e.left, "", ()).free():
            return num(int(e.op == "||"), e.loc)
        return e


def _arith(op: str, a: int, b: int) -> int | None:
    """stap's const_folder on two literals; None where it leaves the expression (a
    division by 0 is the run time's error; shifts are the run time's)."""
    if op in ("/", "%"):
        if b == 0:
            return None
        if a == -(1 << 63) and b == -1:
            return a if op == "/" else 0
        q = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)   # C truncation
        return q if op == "/" else a - q * b
    ops: dict[str, Callable[[int, int], int]] = {
        "+": lambda x, y: x + y, "-": lambda x, y: x - y, "*": lambda x, y: x * y,
        "&": lambda x, y: x & y, "|": lambda x, y: x | y, "^": lambda x, y: x ^ y}
    fn = ops.get(op)
    return None if fn is None else fn(a, b)


def _leftmost(e: ast.Expr) -> ast.Expr:
    while isinstance(e, ast.AutoCast):
        e = e.operand
    return e


def check_symbols(script: ast.Script) -> None:
    """stap's symbol resolution, which comes before its optimisation, so its errors are
    errors also in a statement the optimisation drops: a global indexed with another
    number of keys than before or used both as an array and a scalar, a local or
    parameter indexed, an assignment to what is no variable; embedded C naming in a
    `pragma:read`/`pragma:write` a global the script does not declare, or an
    aggregate (a global given `<<<`)."""
    declared = {g.name for g in script.globals}
    aggregates = {t.name for n in iter_nodes((script.probes, script.functions))
                  if isinstance(n, ast.Assign) and n.op == "<<<"
                  for t in [n.target.base if isinstance(n.target, ast.Index) else n.target]
                  if isinstance(t, ast.Symbol)}
    for node in iter_nodes((script.probes, script.functions)):
        if isinstance(node, ast.Embedded):
            for kind in ("read", "write"):
                for name in pragma_globals(node.code, kind):
                    if name not in declared:
                        raise _err(f"unresolved pragma:{kind} global {name}", node)
                    if name in aggregates:
                        decl = next(g for g in script.globals if g.name == name)
                        raise _err("Aggregates not available in embedded-C", decl)
    arity: dict[str, int] = {g.name: -1 for g in script.globals   # -1: an array, keys unknown
                             if g.size is not None or g.wrap}      # 0: a scalar

    def array(base: ast.Symbol, nkeys: int, params: Collection[str]) -> None:
        if base.name in params or base.name not in declared:
            raise not_global_array(base)
        before = arity.setdefault(base.name, nkeys)
        if before == 0:
            raise scalar_not_array(base)
        if before == -1:
            arity[base.name] = nkeys
        elif before != nkeys:
            raise arity_mismatch(base, nkeys, before)

    def walk(node: object, params: Collection[str]) -> None:
        if isinstance(node, ast.Index) and isinstance(node.base, ast.Symbol):
            array(node.base, len(node.indexes), params)
            walk(node.indexes, params)
        elif isinstance(node, ast.ArrayIn) and isinstance(node.array, ast.Symbol):
            array(node.array, len(node.keys), params)
            walk(node.keys, params)
        elif isinstance(node, ast.Foreach):
            if isinstance(node.array, ast.Symbol):
                array(node.array, len(node.keys), params)
            walk((node.array if isinstance(node.array, ast.HistOp) else None, node.slice,
                  node.limit, node.body), params)
        elif isinstance(node, ast.Delete) and isinstance(node.target, ast.Symbol):
            pass   # `delete x` of an array or a scalar
        elif isinstance(node, ast.Assign | ast.IncDec) and not isinstance(
                target := node.target if isinstance(node, ast.Assign) else node.operand,
                (ast.Symbol, ast.Index, *_TARGETS)):
            # stap's "Expecting lvalue for assignment"
            raise not_a_statistic(target) if isinstance(node, ast.Assign) and \
                node.op == "<<<" else not_assignable(target)
        elif isinstance(node, ast.Symbol):
            if node.name in declared and node.name not in params:
                if arity.setdefault(node.name, 0) != 0:
                    raise array_without_index(node)
        elif isinstance(node, tuple):
            for item in node:
                walk(item, params)
        elif isinstance(node, ast.Node | ast.Subscript):
            for name in child_fields(type(node)):
                walk(getattr(node, name), params)

    for p in script.probes:
        walk(p.body, ())
    for f in script.functions:
        if not isinstance(f.body, ast.Embedded):
            walk(f.body, {q.name for q in f.params})


def optimize(script: ast.Script, contextless: Collection[int] = ()) -> Optimized:
    """stap's pass-2 optimisation of `script` (see the module's doc), after the checks
    of stap's symbol resolution (check_symbols); `contextless`: the indexes of the
    probes with no context variables (no probe site), where `@defined($x)` is 0."""
    check_symbols(script)
    return _Optimizer(script, contextless).run()
