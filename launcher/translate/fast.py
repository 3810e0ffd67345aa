"""FAST handlers: probes a trampoline may run without saving the vector registers.

Decided on the script, from the analysis: a probe is FAST when its body (blocks
aside) is nothing but statement-level updates whose targets leave the globals lock
(`GlobalPlan`) and whose values are FAST values:

- `x++`, `x--`, `x += v`, `x -= v` on a counter-only scalar (`GlobalPlan.counters`);
- `s <<< v` on a statistic with per-thread slots (`GlobalPlan.pstats`);
- `c[k...]++`, `c[k...] += v` on a keyed counter (`kcounts`), `s[k...] <<< v` on a keyed
  statistic (`kstats`), every key a FAST value;

A FAST value is an integer built from constants, `$argN`, plain DWARF parameters
(`$fd`: no member, subscript, `&` or pretty-printing), `$return`, `@entry(...)` values
and the clocks (`gettimeofday_ns()`...) with the operators that compile to plain C (no
`/` or `%`: their error path formats a message).  A `.return` probe's hidden entry
handler (launcher/entry.py) is FAST when every `@entry` operand is a FAST value.
Such a handler compiles to statement counts, pd_counter_add and the pd_fast_* helpers
(runtime/pd_fast.h inline, runtime/pd_fastval.c; what may fault, claim or call libc
they do with the vector registers saved): no string, no libc call of its own, so gcc compiles it
`general-regs-only` (PD_FAST_FN).  A handler that reads a context value (or pops
`@entry` values) is PD_PROBE_REGS: its trampoline keeps the register context for it.
A handler whose one register read is the stack pointer -- a `.return` probe's `@entry`
pop, the hidden entry handler's push, with no other context value -- is also
PD_PROBE_SP: a stub may pass it sp alone instead of the whole context.
Anything else keeps the ordinary path.
"""

from __future__ import annotations

from collections.abc import Callable

from ..script import ast
from .analysis import GlobalPlan, counter_update, kcount_update

# operators whose C (emit.py) is a plain expression of general registers
_BINARY = frozenset(("+", "-", "*", "<<", ">>", ">>>", "&", "|", "^"))
_UNARY = frozenset(("-", "+", "!", "~"))
# built-ins of no argument whose C a FAST handler has (emit.py: pd_fast_gettime_ns, rdtsc)
FAST_CALLS = frozenset(("gettimeofday_ns", "gettimeofday_us", "gettimeofday_ms",
                        "gettimeofday_s", "local_clock_ns", "get_cycles"))


class FastCheck:
    """Whether probe bodies are FAST, given the plan and which context values read with
    plain register or stack loads (`context(e)`: `$argN`, a plain parameter, `$return`
    where the probe's sites give them)."""

    def __init__(self, plan: GlobalPlan, context: Callable[[ast.TargetSymbol], bool]) -> None:
        self.plan = plan
        self.context = context
        self.reads_context = False

    def is_fast(self, body: ast.Stmt) -> bool:
        """Whether a probe with this body is FAST (it must do something); afterwards
        `reads_context` says whether it reads a context value (a register, a stack word:
        `@entry` values are popped by the stack pointer alone)."""
        self.reads_context = False
        updates = _updates(body)
        return bool(updates) and all(u is not None and self._update(u) for u in updates)

    def _update(self, e: ast.Expr) -> bool:
        target = counter_update(e)
        if target is not None:
            return target.name in self.plan.counters and self._delta(e)
        keyed = kcount_update(e)
        if keyed is not None:
            assert isinstance(keyed.base, ast.Symbol)
            return keyed.base.name in self.plan.kcounts and self._keys(keyed) and \
                self._delta(e)
        if isinstance(e, ast.Assign) and e.op == "<<<":
            t = e.target
            if isinstance(t, ast.Symbol):
                return t.name in self.plan.pstats and self.value(e.value)
            if isinstance(t, ast.Index) and isinstance(t.base, ast.Symbol):
                return t.base.name in self.plan.kstats and \
                    t.base.name not in self.plan.kcounts and self._keys(t) and \
                    self.value(e.value)
        return False

    def _delta(self, e: ast.Expr) -> bool:
        if isinstance(e, ast.IncDec):
            return True
        # INT64_MIN has no INT64_C spelling: the emitter writes it as a macro
        return isinstance(e, ast.Assign) and not (
            isinstance(e.value, ast.NumberLiteral) and e.value.value == -(1 << 63)) and \
            self.value(e.value)

    def _keys(self, e: ast.Index) -> bool:
        return all(self.value(k) for k in e.indexes)

    def value(self, e: ast.Expr) -> bool:
        """Whether `e` is a FAST value (an integer of plain C)."""
        if isinstance(e, ast.NumberLiteral):
            return True
        if isinstance(e, ast.TargetSymbol):
            ok = self.context(e)
            self.reads_context |= ok
            return ok
        if isinstance(e, ast.BinaryOp):
            return e.op in _BINARY and self.value(e.left) and self.value(e.right)
        if isinstance(e, ast.Unary):
            return e.op in _UNARY and self.value(e.operand)
        if isinstance(e, ast.Comparison | ast.Logical):
            return self.value(e.left) and self.value(e.right)
        if isinstance(e, ast.Ternary):
            return self.value(e.cond) and self.value(e.then) and self.value(e.else_)
        if isinstance(e, ast.Call):
            return e.name in FAST_CALLS and not e.args
        # the value popped before the body (its frame is found by the stack pointer)
        if isinstance(e, ast.Entry):
            return True
        return False


def _updates(s: ast.Stmt) -> list[ast.Expr | None]:
    """The expression of each statement of `s` (None: a statement that is no
    expression statement)."""
    if isinstance(s, ast.Block):
        return [u for st in s.statements for u in _updates(st)]
    if isinstance(s, ast.Empty):
        return []
    return [s.expr if isinstance(s, ast.ExprStatement) else None]


def where_table(pi: int, wheres: list[str], suffix: str = "") -> list[str]:
    """The table of a FAST handler's statements' `where` strings (`probe_<pi><suffix>_where`,
    named by its pd_probes row; suffix `_entry`: a hidden entry handler's): each statement
    compares its number with the MAXACTION budget (no loop: the numbers are static) and
    only a failing one stores its `where`, found through c->probe."""
    return [f"static const char *const probe_{pi}{suffix}_where[] = "
            f"{{{', '.join(wheres) or 'NULL'}}};"]
