"""The warnings of stap's pass 2 about what a script reads, writes and leaves unused,
in stap's words (its elaborate.cxx, first round of the optimisation loop: later rounds'
warnings stap prints only at -vvv, and with -u it prints none of these):

    never-assigned local variable 'x' (similar: a, b)   a local read, never written
    never-assigned global variable 'g' (similar: ...)   a global read, never written,
                                                        with no initial value (nor -G)
    Eliding unused variable 'g'                         a global nothing reads or writes
    Eliding assignment to 'x'                           an assignment to a local never read
    Probe 'begin' has been elided                       a probe whose body is empty: it is
                                                        not armed (stap names the first
                                                        component of each probe point)

(optimize.py gives the others of the optimisation: side-effect-free expressions and
functions, a collapsed @defined.)

"(similar: ...)" names the five other variables of the scope (locals, parameters,
globals the script uses) nearest by edit distance, as stap's levenshtein_suggest.
Only the user's script is looked at: pydyn's own tapset code warns about nothing.
A message already given is not repeated (stap's duplicate elimination); how many were
held back is one last line, as stap's "Number of similar warning messages suppressed".
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, fields, is_dataclass, replace
from typing import Any

from ..errors import ScriptWarning
from ..guru import pragma_globals
from ..script import ast
from ..script.walk import iter_nodes


@dataclass
class _Use:
    """How one scope (a probe or a function) uses each name."""

    read: set[str] = field(default_factory=set)
    written: set[str] = field(default_factory=set)
    first: dict[str, ast.Symbol] = field(default_factory=dict)   # stap's declaring token
    assigns: list[ast.Assign] = field(default_factory=list)      # `x op= ...` to a name


def _uses(body: object, params: Iterable[str] = ()) -> _Use:
    use = _Use(written=set(params))

    def name(sym: ast.Symbol, read: bool, write: bool) -> None:
        use.first.setdefault(sym.name, sym)
        if read:
            use.read.add(sym.name)
        if write:
            use.written.add(sym.name)

    def target(node: ast.Expr, read: bool) -> None:
        """An lvalue: a name is written (and read by `+=`, `++`); an array element
        writes its array and reads its indexes."""
        if isinstance(node, ast.Symbol):
            name(node, read, True)
        elif isinstance(node, ast.Index) and isinstance(node.base, ast.Symbol):
            name(node.base, read, True)
            walk(node.indexes)
        else:
            walk(node)

    def walk(node: object) -> None:
        if isinstance(node, ast.Symbol):
            name(node, True, False)
        elif isinstance(node, ast.Assign):
            if isinstance(node.target, ast.Symbol):
                use.assigns.append(node)
            target(node.target, node.op not in ("=", "<<<"))
            walk(node.value)
        elif isinstance(node, ast.IncDec):
            target(node.operand, True)
        elif isinstance(node, ast.Delete):
            target(node.target, False)
        elif isinstance(node, ast.Foreach):
            for sym in (*node.keys, *((node.value,) if node.value else ())):
                name(sym, False, True)
            walk((node.array, node.slice, node.sort, node.limit, node.body))
        elif isinstance(node, ast.Try):
            if node.catch_var is not None:
                name(node.catch_var, False, True)
            walk((node.body, node.handler))
        elif isinstance(node, tuple):
            for item in node:
                walk(item)
        elif is_dataclass(node) and not isinstance(node, type):
            for f in fields(node):
                if f.name != "loc":
                    walk(getattr(node, f.name))

    walk(body)
    return use


def _similar(name: str, candidates: Iterable[str]) -> str:
    """stap's levenshtein_suggest(name, candidates, 5): the five nearest, nearest first,
    ties in name order; as ` (similar: a, b)`, or nothing."""
    def distance(a: str, b: str) -> int:
        row = list(range(len(b) + 1))
        for i, ca in enumerate(a, 1):
            prev, row[0] = row[0], i
            for j, cb in enumerate(b, 1):
                prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
        return row[-1]

    best = sorted((distance(name, c), c) for c in set(candidates) if c and c != name)[:5]
    return f" (similar: {', '.join(c for _, c in best)})" if best else ""


def _ident(sym: ast.Symbol) -> str:
    return f"identifier '{sym.name}'"


def _scope_warnings(use: _Use, globals_used: set[str], params: Iterable[str],
                    is_global: set[str]) -> Iterator[ScriptWarning]:
    locals_ = [n for n in use.first if n not in is_global]
    for n in locals_:
        if n in use.read and n not in use.written:
            yield ScriptWarning(
                f"never-assigned local variable '{n}'"
                f"{_similar(n, [*params, *locals_, *globals_used])}",
                _ident(use.first[n]), use.first[n].loc)


def _user_scopes(script: ast.Script) -> list[tuple[_Use, tuple[str, ...], set[str]]]:
    """(uses, parameters, the globals it sees) of each of the user's probes, then each
    of the user's functions by name."""
    user = script.loc.file
    funcs = sorted((f for f in script.functions
                    if f.loc.file == user and not isinstance(f.body, ast.Embedded)),
                   key=lambda f: f.name)
    declared = {g.name for g in script.globals}
    # A parameter is the function's own, even when a global has its name.
    scopes: list[tuple[_Use, tuple[str, ...], set[str]]] = [
        (_uses(p.body), (), declared) for p in script.probes if p.loc.file == user]
    scopes += [(_uses(f.body, params), params, declared - set(params))
               for f in funcs for params in [tuple(p.name for p in f.params)]]
    return scopes


