"""FAST handlers: probes a trampoline may run without saving the vector registers.

Decided on the script, from the analysis: a probe is FAST when its body (blocks
aside) is nothing but statement-level updates of counter-only scalars
(`GlobalPlan.counters`) by a constant -- `x++`, `x--`, `x += 3`, `x -= 3` -- and it
reads no entry value.  Such a handler compiles to statement counts and
pd_counter_add calls only: no call, no local, no string, so gcc compiles it
`general-regs-only` (PD_FAST_FN) with nothing that can reach libc.  Anything else
keeps the ordinary path.
"""

from __future__ import annotations

from ..script import ast
from .analysis import GlobalPlan, counter_update


def is_fast(body: ast.Stmt, plan: GlobalPlan) -> bool:
    """Whether a probe with this body is FAST (it must do something)."""
    updates = list(_updates(body))
    return bool(updates) and all(u is not None and _constant_update(u, plan) for u in updates)


def _updates(s: ast.Stmt) -> list[ast.Expr | None]:
    """The expression of each statement of `s` (None: a statement that is no
    expression statement)."""
    if isinstance(s, ast.Block):
        return [u for st in s.statements for u in _updates(st)]
    if isinstance(s, ast.Empty):
        return []
    return [s.expr if isinstance(s, ast.ExprStatement) else None]


def _constant_update(e: ast.Expr, plan: GlobalPlan) -> bool:
    target = counter_update(e)
    if target is None or target.name not in plan.counters:
        return False
    if isinstance(e, ast.IncDec):
        return True
    # INT64_MIN has no INT64_C spelling: the emitter writes it as a macro
    return isinstance(e, ast.Assign) and isinstance(e.value, ast.NumberLiteral) and \
        e.value.value != -(1 << 63)


def where_table(pi: int, wheres: list[str]) -> list[str]:
    """The table of a FAST handler's statements' `where` strings (`probe_<pi>_where`,
    named by its pd_probes row): each statement compares its number with the MAXACTION
    budget (no loop: the numbers are static) and only a failing one stores its `where`,
    found through c->probe."""
    return [f"static const char *const probe_{pi}_where[] = {{{', '.join(wheres) or 'NULL'}}};"]
