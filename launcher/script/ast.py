"""The syntax tree of a SystemTap script.

Every node is a frozen dataclass whose last field is `loc`, the place the node
is reported at.  Following stap, that is the node's defining token: the
operator of a binary/unary/assignment/ternary (`?`) expression, `in` for
membership, the name of a call/index/variable, the keyword of a statement, the
first token of an expression statement.

Strings are decoded `str`; escapes of bytes >= 0x80 are lone surrogates, so a
literal's exact bytes are `StringLiteral.as_bytes()`.  Numbers are int64 (a
literal above 2**63-1 wraps, like stap's cast).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..errors import SourceLocation
from .lexer import decode_bytes


class Node:
    __slots__ = ()
    loc: SourceLocation


class Expr(Node):
    __slots__ = ()


class Stmt(Node):
    __slots__ = ()


# -- expressions ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NumberLiteral(Expr):
    value: int
    loc: SourceLocation


@dataclass(frozen=True, slots=True)
class StringLiteral(Expr):
    value: str  # adjacent literals are already concatenated, as stap does
    loc: SourceLocation

    def as_bytes(self) -> bytes:
        return decode_bytes(self.value)


@dataclass(frozen=True, slots=True)
class Symbol(Expr):
    """A script variable (local or global), or an array/aggregate name."""

    name: str
    loc: SourceLocation


@dataclass(frozen=True, slots=True)
class Wildcard(Expr):
    """`*` in an index list: `delete a[*, 1]`, `[*, k] in a`, `foreach (... in a[*, 2])`."""

    loc: SourceLocation


@dataclass(frozen=True, slots=True)
class HistOp(Expr):
    """`@hist_linear(s, lo, hi, step)` (params = (lo, hi, step)) or `@hist_log(s)`.

    Only valid as an array base (`@hist_log(s)[3]`, `foreach (b in @hist_log(s))`)
    or as the sole argument of print/println/sprint/sprintln.
    """

    kind: str  # "linear" | "log"
    operand: Expr
    params: tuple[int, ...]
    loc: SourceLocation


@dataclass(frozen=True, slots=True)
class Index(Expr):
    """`a[k1, k2]`; a key may be a `Wildcard`."""

    base: Symbol | HistOp
    indexes: tuple[Expr, ...]
    loc: SourceLocation


@dataclass(frozen=True, slots=True)
class Call(Expr):
    """`f(a, b)`, including the print family and `exit()` etc.

    For printf/sprintf (and the printd/printf...ln variants) the parser has
    checked that the first argument is a StringLiteral, as stap requires; for
    print/println/sprint/sprintln a sole argument may be a HistOp.
    """

    name: str
    args: tuple[Expr, ...]
    loc: SourceLocation


@dataclass(frozen=True, slots=True)
class StatOp(Expr):
    """`@count(s)` `@sum` `@min` `@max` `@avg` `@variance(s[, N])`; params = (N,) or ()."""

    op: str  # "count" | "sum" | "min" | "max" | "avg" | "variance"
    operand: Expr
    params: tuple[int, ...]
    loc: SourceLocation


@dataclass(frozen=True, slots=True)
class BinaryOp(Expr):
    """Arithmetic `+ - * / %`, bitwise `& | ^`, shifts `<< >> >>>`, concatenation `.`."""

    op: str
    left: Expr
    right: Expr
    loc: SourceLocation


@dataclass(frozen=True, slots=True)
class Comparison(Expr):
    """`== != < <= > >=`, on numbers or strings."""

    op: str
    left: Expr
    right: Expr
    loc: SourceLocation


@dataclass(frozen=True, slots=True)
class Logical(Expr):
    """Short-circuit `&&` / `||`."""

    op: str  # "&&" | "||"
    left: Expr
    right: Expr
    loc: SourceLocation


@dataclass(frozen=True, slots=True)
class RegexMatch(Expr):
    """`s =~ "re"` / `s !~ "re"`; the pattern is always a literal."""

    op: str  # "=~" | "!~"
    left: Expr
    pattern: StringLiteral
    loc: SourceLocation


@dataclass(frozen=True, slots=True)
class Unary(Expr):
    """Prefix `- + ! ~`."""

    op: str  # "-" | "+" | "!" | "~"
    operand: Expr
    loc: SourceLocation


@dataclass(frozen=True, slots=True)
class IncDec(Expr):
    """`++x` / `--x` (prefix=True) or `x++` / `x--`; the operand is lvalue-checked later."""

    op: str  # "++" | "--"
    prefix: bool
    operand: Expr
    loc: SourceLocation


@dataclass(frozen=True, slots=True)
class Assign(Expr):
    """`= += -= *= /= %= <<= >>= &= |= ^= .=` and the aggregate `<<<` (right-associative)."""

    op: str
    target: Expr
    value: Expr
    loc: SourceLocation


@dataclass(frozen=True, slots=True)
class Ternary(Expr):
    cond: Expr
    then: Expr
    else_: Expr
    loc: SourceLocation


@dataclass(frozen=True, slots=True)
class ArrayIn(Expr):
    """`k in a` / `[k1, k2] in a`; a key may be a `Wildcard`."""

    keys: tuple[Expr, ...]
    array: Symbol | HistOp
    loc: SourceLocation


@dataclass(frozen=True, slots=True)
class Defined(Expr):
    """`@defined(expr)`."""

    operand: Expr
    loc: SourceLocation


@dataclass(frozen=True, slots=True)
class Entry(Expr):
    """`@entry(expr)`: the value at function entry, in a `.return` probe."""

    operand: Expr
    loc: SourceLocation


# Suffixes of a target (context) value: `->field`, `[expr]`, and a trailing
# `$`/`$$` pretty-print request.


@dataclass(frozen=True, slots=True)
class Member:
    name: str
    loc: SourceLocation


@dataclass(frozen=True, slots=True)
class Subscript:
    index: Expr
    loc: SourceLocation


@dataclass(frozen=True, slots=True)
class PrettyPrint:
    dollars: str  # "$" or "$$"
    loc: SourceLocation


TargetComponent = Member | Subscript | PrettyPrint


@dataclass(frozen=True, slots=True)
class TargetSymbol(Expr):
    """A context variable: `$arg1`, `$name`, `$$name`, `$$provider`, `$$parms`,
    `$$vars`, `$return`, `$$return` ... (the name keeps its `$`s), with suffixes.

    `$var$` is name "$var" with a trailing PrettyPrint("$").
    """

    name: str
    components: tuple[TargetComponent, ...]
    addressof: bool  # `&$var->field`
    loc: SourceLocation


@dataclass(frozen=True, slots=True)
class Cast(Expr):
    """`@cast(ptr, "type"[, "module"])` with suffixes."""

    operand: Expr
    type_name: str
    module: str | None
    components: tuple[TargetComponent, ...]
    addressof: bool
    loc: SourceLocation


@dataclass(frozen=True, slots=True)
class AtVar(Expr):
    """`@var("name[@cu]"[, "module"])` with suffixes."""

    name: str
    module: str | None
    components: tuple[TargetComponent, ...]
    addressof: bool
    loc: SourceLocation


@dataclass(frozen=True, slots=True)
class AutoCast(Expr):
    """Suffixes on an ordinary value (`f(x)->y`, `@entry($p)->f`, `&x`), typed later."""

    operand: Expr
    components: tuple[TargetComponent, ...]
    addressof: bool
    loc: SourceLocation


# -- statements ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Block(Stmt):
    statements: tuple[Stmt, ...]  # stray `;` are dropped
    loc: SourceLocation


@dataclass(frozen=True, slots=True)
class Embedded(Expr):
    """Guru mode (`-g`) embedded C `%{ ... %}`: a top-level block copied into the
    generated C, the body of a function, or (in an expression) a long value."""

    code: str
    loc: SourceLocation


@dataclass(frozen=True, slots=True)
class Empty(Stmt):
    """A lone `;` where a statement is required: `if (x) ;`, `while (f()) ;`."""

    loc: SourceLocation


@dataclass(frozen=True, slots=True)
class ExprStatement(Stmt):
    expr: Expr
    loc: SourceLocation


@dataclass(frozen=True, slots=True)
class If(Stmt):
    cond: Expr
    then: Stmt
    else_: Stmt | None
    loc: SourceLocation


@dataclass(frozen=True, slots=True)
class While(Stmt):
    cond: Expr
    body: Stmt
    loc: SourceLocation


@dataclass(frozen=True, slots=True)
class For(Stmt):
    init: Expr | None
    cond: Expr | None  # None: always true
    step: Expr | None
    body: Stmt
    loc: SourceLocation


@dataclass(frozen=True, slots=True)
class SortSpec:
    """The `+`/`-` of a foreach.

    column 0 sorts by value (marker after the array, or on the value
    variable); column N >= 1 by the N-th key.  `aggregate` is the @op of
    `foreach (k in s @sum-)`, sorting a statistics array by that op.
    """

    column: int
    descending: bool
    aggregate: str | None  # "count" | "sum" | "min" | "max" | "avg" | "variance"
    loc: SourceLocation


@dataclass(frozen=True, slots=True)
class Foreach(Stmt):
    """`foreach ([v =] [k1, k2] in base[slice] [@op][+-] [limit N]) body`."""

    keys: tuple[Symbol, ...]
    value: Symbol | None
    array: Symbol | HistOp
    slice: tuple[Expr, ...] | None  # `in a[*, 5]`; keys may be Wildcard
    sort: SortSpec | None
    limit: Expr | None
    body: Stmt
    loc: SourceLocation


@dataclass(frozen=True, slots=True)
class Delete(Stmt):
    """`delete a[k]`, `delete a`, `delete x` (any expression; checked later)."""

    target: Expr
    loc: SourceLocation


@dataclass(frozen=True, slots=True)
class Next(Stmt):
    loc: SourceLocation


@dataclass(frozen=True, slots=True)
class Break(Stmt):
    loc: SourceLocation


@dataclass(frozen=True, slots=True)
class Continue(Stmt):
    loc: SourceLocation


@dataclass(frozen=True, slots=True)
class Return(Stmt):
    """Only in functions (the parser enforces it)."""

    value: Expr | None
    loc: SourceLocation


@dataclass(frozen=True, slots=True)
class Try(Stmt):
    body: Block
    catch_var: Symbol | None  # `catch (msg)`
    handler: Block
    loc: SourceLocation


# -- declarations ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Component:
    """One dotted part of a probe point: `name` or `name(arg)`; name may contain `*`."""

    name: str
    arg: str | int | None
    loc: SourceLocation


@dataclass(frozen=True, slots=True)
class ProbePoint:
    components: tuple[Component, ...]
    optional: bool  # `?` (also set by `!`)
    sufficient: bool  # `!`
    condition: Expr | None  # `probe foo if (expr) { }`
    loc: SourceLocation


@dataclass(frozen=True, slots=True)
class Probe:
    """`probe a, b { }`; brace groups `p.{x, y}` are already expanded into `points`."""

    points: tuple[ProbePoint, ...]
    body: Block
    loc: SourceLocation


@dataclass(frozen=True, slots=True)
class Param:
    name: str
    type: str | None  # "long" | "string"; None: inferred
    loc: SourceLocation


@dataclass(frozen=True, slots=True)
class Function:
    name: str
    params: tuple[Param, ...]
    return_type: str | None  # "long" | "string"; None: inferred
    body: Block | Embedded   # Embedded: a guru-mode C function
    private: bool
    priority: int | None  # `function f() : 2 { }`: tapset override priority
    loc: SourceLocation


@dataclass(frozen=True, slots=True)
class Global:
    name: str
    init: NumberLiteral | StringLiteral | None
    size: int | None  # `global a[100]`
    wrap: bool  # `global a%`: the array drops old entries instead of overflowing
    private: bool
    loc: SourceLocation


@dataclass(frozen=True, slots=True)
class Script:
    """Each tuple is in source order (begin probes run in that order)."""

    probes: tuple[Probe, ...]
    functions: tuple[Function, ...]
    globals: tuple[Global, ...]
    loc: SourceLocation
    embedded: tuple[Embedded, ...] = ()   # top-level %{ %} (guru mode)
    guru: bool = False                    # parsed with -g: set_user_* are allowed
    legacy_p: bool = False                # --compatible < 1.3: stap's old %p (format.py)


def dump(node: object) -> str:
    """A compact one-line rendering without locations, for tests and debugging.

    `BinaryOp('+', Symbol('a'), NumberLiteral(1))`.
    """
    if isinstance(node, tuple):
        return "(" + ", ".join(dump(n) for n in node) + ("," if len(node) == 1 else "") + ")"
    if isinstance(node, str):
        return repr(node)
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        parts = [dump(getattr(node, f.name)) for f in dataclasses.fields(node)
                 if f.name != "loc"]
        return f"{type(node).__name__}({', '.join(parts)})"
    return repr(node)