def _elided(use: _Use, is_global: set[str]) -> Iterator[ast.Assign]:
    for a in use.assigns:
        assert isinstance(a.target, ast.Symbol)
        if a.target.name not in is_global and a.target.name not in use.read:
            yield a


def dead_assignments(script: ast.Script) -> tuple[ast.Script, list[ScriptWarning]]:
    """stap's opt3: `x = e` (or `x <<< e`) to a local nothing reads is `e` alone, so
    such a local takes no type; with stap's "Eliding assignment" warnings, in the
    order of the scopes."""
    # a local `delete`d is read by it, as stap counts a delete
    deleted = {n.target.name for n in iter_nodes((script.probes, script.functions))
               if isinstance(n, ast.Delete) and isinstance(n.target, ast.Symbol)}
    gone: list[ast.Assign] = [
        a for use, _, is_global in _user_scopes(script) for a in _elided(use, is_global)
        if a.op in ("=", "<<<") and isinstance(a.target, ast.Symbol)
        and a.target.name not in deleted]
    if not gone:
        return script, []
    ids = {id(a) for a in gone}

    def rewrite(node: Any) -> Any:
        if isinstance(node, tuple):
            items = tuple(rewrite(x) for x in node)
            return node if all(a is b for a, b in zip(items, node, strict=True)) else items
        if id(node) in ids:
            return rewrite(node.value)
        if not is_dataclass(node) or isinstance(node, type):
            return node
        changed = {f.name: new for f in fields(node) if f.name != "loc"
                   for old in [getattr(node, f.name)] for new in [rewrite(old)]
                   if new is not old}
        return replace(node, **changed) if changed else node

    warnings = [ScriptWarning(f"Eliding assignment to '{a.target.name}'",
                              f"operator '{a.op}'", a.loc)
                for a in gone if isinstance(a.target, ast.Symbol)]
    return replace(script, probes=rewrite(script.probes),
                   functions=rewrite(script.functions)), warnings


def _empty(stmt: ast.Stmt) -> bool:
    return isinstance(stmt, ast.Empty) or \
        isinstance(stmt, ast.Block) and all(_empty(s) for s in stmt.statements)


def empty_probes(script: ast.Script) -> list[int]:
    """The probes stap elides after its optimisation: a body of nothing but empty
    blocks and `;` (what pydyn's own elisions leave of a call to a pure function
    counts).  A probe point's condition keeps its probe, as in stap, where the
    condition is a statement of the body."""
    return [i for i, p in enumerate(script.probes)
            if _empty(p.body) and all(pt.condition is None for pt in p.points)]


def elision_warnings(probe: ast.Probe) -> list[ScriptWarning]:
    """stap's `Probe 'NAME' has been elided`, one for each probe point (NAME: its first
    component, `process` for process("x").mark("m")) at the probe's `probe` keyword, as
    stap points its derived probes at the probe's first token."""
    return [ScriptWarning(f"Probe '{pt.components[0].name}' has been elided", "keyword",
                          probe.loc) for pt in probe.points]


def never_assigned(script: ast.Script) -> list[ScriptWarning]:
    """stap's opt2 warnings: each probe's and then each function's (by name)
    never-assigned locals, then the globals never used (elided) or never assigned."""
    declared = {g.name for g in script.globals}
    scopes = _user_scopes(script)
    # Every reachable function's uses count for the globals, the tapset's too.
    user = script.loc.file
    all_uses = [u for u, _, _ in scopes] + [
        _uses(f.body) for f in script.functions
        if f.loc.file != user and not isinstance(f.body, ast.Embedded)]
    g_read = {n for u in all_uses for n in u.read if n in declared}
    g_written = {n for u in all_uses for n in u.written if n in declared}
    globals_used = g_read | g_written

    pragmas = {kind: {name for n in iter_nodes((script.probes, script.functions))
                      if isinstance(n, ast.Embedded) for name in pragma_globals(n.code, kind)}
               for kind in ("read", "write")}
    out: list[ScriptWarning] = []
    for use, params, is_global in scopes:
        out.extend(_scope_warnings(use, globals_used, params, is_global))
    for g in script.globals:
        if g.loc.file == user and g.init is None and \
                g.name not in globals_used | pragmas["read"] | pragmas["write"]:
            # types drop it (a global elided later, by the optimisation, goes silently)
            out.append(ScriptWarning(f"Eliding unused variable '{g.name}'",
                                     f"identifier '{g.name}'", g.loc))
        elif g.loc.file == user and g.init is None and \
                g.name in g_read - g_written - pragmas["write"]:
            out.append(ScriptWarning(
                f"never-assigned global variable '{g.name}'{_similar(g.name, globals_used)}",
                f"identifier '{g.name}'", g.loc))
    return out


def deduplicate(warnings: Iterable[ScriptWarning]) -> list[ScriptWarning | str]:
    """A message already given is not repeated (stap's duplicate elimination); how
    many were held back is one last line."""
    seen: set[str] = set()
    kept: list[ScriptWarning | str] = []
    out = list(warnings)
    for w in out:
        if w.message not in seen:
            seen.add(w.message)
            kept.append(w)
    if len(kept) < len(out):
        kept.append(f"Number of similar warning messages suppressed: {len(out) - len(kept)}.")
    return kept
