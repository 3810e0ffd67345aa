"""Pass 3b, analysis: which globals can leave the globals lock, as ONE `GlobalPlan`.

- counters: long scalars only updated by statement-level `x++`/`x += v`... (per-thread
  counter blocks, runtime/pd_counter.c);
- pstats: scalar statistics never deleted (per-thread slots, runtime/pd_pstat.c);
- kstats: keyed statistics, and kcounts, arrays used only as keyed counters (per-thread
  tables, runtime/pd_kstat.c, kstat.py);
- variance: statistics whose @variance is read (they keep Welford's state).
"""

from __future__ import annotations

from typing import NamedTuple

from ..guru import pragma_globals
from ..script import ast
from ..script.walk import iter_nodes
from .common import LONG, STAT
from .types import Types


class GlobalPlan(NamedTuple):
    counters: frozenset[str]   # counter-only long scalars
    pstats: frozenset[str]     # scalar statistics with per-thread slots
    kstats: frozenset[str]     # arrays with per-thread tables (keyed statistics and counters)
    kcounts: frozenset[str]    # the kstats that are keyed counters
    variance: frozenset[str]   # statistics whose @variance is read
    variance_shift: dict[str, int]   # @variance(s, N): N (stap keeps one shift a statistic)


def analyse(script: ast.Script, types: Types) -> GlobalPlan:
    """Pass 3b: the plan of the script's globals."""
    # guru C's STAP_GLOBAL_GET/SET (emit.global_macros) read and write the plain,
    # locked form: a global its pragmas name is none of the per-thread ones
    guru = {name for n in iter_nodes((script.probes, script.functions))
            if isinstance(n, ast.Embedded)
            for kind in ("read", "write") for name in pragma_globals(n.code, kind)}
    kcounts = _find_kcount_globals(script, types) - guru
    # per-thread slots merge their variances around an unshifted average: a statistic
    # read with @variance(s, N > 0) stays in the locked one
    shifted = set(_variance_shifts(script)) | guru
    return GlobalPlan(
        frozenset(_find_atomic_globals(script, types) - guru),
        frozenset(_find_pstat_globals(script, types) - shifted),
        frozenset((_find_kstat_globals(script, types) | kcounts) - shifted),
        frozenset(kcounts),
        frozenset(_stat_name(n.operand) for n in iter_nodes((script.probes, script.functions))
                  if isinstance(n, ast.StatOp) and n.op == "variance"),
        _variance_shifts(script))


def _variance_shifts(script: ast.Script) -> dict[str, int]:
    return {_stat_name(n.operand): n.params[0]
            for n in iter_nodes((script.probes, script.functions))
            if isinstance(n, ast.StatOp) and n.op == "variance" and n.params and n.params[0]}


def _stat_name(e: ast.Expr) -> str:
    if isinstance(e, ast.Index) and isinstance(e.base, ast.Symbol):
        return e.base.name
    return e.name if isinstance(e, ast.Symbol) else ""


def update_target(e: object) -> ast.Expr | None:
    """The lvalue of `x++`, `x--`, `x += v`, `x -= v` (prefix or not), else None."""
    if isinstance(e, ast.IncDec):
        return e.operand
    if isinstance(e, ast.Assign) and e.op in ("+=", "-="):
        return e.target
    return None


def counter_update(e: object) -> ast.Symbol | None:
    """The global target of `x++`, `x--`, `x += v`, `x -= v`, else None."""
    t = update_target(e)
    return t if isinstance(t, ast.Symbol) else None


def kcount_update(e: object) -> ast.Index | None:
    """The array element of `c[k]++`, `c[k] -= v`, ..., else None."""
    t = update_target(e)
    return t if isinstance(t, ast.Index) and isinstance(t.base, ast.Symbol) else None


