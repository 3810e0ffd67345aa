"""Walks over a parsed script that more than one pass makes: every node below one,
the `$name` parameters, what a `.return` probe needs from its entry."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator

from . import ast


def iter_nodes(node: object, prune: tuple[type, ...] = ()) -> Iterator[object]:
    """Every AST node below `node` (dataclass fields, tuples), depth first; not
    below a node of a `prune` type.  An explicit stack, not nested generators: the
    passes walk a script many times, and a generator per level made the walks of a
    script of thousands of probes most of its translation."""
    stop = (type, *prune)
    stack = [node]
    pop, push = stack.pop, stack.extend
    while stack:
        node = pop()
        yield node
        if isinstance(node, tuple):
            push(reversed(node))
        elif not isinstance(node, stop):
            names = _FIELDS.get(type(node))
            if names is None:
                names = child_fields(type(node))
            if names:
                push([getattr(node, n) for n in reversed(names)])


_FIELDS: dict[type, tuple[str, ...]] = {}


def child_fields(cls: type) -> tuple[str, ...]:
    """The fields of a dataclass node type that may hold nodes (not `loc`); () for
    another type.  Once per type: the translator walks a script many times, and
    dataclasses.fields() per node was most of a 5,000-probe script's translation."""
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = tuple(f.name for f in dataclasses.fields(cls)
                                     if f.name != "loc") if dataclasses.is_dataclass(cls) else ()
    return names


def is_param_name(name: str) -> bool:
    """`$fd`: a DWARF parameter (not `$argN`, `$return` or a `$$` variable)."""
    return re.fullmatch(r"\$[A-Za-z_]\w*", name) is not None and name != "$return" and \
        re.fullmatch(r"\$arg\d+", name) is None


def entry_values(probe: ast.Probe, returns_only: bool) -> list[ast.Expr]:
    """What a .return probe needs from its entry (entry.py): each `@entry(x)` and,
    as in stap, each `$param` outside one (its value at the entry) when every site of
    the probe is a function's return (`returns_only`)."""
    return [n for n in iter_nodes(probe.body, (ast.Entry, ast.Defined))
            if isinstance(n, ast.Entry) or (returns_only and isinstance(n, ast.TargetSymbol)
                                            and is_param_name(n.name))]


def reads_return_value(probe: ast.Probe) -> bool:
    """Whether the probe reads `$return` (or `$$return`)."""
    return any(isinstance(n, ast.TargetSymbol) and n.name in ("$return", "$$return")
               for n in iter_nodes(probe.body))
