"""stap's elision of unused functions (pass 2, off with -u): a function no probe reaches
through calls is dropped before types are inferred, so its embedded C is never compiled
and a parameter nothing calls it with needs no type.  Before that, a statement that only
calls a /* pure */ embedded C function (with literal arguments) is dropped, as stap drops
a side-effect-free statement: the function may then go too."""

from __future__ import annotations

import dataclasses
from typing import Any

from ..guru import embedded_is_pure
from . import ast
from .walk import iter_nodes


def elide_pure_calls(script: ast.Script) -> ast.Script:
    pure = {f.name for f in script.functions
            if isinstance(f.body, ast.Embedded) and embedded_is_pure(f.body.code)}
    if not pure:
        return script

    def no_effects(e: ast.Expr) -> bool:
        return isinstance(e, ast.NumberLiteral | ast.StringLiteral) or \
            isinstance(e, ast.Call) and e.name in pure and all(no_effects(a) for a in e.args)

    def rewrite(node: Any) -> Any:
        if isinstance(node, tuple):
            items = tuple(rewrite(x) for x in node)
            return node if all(a is b for a, b in zip(items, node, strict=True)) else items
        if isinstance(node, ast.ExprStatement) and isinstance(node.expr, ast.Call) and \
                no_effects(node.expr):
            return ast.Empty(node.loc)
        if not isinstance(node, ast.Stmt | ast.Probe | ast.Function):
            return node
        node_: Any = node   # every statement class is a dataclass
        changed = {f.name: new for f in dataclasses.fields(node_) if f.name != "loc"
                   for old in [getattr(node, f.name)] for new in [rewrite(old)]
                   if new is not old}
        return dataclasses.replace(node_, **changed) if changed else node

    return dataclasses.replace(script, probes=rewrite(script.probes),
                               functions=rewrite(script.functions))


def reachable_functions(script: ast.Script) -> set[str]:
    funcs = {f.name: f for f in script.functions}
    seen: set[str] = set()
    todo: list[object] = [script.probes]
    while todo:
        for n in iter_nodes(todo.pop()):
            if isinstance(n, ast.Call) and n.name in funcs and n.name not in seen:
                seen.add(n.name)
                todo.append(funcs[n.name].body)
    return seen


def elide_unused_functions(script: ast.Script) -> ast.Script:
    used = reachable_functions(script)
    if len(used) == len(script.functions):
        return script
    return dataclasses.replace(script, functions=tuple(f for f in script.functions
                                                      if f.name in used))