def _find_atomic_globals(script: ast.Script, types: Types) -> set[str]:
    """Long scalars whose every write is a statement-level counter update.

    Those are updated with one atomic add and read with an atomic load, so
    probes that touch nothing else run without the globals lock (a counting
    probe then costs a few ns, not a lock round trip)."""
    candidates = {n for n, v in types.globals.items() if v.array is None and v.type == LONG}
    statement_level: set[int] = set()
    for node in iter_nodes((script.probes, script.functions)):
        if isinstance(node, ast.ExprStatement) and counter_update(node.expr) is not None:
            statement_level.add(id(node.expr))
    for node in iter_nodes((script.probes, script.functions)):
        target = None
        if isinstance(node, ast.Assign | ast.IncDec):
            target = node.target if isinstance(node, ast.Assign) else node.operand
        elif isinstance(node, ast.Delete):
            target = node.target
        if not isinstance(target, ast.Symbol) or target.name not in candidates:
            continue
        if id(node) not in statement_level:
            candidates.discard(target.name)
    # A local of the same name shadows the global somewhere: keep it simple.
    for scope in types.scopes():
        candidates -= set(scope.locals)
    return candidates


def _find_pstat_globals(script: ast.Script, types: Types) -> set[str]:
    """Scalar statistics never deleted: their `<<<` goes to per-thread slots.

    A delete would have to clear slots other threads are writing, so a deleted
    statistic keeps the one locked struct pd_stat."""
    stats = {n for n, v in types.globals.items() if v.array is None and v.type == STAT}
    for node in iter_nodes((script.probes, script.functions)):
        if isinstance(node, ast.Delete) and isinstance(node.target, ast.Symbol):
            stats.discard(node.target.name)
    for scope in types.scopes():
        stats -= set(scope.locals)
    return stats


def _find_kstat_globals(script: ast.Script, types: Types) -> set[str]:
    """Statistic arrays whose `<<<` goes to per-thread tables (kstat.py): all of them but
    `global s%` (dropping the oldest entry needs one table) and names a local shadows."""
    found = {n for n, v in types.globals.items() if v.array is not None and v.array.value == STAT
             and not (v.decl is not None and v.decl.wrap)}
    for scope in types.scopes():
        found -= set(scope.locals)
    return found


def _find_kcount_globals(script: ast.Script, types: Types) -> set[str]:
    """Long arrays used only as keyed counters: their adds go to per-thread tables.

    Conservative: every write is a statement-level `c[K]++`/`--`/`+= E`/`-= E` or a
    `delete`, every other mention is `c[K]`, `[K] in c` or `foreach (... in c)`.  An
    assignment, an update used as a value (`x = c[k]++` needs the old value, which
    per-thread sums cannot give), any other use of the name, `global c%` or a local of
    the same name keep the locked map."""
    found = {n for n, v in types.globals.items() if v.array is not None
             and (v.array.value or LONG) == LONG and not (v.decl is not None and v.decl.wrap)}
    nodes = list(iter_nodes((script.probes, script.functions)))
    updates = {id(node.expr) for node in nodes if isinstance(node, ast.ExprStatement)
               and kcount_update(node.expr) is not None}
    allowed: set[int] = set()   # the Symbol nodes that name an array where that is fine
    for node in nodes:
        if isinstance(node, ast.Assign | ast.IncDec):
            target = node.target if isinstance(node, ast.Assign) else node.operand
            base = target.base if isinstance(target, ast.Index) else target
            if id(node) not in updates and isinstance(base, ast.Symbol):
                found.discard(base.name)
        if isinstance(node, ast.Index):   # (an update's target is one too)
            allowed.add(id(node.base))
        elif isinstance(node, ast.ArrayIn | ast.Foreach):
            allowed.add(id(node.array))
        elif isinstance(node, ast.Delete):
            allowed.add(id(node.target.base if isinstance(node.target, ast.Index)
                           else node.target))
    for node in nodes:
        if isinstance(node, ast.Symbol) and id(node) not in allowed:
            found.discard(node.name)
    for scope in types.scopes():
        found -= set(scope.locals)
    return found
