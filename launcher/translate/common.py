"""What every sub-pass of translate shares: the type names, errors at a node, C
string literals and the `where` of a statement."""

from __future__ import annotations

from ..errors import ScriptError, SourceLocation
from ..script import ast

LONG, STRING, STAT = "long", "string", "stat"


def _err(msg: str, node: object, hint: str | None = None) -> ScriptError:
    """A ScriptError at `node` (any AST object with a `loc`)."""
    return ScriptError(msg, getattr(node, "loc", None), hint)


def _escape(b: int) -> str:
    ch = chr(b)
    if ch in '"\\':
        return "\\" + ch
    if 32 <= b < 127 and ch != "?":  # '?' escaped: no trigraphs
        return ch
    return f"\\{b:03o}"


_ESCAPED = [_escape(b) for b in range(256)]   # one lookup a byte: scripts name thousands


def _c_string(text: str | bytes) -> str:
    data = text if isinstance(text, bytes) else text.encode("utf-8", "surrogateescape")
    return '"' + "".join(map(_ESCAPED.__getitem__, data)) + '"'


def _where(node: object) -> str:
    loc: SourceLocation = getattr(node, "loc")  # noqa: B009 - every AST node has one
    return _c_string(f"{_describe(node)} at {loc.file}:{loc.line}:{loc.column}")


KEYWORDS = {ast.While: "while", ast.For: "for", ast.Foreach: "foreach", ast.If: "if",
            ast.Delete: "delete", ast.Return: "return", ast.Next: "next", ast.Try: "try",
            ast.Break: "break", ast.Continue: "continue"}


def _describe(node: object) -> str:
    """The token stap names in `near ...`: the node's defining token."""
    if isinstance(node, ast.BinaryOp | ast.Assign | ast.Unary | ast.Comparison |
                  ast.Logical | ast.IncDec):
        return f"operator '{node.op}'"
    if isinstance(node, ast.Ternary):
        return "operator '?'"
    if isinstance(node, ast.Call) and node.name.startswith("@"):
        return f"operator '{node.name}'"      # @uderef, @uregister: stap's operator tokens
    if isinstance(node, ast.Symbol | ast.Call | ast.Function | ast.TargetSymbol):
        return f"identifier '{node.name}'"
    if isinstance(node, ast.Cast):
        return "operator '@cast'"
    if isinstance(node, ast.AtVar):
        return "operator '@var'"
    if isinstance(node, ast.AutoCast):   # its token: the '&' or the first suffix
        first = node.components[0] if node.components else None
        return "operator '&'" if node.addressof else \
            "operator '->'" if isinstance(first, ast.Member) else "operator '['"
    if isinstance(node, ast.Index) and isinstance(node.base, ast.Symbol):
        return f"identifier '{node.base.name}'"
    if isinstance(node, ast.NumberLiteral):
        return f"number '{node.value}'"
    if isinstance(node, ast.StringLiteral):
        return "string"
    if type(node) in KEYWORDS:
        return f"keyword '{KEYWORDS[type(node)]}'"
    return "statement"

