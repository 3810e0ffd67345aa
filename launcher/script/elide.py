"""stap's elision of unused functions (pass 2, off with -u): a function no probe reaches
through calls is dropped before types are inferred, so its embedded C is never compiled
and a parameter nothing calls it with needs no type.  Done once the script is parsed,
and again in each round of the optimisation (translate/optimize.py), as the calls that
statements without effects made go."""

from __future__ import annotations

import dataclasses

from . import ast
from .walk import iter_nodes


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
