"""Pass 3: translate a resolved script into one C source for every ABI.

Types are inferred first (long, string, statistics, arrays of them) to a
fixpoint; then each probe becomes a C handler `static void probe_N(struct
pd_ctx *c)` and the tables the runtime arms from (sites with their argument
descriptors, objects, probes) are emitted.  Globals live at fixed offsets in
the segment's globals area, computed here, so every ABI agrees on them.
Output is a binary record (format id + values) that the launcher formats, or,
for a printf of integers only, text formatted in the handler.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from .. import kstat
from ..build import runtime_digest
from ..elf import dwarf
from ..elf.argspec import ArgKind, ArgSpec
from ..elf.functions import NARGS, FunctionSite
from ..elf.stapsdt import ProbeSite
from ..elf.unwind import unwind_c
from ..entry import helpers_c as entry_helpers_c
from ..entry import pop_c as entry_pop_c
from ..errors import ScriptError, SourceLocation, TargetError
from ..format import FormatSpec, parse_format
from ..guru import (
    SET_USER,
    embedded_expr_c,
    embedded_function_c,
    set_user_c,
    set_user_params,
    toplevel_c,
)
from ..plan.returns import ReturnPlan, plan_returns
from ..plan.x86 import PatchPlan, plan_c, plan_function, plan_site
from ..program import Format, HistFormat, Program, ReportTag  # noqa: F401
from ..resolve import Resolution, ResolvedPoint, format_point
from ..script import ast
from .fast import PD_PROBE_FAST, fast_lines, is_fast

LONG, STRING, STAT = "long", "string", "stat"
# stap's defaults; `-D MAXSTRINGLEN=` / `-D MAXMAPENTRIES=` change them for one
# translation (translate() sets LIMITS, the emitted C gets the same -D).
DEFAULT_LIMITS = {"MAXSTRINGLEN": 512, "MAXMAPENTRIES": 2048}
LIMITS = dict(DEFAULT_LIMITS)
STAT_SIZE = 8 * (7 + 128)  # struct pd_stat
# runtime/pd_pstat.c: a statistic only added to gets a shared slot plus one per thread
PSTAT_SLOTS = 64
PSTAT_SLOT_SIZE = 8 + STAT_SIZE
ABI_OF_MACHINE = {"x86_64": "m64", "i386": "m32", "aarch64": "aarch64"}
PD_ABI = {"m64": "PD_ABI_X86_64", "m32": "PD_ABI_I386", "aarch64": "PD_ABI_AARCH64"}
PROBE_KIND_C = {"begin": "PD_PROBE_BEGIN", "end": "PD_PROBE_END", "error": "PD_PROBE_ERROR",
                "mark": "PD_PROBE_MARK", "process_begin": "PD_PROBE_PROCESS_BEGIN",
                "process_end": "PD_PROBE_PROCESS_END", "timer": "PD_PROBE_TIMER",
                "function": "PD_PROBE_MARK"}
STAT_OPS = {"count": "PD_STAT_COUNT", "sum": "PD_STAT_SUM", "min": "PD_STAT_MIN",
            "max": "PD_STAT_MAX", "avg": "PD_STAT_AVG", "variance": "PD_STAT_VARIANCE"}


@dataclass
class ArrayType:
    keys: list[str | None]
    value: str | None


@dataclass
class GlobalVar:
    decl: ast.Global | None
    name: str
    type: str | None = None          # scalar type
    array: ArrayType | None = None
    offset: int = 0
    size: int = 0
    read: bool = False
    written: bool = False
    hist_log: bool = False
    hist_linear: tuple[int, int, int] | None = None
    counter: int = 0                 # counter-only scalar: its index in a thread's block

    @property
    def is_array(self) -> bool:
        return self.array is not None

    @property
    def cname(self) -> str:
        return f"g_{self.name}"


@dataclass
class FuncInfo:
    decl: ast.Function
    params: list[str | None]
    ret: str | None
    locals: dict[str, str | None] = field(default_factory=dict)
    uses_globals: bool = False


def _err(msg: str, node: object, hint: str | None = None) -> ScriptError:
    """A ScriptError at `node` (any AST object with a `loc`)."""
    return ScriptError(msg, getattr(node, "loc", None), hint)


def _c_string(text: str | bytes) -> str:
    data = text if isinstance(text, bytes) else text.encode("utf-8", "surrogateescape")
    out = []
    for b in data:
        ch = chr(b)
        if ch in '"\\':
            out.append("\\" + ch)
        elif 32 <= b < 127 and ch != "?":  # '?' escaped: no trigraphs
            out.append(ch)
        else:
            out.append(f"\\{b:03o}")
    return '"' + "".join(out) + '"'


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
    if isinstance(node, ast.Symbol | ast.Call | ast.Function):
        return f"identifier '{node.name}'"
    if isinstance(node, ast.Index) and isinstance(node.base, ast.Symbol):
        return f"identifier '{node.base.name}'"
    if isinstance(node, ast.NumberLiteral):
        return f"number '{node.value}'"
    if isinstance(node, ast.StringLiteral):
        return "string"
    if type(node) in KEYWORDS:
        return f"keyword '{KEYWORDS[type(node)]}'"
    return "statement"


def _max_entries(var: GlobalVar) -> int:
    """`global a[N]`, else MAXMAPENTRIES."""
    return var.decl.size if var.decl is not None and var.decl.size else LIMITS["MAXMAPENTRIES"]


def _capacity(var: GlobalVar) -> int:
    """Hash slots of an array: a power of two with 25% headroom over its limit."""
    n = _max_entries(var)
    return _next_pow2(n + n // 4 + 1)


def _next_pow2(n: int) -> int:
    p = 1
    while p < n:
        p <<= 1
    return p


def _formats_in_probe(spec: FormatSpec) -> bool:
    """Whether printf(spec) can be formatted by the handler (pd_sf_* in pd_string.c, the
    rules format.py applies): integer conversions with fixed widths, whose longest output
    fits a MAXSTRINGLEN string.  Strings and '*' widths stay records formatted here."""
    bound = 0
    for piece in spec.pieces:
        if isinstance(piece, str):
            bound += len(piece.encode())
        elif piece.conv not in "diuxX" or piece.width == -1 or piece.precision == -1:
            return False
        else:
            bound += max(piece.width or 0, piece.precision or 0) + 24   # 2^64 in octal-ish digits
    return bound < LIMITS["MAXSTRINGLEN"]


def _type_size(t: str | None) -> int:
    # strings keep 8-byte alignment so the slots after them stay aligned
    string_size = (LIMITS["MAXSTRINGLEN"] + 7) & ~7
    return {LONG: 8, STRING: string_size, STAT: STAT_SIZE}.get(t or LONG, 8)


# Built-in functions: name -> (argument types, return type).  None = any.
BUILTINS: dict[str, tuple[tuple[str, ...], str | None]] = {
    "pid": ((), LONG), "tid": ((), LONG), "ppid": ((), LONG), "uid": ((), LONG),
    "euid": ((), LONG), "gid": ((), LONG), "cpu": ((), LONG), "target": ((), LONG),
    "execname": ((), STRING), "pp": ((), STRING), "pn": ((), STRING),
    "ppfunc": ((), STRING), "probefunc": ((), STRING),
    "gettimeofday_s": ((), LONG), "gettimeofday_ms": ((), LONG),
    "gettimeofday_us": ((), LONG), "gettimeofday_ns": ((), LONG),
    "local_clock_ns": ((), LONG), "get_cycles": ((), LONG),
    "exit": ((), None), "error": ((STRING,), None), "warn": ((STRING,), None),
    "log": ((STRING,), None),
    "strlen": ((STRING,), LONG), "substr": ((STRING, LONG, LONG), STRING),
    "isinstr": ((STRING, STRING), LONG), "strtol": ((STRING, LONG), LONG),
    "str_replace": ((STRING, STRING, STRING), STRING),
    "user_string": ((LONG,), STRING), "user_string_n": ((LONG, LONG), STRING),
    "user_string2": ((LONG, STRING), STRING), "user_string_n2": ((LONG, LONG, STRING), STRING),
    "user_string_quoted": ((LONG,), STRING), "user_string_n_quoted": ((LONG, LONG), STRING),
    "user_string_nofault": ((LONG,), STRING),
    "text_str": ((STRING,), STRING), "text_strn": ((STRING, LONG, LONG), STRING),
    "tokenize": ((STRING, STRING), STRING),
    "fp_add": ((LONG, LONG), LONG), "fp_sub": ((LONG, LONG), LONG),
    "fp_mul": ((LONG, LONG), LONG), "fp_div": ((LONG, LONG), LONG),
    "fp_lt": ((LONG, LONG), LONG), "fp_le": ((LONG, LONG), LONG), "fp_eq": ((LONG, LONG), LONG),
    "fp32_to_fp64": ((LONG,), LONG), "long_to_fp": ((LONG,), LONG),
    "fp_to_long": ((LONG,), LONG), "string_to_fp": ((STRING,), LONG),
    "fp_to_string": ((LONG, LONG), STRING),
    "user_char": ((LONG,), LONG), "user_short": ((LONG,), LONG), "user_int": ((LONG,), LONG),
    "user_long": ((LONG,), LONG), "user_int8": ((LONG,), LONG), "user_uint8": ((LONG,), LONG),
    "user_int16": ((LONG,), LONG), "user_uint16": ((LONG,), LONG),
    "user_int32": ((LONG,), LONG), "user_uint32": ((LONG,), LONG),
    "user_int64": ((LONG,), LONG), "user_uint64": ((LONG,), LONG),
    "user_ushort": ((LONG,), LONG), "user_uint": ((LONG,), LONG),
    "abs": ((LONG,), LONG),
    # issue 7: symbols and backtraces from the launcher's tables (elf/unwind.py)
    "usymname": ((LONG,), STRING), "ubacktrace": ((), STRING), "print_ubacktrace": ((), None),
    "usymdata": ((LONG,), STRING),
}
PRINT_FUNCS = {"printf", "sprintf", "print", "println", "sprint", "sprintln", "printd",
               "printdln"}
USER_READS = {"user_char": (1, 1), "user_short": (2, 1), "user_int": (4, 1),
              "user_long": (0, 1), "user_int8": (1, 1), "user_uint8": (1, 0),
              "user_int16": (2, 1), "user_uint16": (2, 0), "user_int32": (4, 1),
              "user_uint32": (4, 0), "user_int64": (8, 1), "user_uint64": (8, 0),
              "user_ushort": (2, 0), "user_uint": (4, 0)}


class Scope:
    """Locals of one probe or function."""

    def __init__(self, kind: str, func: FuncInfo | None = None,
                 sites: tuple[ProbeSite, ...] = (), probe_kinds: tuple[str, ...] = ()) -> None:
        self.kind = kind
        self.func = func
        self.locals: dict[str, str | None] = func.locals if func else {}
        self.sites = sites
        self.probe_kinds = probe_kinds
        self.uses_globals = False
        self.first_use: dict[str, ast.Symbol] = {}
        self.in_entry = False   # inside @entry(...): the entry's registers (entry.py)


class Translator:
    def __init__(self, script: ast.Script, resolution: Resolution) -> None:
        self.script = script
        self.resolution = resolution
        self.globals: dict[str, GlobalVar] = {}
        self.funcs: dict[str, FuncInfo] = {}
        self.formats: list[Format] = []
        self._format_ids: dict[object, int] = {}
        self.report: dict[int, ReportTag] = {}   # exit-report format id -> its tag
        self.changed = False
        self.warnings: list[str] = []
        self.atomic_globals: set[str] = set()
        self.counter_area = 0     # per-thread counter blocks (runtime/pd_counter.c)
        self.counter_stride = 0
        self.pstat_globals: set[str] = set()   # scalar statistics with per-thread slots
        self.kstat_globals: set[str] = set()   # keyed ones with per-thread tables (kstat.py)
        self.kcount_globals: set[str] = set()  # the kstat_globals that are keyed counters
        self.kstat_layouts: dict[str, kstat.KstatLayout] = {}
        self.variance_stats: set[str] = set()  # statistics whose @variance is read
        # DWARF parameters a probe reads ($fd): slot k is site argument NARGS + k
        self.param_names: list[str] = []
        self.entry_index: dict[int, int] = {}   # id(@entry node) -> its value slot
        self.usym = False   # usymname/ubacktrace used: emit the unwind tables
        self.usymdata = False   # usymdata used: the tables carry data symbols too
        for g in script.globals:
            if g.name in self.globals:
                raise _err(f"duplicate global '{g.name}'", g)
            var = GlobalVar(g, g.name)
            if g.init is not None:
                var.type = STRING if isinstance(g.init, ast.StringLiteral) else LONG
                var.written = True
            if g.size is not None or g.wrap:
                var.array = ArrayType([], None)
            self.globals[g.name] = var
        for f in script.functions:
            if f.name in self.funcs:
                raise _err(f"duplicate function '{f.name}'", f)
            if f.name in BUILTINS or f.name in PRINT_FUNCS:
                raise _err(f"function '{f.name}' redefines a built-in", f)
            info = FuncInfo(f, [p.type for p in f.params], f.return_type)
            for p in f.params:
                info.locals[p.name] = p.type
            self.funcs[f.name] = info
        self.scopes: dict[int, Scope] = {}
        for probe in script.probes:
            points = resolution.points.get(id(probe), [])
            sites = tuple(s for rp in points for s in rp.sites)
            self.scopes[id(probe)] = Scope("probe", sites=sites,
                                           probe_kinds=tuple(rp.kind for rp in points))
        for f in script.functions:
            self.scopes[id(f)] = Scope("function", self.funcs[f.name])

    # ------------------------------------------------------------------ types
    def _set(self, current: str | None, new: str | None, node: ast.Node, what: str) -> str | None:
        if new is None or current == new:
            return current
        if current is None:
            self.changed = True
            return new
        raise _err(f"type mismatch for {what}: {current} vs {new}", node)

    def _var_kind(self, name: str, scope: Scope) -> str:
        if name in scope.locals:
            return "local"
        if name in self.globals:
            return "global"
        return "local"

    def infer(self) -> None:
        for _ in range(50):
            self.changed = False
            for probe in self.script.probes:
                self._infer_stmt(probe.body, self.scopes[id(probe)])
            for f in self.script.functions:
                if not isinstance(f.body, ast.Embedded):   # guru C: typed by its callers
                    self._infer_stmt(f.body, self.scopes[id(f)])
            if not self.changed:
                break
        for name, var in list(self.globals.items()):
            if not var.read and not var.written and var.type is None and (
                    var.array is None or var.array.value is None):
                # stap elides a global the script never uses, with a warning
                loc = var.decl.loc if var.decl else None
                self.warnings.append(f"WARNING: Eliding unused variable '{name}': identifier "
                                     f"'{name}' at {loc}")
                del self.globals[name]
                continue
            if var.array is not None:
                if var.array.value is None:
                    raise _err(f"unresolved type for global array '{name}'", var.decl)
                if any(k is None for k in var.array.keys) or not var.array.keys:
                    raise _err(f"unresolved key types for global array '{name}'", var.decl)
            elif var.type is None:
                raise _err(f"unresolved type for global '{name}'", var.decl,
                           "assign it a value somewhere in the script")
        for f in self.script.functions:
            info = self.funcs[f.name]
            for p, t in zip(f.params, info.params, strict=True):
                if t is None:
                    raise _err(f"unresolved type for parameter '{p.name}'", p)
        for scope in self.scopes.values():
            for name, t in scope.locals.items():
                if t is None and name in scope.first_use:
                    raise _err(f"unresolved type for identifier '{name}'",
                               scope.first_use[name], "assign it a value first")

    def _local_type(self, scope: Scope, sym: ast.Symbol, t: str | None) -> str | None:
        scope.first_use.setdefault(sym.name, sym)
        cur = scope.locals.get(sym.name)
        new = self._set(cur, t, sym, f"identifier '{sym.name}'")
        scope.locals[sym.name] = new
        return new

    def _sym_type(self, sym: ast.Symbol, scope: Scope, t: str | None = None,
                  write: bool = False) -> str | None:
        if self._var_kind(sym.name, scope) == "global":
            var = self.globals[sym.name]
            scope.uses_globals = True
            if var.is_array:
                raise _err(f"array '{sym.name}' used without an index", sym)
            if write:
                var.written = True
            else:
                var.read = True
            var.type = self._set(var.type, t, sym, f"global '{sym.name}'")
            return var.type
        return self._local_type(scope, sym, t)

    def _array(self, base: ast.Expr, nkeys: int, scope: Scope, write: bool) -> GlobalVar:
        if not isinstance(base, ast.Symbol):
            raise _err("only global arrays can be indexed", base)
        var = self.globals.get(base.name)
        if var is None or base.name in scope.locals:
            raise _err(f"'{base.name}' is not a global array", base,
                       f"declare it: global {base.name}")
        scope.uses_globals = True
        if var.type is not None:
            raise _err(f"'{base.name}' is a scalar, not an array", base)
        if var.array is None:
            var.array = ArrayType([None] * nkeys, None)
            self.changed = True
        if not var.array.keys:
            var.array.keys = [None] * nkeys
            self.changed = True
        if len(var.array.keys) != nkeys:
            raise _err(f"array '{base.name}' used with {nkeys} keys, elsewhere with "
                       f"{len(var.array.keys)}", base)
        if write:
            var.written = True
        else:
            var.read = True
        return var

    def _index_type(self, node: ast.Index, scope: Scope, t: str | None = None,
                    write: bool = False) -> str | None:
        if isinstance(node.base, ast.HistOp):
            self._infer(node.base.operand, scope)
            for k in node.indexes:
                self._expect(k, LONG, scope)
            return LONG
        var = self._array(node.base, len(node.indexes), scope, write)
        assert var.array is not None
        for i, k in enumerate(node.indexes):
            if isinstance(k, ast.Wildcard):
                raise _err("a wildcard index is only allowed in delete, in and foreach", k)
            kt = self._infer(k, scope)
            var.array.keys[i] = self._set(var.array.keys[i], kt, k, f"key {i + 1} of '{var.name}'")
            if kt is None and var.array.keys[i] is not None:
                self._infer(k, scope, var.array.keys[i])
        var.array.value = self._set(var.array.value, t, node, f"array '{var.name}'")
        return var.array.value

    def _expect(self, e: ast.Expr, t: str, scope: Scope) -> None:
        got = self._infer(e, scope, t)
        if got is not None and got != t:
            raise _err(f"type mismatch: expected {t}, found {got}", e)

    def _infer(self, e: ast.Expr, scope: Scope, want: str | None = None) -> str | None:
        """Infer e's type; `want` propagates a known type into untyped variables."""
        if isinstance(e, ast.NumberLiteral):
            return LONG
        if isinstance(e, ast.StringLiteral):
            return STRING
        if isinstance(e, ast.Symbol):
            return self._sym_type(e, scope, want)
        if isinstance(e, ast.Index):
            return self._index_type(e, scope, want)
        if isinstance(e, ast.TargetSymbol):
            return self._target_type(e, scope)
        if isinstance(e, ast.BinaryOp):
            t = STRING if e.op == "." else LONG
            self._expect(e.left, t, scope)
            self._expect(e.right, t, scope)
            return t
        if isinstance(e, ast.Comparison):
            lt = self._infer(e.left, scope)
            rt = self._infer(e.right, scope, lt)
            if lt is None and rt is not None:
                lt = self._infer(e.left, scope, rt)
            if lt and rt and lt != rt:
                raise _err(f"type mismatch: comparing {lt} with {rt}", e)
            if STAT in (lt, rt):
                raise _err("statistics cannot be compared; use @count, @sum...", e)
            return LONG
        if isinstance(e, ast.Logical):
            self._expect(e.left, LONG, scope)
            self._expect(e.right, LONG, scope)
            return LONG
        if isinstance(e, ast.Unary):
            self._expect(e.operand, LONG, scope)
            return LONG
        if isinstance(e, ast.IncDec):
            self._lvalue(e.operand, scope, LONG)
            return LONG
        if isinstance(e, ast.Assign):
            return self._infer_assign(e, scope)
        if isinstance(e, ast.Ternary):
            self._expect(e.cond, LONG, scope)
            a = self._infer(e.then, scope, want)
            b = self._infer(e.else_, scope, a or want)
            if a is None and b is not None:
                a = self._infer(e.then, scope, b)
            if a and b and a != b:
                raise _err(f"type mismatch in ?: ({a} vs {b})", e)
            return a or b
        if isinstance(e, ast.ArrayIn):
            var = self._array(e.array, len(e.keys), scope, write=False)
            assert var.array is not None
            for i, k in enumerate(e.keys):
                if isinstance(k, ast.Wildcard):
                    continue
                kt = self._infer(k, scope, var.array.keys[i])
                var.array.keys[i] = self._set(var.array.keys[i], kt, k, f"key of '{var.name}'")
            return LONG
        if isinstance(e, ast.StatOp):
            self._stat_operand(e.operand, scope, read=True)
            return LONG
        if isinstance(e, ast.HistOp):
            var = self._stat_operand(e.operand, scope, read=True)
            if e.kind == "log":
                var.hist_log = True
            else:
                lo, hi, step = e.params
                if step <= 0 or hi <= lo:
                    raise _err("@hist_linear needs lo < hi and step > 0", e)
                if (hi - lo) // step + 3 > 128:
                    raise _err("@hist_linear has too many buckets (at most 125)", e)
                if var.hist_linear not in (None, (lo, hi, step)):
                    raise _err(f"'{var.name}' is used with two different @hist_linear", e)
                var.hist_linear = (lo, hi, step)
            if var.hist_log and var.hist_linear:
                raise _err(f"'{var.name}' is used with both @hist_log and @hist_linear", e)
            return "hist"
        if isinstance(e, ast.Call):
            return self._infer_call(e, scope)
        if isinstance(e, ast.Defined | ast.Embedded):
            return LONG
        if isinstance(e, ast.Entry):
            return self._entry_type(e, scope)
        if isinstance(e, ast.Wildcard):
            raise _err("unexpected '*'", e)
        raise _err(f"{type(e).__name__} expressions are not supported yet", e)

    def _stat_operand(self, e: ast.Expr, scope: Scope, read: bool) -> GlobalVar:
        if isinstance(e, ast.Symbol):
            var = self.globals.get(e.name)
            if var is None or e.name in scope.locals:
                raise _err(f"'{e.name}' is not a global statistic", e)
            scope.uses_globals = True
            var.type = self._set(var.type, STAT, e, f"global '{e.name}'")
            var.read |= read
            var.written |= not read
            return var
        if isinstance(e, ast.Index) and isinstance(e.base, ast.Symbol):
            self._index_type(e, scope, STAT, write=not read)
            var = self.globals[e.base.name]
            var.read |= read
            return var
        raise _err("aggregate operations need a global statistic", e)

    def _lvalue(self, e: ast.Expr, scope: Scope, t: str | None) -> str | None:
        if isinstance(e, ast.Symbol):
            return self._sym_type(e, scope, t, write=True)
        if isinstance(e, ast.Index):
            return self._index_type(e, scope, t, write=True)
        raise _err("cannot assign to this expression", e)

    def _infer_assign(self, e: ast.Assign, scope: Scope) -> str | None:
        if e.op == "<<<":
            self._stat_operand(e.target, scope, read=False)
            self._expect(e.value, LONG, scope)
            return LONG
        if e.op == "=":
            vt = self._infer(e.value, scope)
            tt = self._lvalue(e.target, scope, vt)
            if vt is None and tt is not None:
                self._infer(e.value, scope, tt)
            if tt == STAT:
                raise _err("use <<< to add a value to a statistic", e)
            return tt or vt
        t = STRING if e.op == ".=" else LONG
        self._lvalue(e.target, scope, t)
        if isinstance(e.target, ast.Symbol | ast.Index):
            # compound assignment also reads the target
            self._mark_read(e.target)
        self._expect(e.value, t, scope)
        return t

    def _mark_read(self, target: ast.Expr) -> None:
        name = target.name if isinstance(target, ast.Symbol) else (
            target.base.name if isinstance(target, ast.Index) and
            isinstance(target.base, ast.Symbol) else None)
        if name in self.globals:
            self.globals[name].read = True

    def param_slot(self, name: str) -> int:
        if name not in self.param_names:
            self.param_names.append(name)
        return NARGS + self.param_names.index(name)

    def _entry_type(self, e: ast.Entry, scope: Scope) -> str:
        if scope.in_entry or scope.kind != "probe" or not scope.sites or not all(
                isinstance(s, FunctionSite) and s.is_return for s in scope.sites):
            raise _err("@entry is only available in function .return probes", e)
        scope.in_entry = True
        try:
            t = self._infer(e.operand, scope)
        finally:
            scope.in_entry = False
        if t not in (None, LONG):
            raise _err(f"@entry of a {t} is not supported: only long values", e)
        return LONG

    def _dwarf_param(self, e: ast.TargetSymbol, scope: Scope) -> str:
        """`$name` in a function probe: a DWARF parameter every site has (issue 7)."""
        returns = [isinstance(s, FunctionSite) and s.is_return for s in scope.sites]
        if not scope.in_entry and any(returns) and not all(returns):
            raise _err(f"'{e.name}' in a probe on both entries and returns", e,
                       "use separate probes")
        for site in scope.sites:
            assert isinstance(site, FunctionSite)
            try:
                dwarf.readable_param(site.path, site.func_addr, e.name[1:])
            except TargetError as exc:
                raise _err(f"'{e.name}': {exc}", e) from exc
        return LONG

    def _target_type(self, e: ast.TargetSymbol, scope: Scope) -> str:
        name = e.name
        if e.components:
            raise _err(f"'{name}' has no members here: marks expose only $argN", e)
        functions = scope.kind == "probe" and bool(scope.sites) and all(
            isinstance(s, FunctionSite) for s in scope.sites)
        if functions and _is_param_name(name):
            return self._dwarf_param(e, scope)
        if functions and name in ("$$parms", "$$vars") and not scope.in_entry and any(
                isinstance(s, FunctionSite) and s.is_return for s in scope.sites):
            raise _err(f"'{name}' is not available in .return probes", e,
                       "name the parameters: $x there is its value at the entry")
        if functions and name in ("$$parms", "$$vars"):
            # a glob may match functions without DWARF (the C runtime's): "" for them
            errors: list[TargetError] = []
            for site in scope.sites:
                assert isinstance(site, FunctionSite)
                try:
                    dwarf.site_function(site.path, site.func_addr)
                except TargetError as exc:
                    errors.append(exc)
            if len(errors) == len(scope.sites):
                raise _err(f"'{name}': {errors[0]}", e)
        if name in ("$$name", "$$provider", "$$parms", "$$vars"):
            if scope.kind != "probe" or not scope.sites:
                raise _err(f"'{name}' is only available in process mark probes", e)
            return STRING
        returns = [isinstance(s, FunctionSite) and s.is_return and not scope.in_entry
                   for s in scope.sites or ()]
        if name in ("$return", "$$return"):   # issue 7: function .return probes
            if scope.kind != "probe" or not returns or not all(returns):
                raise _err(f"'{name}' is only available in function .return probes", e)
            return LONG if name == "$return" else STRING
        if name.startswith("$arg") and any(returns):
            raise _err(f"'{name}' is not available in .return probes: the argument "
                       "registers are gone at the return", e,
                       "save it in an entry probe, e.g. in an array keyed by tid()")
        if name.startswith("$arg") and name[4:].isdigit():
            n = int(name[4:])
            if scope.kind != "probe" or not scope.sites:
                raise _err(f"'{name}' is only available in process mark probes", e)
            for site in scope.sites:
                if n < 1 or n > len(site.args):
                    raise _err(f"'{name}' is not available: mark {site.provider}:{site.name} "
                               f"in {site.path} has {len(site.args)} argument(s)", e)
                spec = site.args[n - 1]
                if spec.kind == ArgKind.UNSUPPORTED:
                    raise _err(f"'{name}' of mark {site.provider}:{site.name} cannot be read: "
                               f"operand '{spec.text}': {spec.error}", e)
            return LONG
        raise _err(f"unknown context variable '{name}'", e,
                   "marks provide $arg1..$argN, $$name, $$provider, $$parms")

    def _infer_call(self, e: ast.Call, scope: Scope) -> str | None:
        name = e.name
        if name in PRINT_FUNCS:
            for a in e.args:
                if not isinstance(a, ast.HistOp):
                    self._infer(a, scope)
                else:
                    self._infer(a, scope)
            if name in ("printf", "sprintf"):
                fmt = e.args[0]
                assert isinstance(fmt, ast.StringLiteral)
                spec = parse_format(fmt.value, fmt.loc)
                args = e.args[1:]
                if len(args) != len(spec.arg_types):
                    raise _err(f"format string expects {len(spec.arg_types)} argument(s), "
                               f"{len(args)} given", e)
                for a, t in zip(args, spec.arg_types, strict=True):
                    self._expect(a, t, scope)
            return STRING if name.startswith("s") else None
        user_fn = name in self.funcs
        params: tuple[str, ...]
        if name in SET_USER and not user_fn:
            if not self.script.guru:
                raise _err(f"{name}() writes into the target's memory: only in guru mode", e,
                           "run with -g")
            params, ret = set_user_params(name), None
        elif name in BUILTINS:
            params, ret = BUILTINS[name]
        if name in BUILTINS or (name in SET_USER and not user_fn):
            if name == "strtol" and len(e.args) == 1:
                params = (STRING,)
            if name == "substr" and len(e.args) == 2:
                params = (STRING, LONG)
            if name == "exit" and e.args:
                raise _err("exit() takes no arguments", e)
            if len(e.args) != len(params):
                raise _err(f"{name}() takes {len(params)} argument(s), {len(e.args)} given", e)
            for a, t in zip(e.args, params, strict=True):
                self._expect(a, t, scope)
            return ret
        info = self.funcs.get(name)
        if info is None:
            import difflib
            close = difflib.get_close_matches(name, [*self.funcs, *BUILTINS, *PRINT_FUNCS], 3)
            raise _err(f"unresolved function '{name}'", e,
                       f"did you mean {', '.join(close)}?" if close else None)
        if len(e.args) != len(info.params):
            raise _err(f"{name}() takes {len(info.params)} argument(s), {len(e.args)} given", e)
        for i, a in enumerate(e.args):
            arg_t = self._infer(a, scope, info.params[i])
            new = self._set(info.params[i], arg_t, a, f"parameter {i + 1} of '{name}'")
            if new != info.params[i]:
                info.params[i] = new
                info.locals[info.decl.params[i].name] = new
        if info.uses_globals:
            scope.uses_globals = True
        return info.ret

    def _infer_stmt(self, s: ast.Stmt, scope: Scope) -> None:
        if isinstance(s, ast.Block):
            for st in s.statements:
                self._infer_stmt(st, scope)
        elif isinstance(s, ast.ExprStatement):
            self._infer(s.expr, scope)
        elif isinstance(s, ast.If):
            self._expect(s.cond, LONG, scope)
            self._infer_stmt(s.then, scope)
            if s.else_ is not None:
                self._infer_stmt(s.else_, scope)
        elif isinstance(s, ast.While):
            self._expect(s.cond, LONG, scope)
            self._infer_stmt(s.body, scope)
        elif isinstance(s, ast.For):
            if s.init is not None:
                self._infer(s.init, scope)
            if s.cond is not None:
                self._expect(s.cond, LONG, scope)
            if s.step is not None:
                self._infer(s.step, scope)
            self._infer_stmt(s.body, scope)
        elif isinstance(s, ast.Foreach):
            self._infer_foreach(s, scope)
        elif isinstance(s, ast.Delete):
            self._infer_delete(s, scope)
        elif isinstance(s, ast.Return):
            if scope.func is None:
                raise _err("return outside a function", s, "use 'next' to leave a probe")
            if s.value is not None:
                t = self._infer(s.value, scope, scope.func.ret)
                what = f"return of '{scope.func.decl.name}'"
                scope.func.ret = self._set(scope.func.ret, t, s, what)
                if t is None and scope.func.ret is not None:
                    self._infer(s.value, scope, scope.func.ret)
        elif isinstance(s, ast.Try):
            self._infer_stmt(s.body, scope)
            if s.catch_var is not None:
                self._local_type(scope, s.catch_var, STRING)
            self._infer_stmt(s.handler, scope)
        elif isinstance(s, ast.Next):
            if scope.kind != "probe":
                raise _err("next outside a probe", s)
        elif isinstance(s, ast.Break | ast.Continue | ast.Empty):
            pass
        else:
            raise _err(f"{type(s).__name__} statements are not supported", s)
        if scope.func is not None and scope.uses_globals:
            scope.func.uses_globals = True

    def _infer_foreach(self, s: ast.Foreach, scope: Scope) -> None:
        if isinstance(s.array, ast.HistOp):
            raise _err("foreach over a histogram is not supported yet", s.array)
        var = self._array(s.array, len(s.keys), scope, write=False)
        assert var.array is not None
        for i, k in enumerate(s.keys):
            if k.name in self.globals:
                raise _err(f"foreach key '{k.name}' shadows a global", k)
            kt = self._local_type(scope, k, var.array.keys[i])
            var.array.keys[i] = self._set(var.array.keys[i], kt, k, f"key of '{var.name}'")
        if s.value is not None:
            vt = self._local_type(scope, s.value, var.array.value)
            var.array.value = self._set(var.array.value, vt, s.value, f"array '{var.name}'")
        if s.slice is not None:
            if len(s.slice) != len(var.array.keys):
                raise _err(f"slice of '{var.name}' needs {len(var.array.keys)} keys", s)
            for i, sk in enumerate(s.slice):
                if not isinstance(sk, ast.Wildcard):
                    kt = self._infer(sk, scope, var.array.keys[i])
                    var.array.keys[i] = self._set(var.array.keys[i], kt, sk,
                                                  f"key of '{var.name}'")
        if s.limit is not None:
            self._expect(s.limit, LONG, scope)
        self._infer_stmt(s.body, scope)

    def _infer_delete(self, s: ast.Delete, scope: Scope) -> None:
        t = s.target
        if isinstance(t, ast.Symbol):
            var = self.globals.get(t.name)
            if var is not None and t.name not in scope.locals:
                scope.uses_globals = True
                var.written = True
                return
            self._local_type(scope, t, None)
            return
        if isinstance(t, ast.Index):
            var = self._array(t.base, len(t.indexes), scope, write=True)
            assert var.array is not None
            for i, k in enumerate(t.indexes):
                if isinstance(k, ast.Wildcard):
                    continue
                kt = self._infer(k, scope, var.array.keys[i])
                var.array.keys[i] = self._set(var.array.keys[i], kt, k, f"key of '{var.name}'")
            return
        raise _err("delete needs a variable or an array element", t)

    # ----------------------------------------------------------------- layout
    def layout_globals(self) -> int:
        off = 0
        for var in self.globals.values():
            var.offset = off
            if var.name in self.kstat_globals:
                lay = kstat.layout(_capacity(var), self._key_size(var), self._entry_size(var),
                                   kstat.hist_buckets(var.hist_log, var.hist_linear),
                                   PSTAT_SLOTS, var.name in self.kcount_globals)
                self.kstat_layouts[var.name] = lay
                var.size = lay.size
            elif var.array is not None:
                var.size = 16 + _capacity(var) * self._entry_size(var)
            elif var.name in self.pstat_globals:
                var.size = (1 + PSTAT_SLOTS) * PSTAT_SLOT_SIZE
            else:
                var.size = _type_size(var.type)
            off += (var.size + 63) & ~63
        counters = [n for n in self.globals if n in self.atomic_globals]
        for i, name in enumerate(counters):
            self.globals[name].counter = i
        # one cache line or more a thread (threads adding to their own slot share none),
        # starting with the i386 writers' sequence word (runtime/pd_counter.c)
        self.counter_area, self.counter_stride = off, (8 + len(counters) * 8 + 63) & ~63
        return off + PSTAT_SLOTS * self.counter_stride

    def counter_read(self, name: str) -> str:
        """C reading counter-only scalar `name`: its base plus every thread's slot."""
        var = self.globals[name]
        return (f"pd_counter_read(c->globals, {var.offset}, {self.counter_area}, "
                f"{counter_at(var.counter)}, {self.counter_stride})")

    def _key_size(self, var: GlobalVar) -> int:
        assert var.array is not None
        return sum(_type_size(k) for k in var.array.keys)

    def _entry_size(self, var: GlobalVar) -> int:
        assert var.array is not None
        return 16 + self._key_size(var) + _type_size(var.array.value)

    def format_id(self, fmt: Format) -> int:
        key = (type(fmt).__name__, repr(fmt))
        if key not in self._format_ids:
            self._format_ids[key] = len(self.formats)
            self.formats.append(fmt)
        return self._format_ids[key]

    def report_format_id(self, fmt: FormatSpec, tag: ReportTag) -> int:
        """A format of the exit report: its own id, so --json can tell it from a printf."""
        self.formats.append(fmt)
        self.report[len(self.formats) - 1] = tag
        return len(self.formats) - 1


class Emitter:
    """C code for one handler or function."""

    def __init__(self, tr: Translator, scope: Scope, sites: tuple[ProbeSite, ...] = ()) -> None:
        self.tr = tr
        self.scope = scope
        self.sites = sites
        self.lines: list[str] = []
        self.decls: list[str] = []
        self.ntemp = 0
        self.indent = 1
        self.err_label = ["out"]
        self.needs_lock = False
        self.iterating: list[str] = []   # the arrays of the enclosing foreach loops

    def temp(self, ctype: str, suffix: str = "") -> str:
        self.ntemp += 1
        name = f"t{self.ntemp}"
        self.decls.append(f"    {ctype} {name}{suffix};")
        return name

    def strtemp(self) -> str:
        return self.temp("char", "[MAXSTRINGLEN]")

    def line(self, text: str) -> None:
        self.lines.append("    " * self.indent + text)

    def check(self) -> None:
        self.line(f"if (PD_UNLIKELY(c->error)) goto {self.err_label[-1]};")

    # ------------------------------------------------------------ expressions
    def type_of(self, e: ast.Expr) -> str | None:
        return self.tr._infer(e, self.scope)

    def local(self, name: str) -> str:
        return f"l_{name}"

    def is_global(self, name: str) -> bool:
        return name not in self.scope.locals and name in self.tr.globals

    def gptr(self, var: GlobalVar) -> str:
        self.needs_lock = True  # every global access but the atomic counters takes the lock
        return f"(c->globals + {var.offset})"

    def key_blob(self, var: GlobalVar, keys: tuple[ast.Expr, ...]) -> str:
        assert var.array is not None
        kb = self.temp("uint8_t", f"[{max(self.tr._key_size(var), 8)}]")
        parts = []
        at = 0
        for k, kt in zip(keys, var.array.keys, strict=True):
            if isinstance(k, ast.Wildcard):
                pass  # not compared (see wildcard_mask)
            elif kt == STRING:
                parts.append(f"pd_key_str({kb} + {at}, {self.expr(k)})")
            else:
                parts.append(f"pd_key_i64({kb} + {at}, {self.expr(k)})")
            at += _type_size(kt)
        return f"({', '.join([*parts, kb])})"

    def map_api(self, var: GlobalVar, op: str) -> str:
        """`pd_map_OP(map, &md_X, ` or, for a keyed statistic, `pd_kstat_OP(c, area, &kd_X, `."""
        if var.name in self.tr.kstat_globals:
            return f"pd_kstat_{op}(c, {self.gptr(var)}, &kd_{var.name}, "
        return f"pd_map_{op}({self.gptr(var)}, &md_{var.name}, "

    @staticmethod
    def wildcard_mask(keys: tuple[ast.Expr, ...]) -> int:
        return sum(1 << i for i, k in enumerate(keys) if isinstance(k, ast.Wildcard))

    def map_get(self, var: GlobalVar, keys: tuple[ast.Expr, ...], create: bool,
                node: ast.Expr | None = None) -> str:
        if var.name in self.tr.kstat_globals and not create:
            # the key's values in every per-thread table, merged (NULL: in none)
            return (f"((void *)pd_kstat_get(c, {self.gptr(var)}, &kd_{var.name}, "
                    f"{self.key_blob(var, keys)}))")
        call = (f"pd_map_get(c, {self.gptr(var)}, &md_{var.name}, "
                f"{self.key_blob(var, keys)}, {int(create)})")
        # An insertion can overflow the array: stap names the array in the error.
        return f"(c->where = {_where(node)}, {call})" if create and node is not None else call

    def ptr(self, e: ast.Expr, create: bool) -> tuple[str, str, bool]:
        """(C pointer expression, type, may_be_null) of an lvalue."""
        if isinstance(e, ast.Symbol):
            if self.is_global(e.name) and e.name in self.tr.atomic_globals and not create:
                return f"(&(int64_t){{{self.tr.counter_read(e.name)}}})", LONG, False
            if self.is_global(e.name):
                var = self.tr.globals[e.name]
                t = var.type or LONG
                ctype = "char *" if t == STRING else "int64_t *"
                return f"(({ctype}){self.gptr(var)})", t, False
            t = self.scope.locals.get(e.name) or LONG
            return (self.local(e.name) if t == STRING else f"&{self.local(e.name)}"), t, False
        if isinstance(e, ast.Index) and isinstance(e.base, ast.Symbol):
            var = self.tr.globals[e.base.name]
            assert var.array is not None
            t = var.array.value or LONG
            ctype = {STRING: "char *", STAT: "struct pd_stat *"}.get(t, "int64_t *")
            return f"(({ctype}){self.map_get(var, e.indexes, create, e)})", t, True
        raise _err("cannot assign to this expression", e)

    def expr(self, e: ast.Expr) -> str:
        if isinstance(e, ast.NumberLiteral):
            v = e.value
            return f"INT64_C({v})" if v != -(1 << 63) else "INT64_MIN"
        if isinstance(e, ast.StringLiteral):
            return _c_string(e.as_bytes())
        if isinstance(e, ast.Symbol):
            p, t, _ = self.ptr(e, False)
            return p if t == STRING else f"(*{p})"
        if isinstance(e, ast.Index):
            if isinstance(e.base, ast.HistOp):
                raise _err("indexing a histogram is not supported yet", e)
            p, t, _ = self.ptr(e, False)
            if t == STRING:
                return f"({{ char *p_ = {p}; p_ ? p_ : \"\"; }})"
            return f"({{ int64_t *p_ = {p}; p_ ? *p_ : 0; }})"
        if isinstance(e, ast.TargetSymbol):
            return self.target(e)
        if isinstance(e, ast.BinaryOp):
            return self.binary(e)
        if isinstance(e, ast.Comparison):
            lt = self.type_of(e.left)
            a, b = self.expr(e.left), self.expr(e.right)
            if lt == STRING:
                return f"(strcmp({a}, {b}) {e.op} 0)"
            return f"({a} {e.op} {b})"
        if isinstance(e, ast.Logical):
            return f"(int64_t)(({self.expr(e.left)}) {e.op} ({self.expr(e.right)}))"
        if isinstance(e, ast.Unary):
            inner = self.expr(e.operand)
            if e.op == "-":
                return f"(int64_t)(0 - (uint64_t)({inner}))"
            if e.op == "+":
                return inner
            return f"(int64_t)({e.op}({inner}))"
        if isinstance(e, ast.IncDec):
            p, _, nullable = self.ptr(e.operand, True)
            op = e.op
            if e.prefix:
                body = f"(*p_ = (int64_t)((uint64_t)*p_ {op[0]} 1))"
            else:
                body = f"({{ int64_t o_ = *p_; *p_ = (int64_t)((uint64_t)o_ {op[0]} 1); o_; }})"
            guard = "p_ ? " + body + " : 0" if nullable else body
            return f"({{ int64_t *p_ = {p}; {guard}; }})"
        if isinstance(e, ast.Assign):
            return self.assign(e)
        if isinstance(e, ast.Ternary):
            return f"(({self.expr(e.cond)}) ? ({self.expr(e.then)}) : ({self.expr(e.else_)}))"
        if isinstance(e, ast.ArrayIn):
            assert isinstance(e.array, ast.Symbol)
            var = self.tr.globals[e.array.name]
            mask = self.wildcard_mask(e.keys)
            if mask:
                return (f"(int64_t)({self.map_api(var, 'match')}"
                        f"{self.key_blob(var, e.keys)}, {mask}, 0) != 0)")
            return f"(int64_t)({self.map_get(var, e.keys, False)} != NULL)"
        if isinstance(e, ast.StatOp):
            sp = self.stat_ptr(e.operand)
            return (f"({{ const struct pd_stat *s_ = {sp}; "
                    f"s_ ? pd_stat_get(c, s_, {STAT_OPS[e.op]}) "
                    f": (pd_error(c, \"empty aggregate\"), 0); }})")
        if isinstance(e, ast.Call):
            return self.call(e)
        if isinstance(e, ast.Defined):
            return "1" if self._defined(e.operand) else "0"
        if isinstance(e, ast.Embedded):
            return embedded_expr_c(e.code)
        if isinstance(e, ast.Entry):
            return f"ent_[{self.tr.entry_index[id(e)]}]"
        raise _err(f"{type(e).__name__} is not supported here", e)

    def _defined(self, e: ast.Expr) -> bool:
        if isinstance(e, ast.TargetSymbol):
            try:
                self.tr._target_type(e, self.scope)
                return True
            except ScriptError:
                return False
        return True

    def stat_ptr(self, e: ast.Expr) -> str:
        if isinstance(e, ast.Symbol):
            var = self.tr.globals[e.name]
            return _stat_read(var, self.gptr(var), self.tr.pstat_globals)
        assert isinstance(e, ast.Index) and isinstance(e.base, ast.Symbol)
        var = self.tr.globals[e.base.name]
        return f"((struct pd_stat *){self.map_get(var, e.indexes, False)})"

    def statdesc_of(self, e: ast.Expr) -> str:
        name = e.name if isinstance(e, ast.Symbol) else (
            e.base.name if isinstance(e, ast.Index) and isinstance(e.base, ast.Symbol) else "")
        return f"&sd_{name}"

    def binary(self, e: ast.BinaryOp) -> str:
        if e.op == ".":
            t = self.strtemp()
            return f"pd_concat({t}, {self.expr(e.left)}, {self.expr(e.right)})"
        a, b = self.expr(e.left), self.expr(e.right)
        if e.op == "/":
            return f"pd_div(c, {a}, {b}, {_where(e)})"
        if e.op == "%":
            return f"pd_mod(c, {a}, {b}, {_where(e)})"
        if e.op in ("+", "-", "*"):
            return f"(int64_t)((uint64_t)({a}) {e.op} (uint64_t)({b}))"
        if e.op == "<<":
            return f"(int64_t)((uint64_t)({a}) << (({b}) & 63))"
        if e.op == ">>":
            return f"(int64_t)(({a}) >> (({b}) & 63))"
        if e.op == ">>>":
            return f"(int64_t)((uint64_t)({a}) >> (({b}) & 63))"
        if e.op in ("&", "|", "^"):
            return f"(int64_t)(({a}) {e.op} ({b}))"
        raise _err(f"unknown operator '{e.op}'", e)

    def assign(self, e: ast.Assign) -> str:
        if e.op == "<<<":
            target = e.target
            if isinstance(target, ast.Symbol) and target.name in self.tr.pstat_globals:
                # the thread's own slot: no globals lock (pd_pstat.c)
                off = self.tr.globals[target.name].offset
                return (f"({{ int64_t v_ = {self.expr(e.value)}; pd_pstat_add(c, c->globals + "
                        f"{off}, v_, {self.statdesc_of(target)}); v_; }})")
            if isinstance(target, ast.Index) and isinstance(target.base, ast.Symbol) and \
                    target.base.name in self.tr.kstat_globals:
                # the thread's own table, under its slot lock only (pd_kstat.c)
                var = self.tr.globals[target.base.name]
                return (f"({{ int64_t v_ = {self.expr(e.value)}; c->where = {_where(target)}; "
                        f"pd_kstat_add(c, c->globals + {var.offset}, &kd_{var.name}, "
                        f"{self.key_blob(var, target.indexes)}, v_); v_; }})")
            if isinstance(target, ast.Symbol):
                sp = self.stat_ptr(target)
            else:
                p, _, _ = self.ptr(target, True)
                sp = p
            return (f"({{ int64_t v_ = {self.expr(e.value)}; struct pd_stat *s_ = {sp}; "
                    f"if (s_) pd_stat_add(s_, v_, {self.statdesc_of(target)}); v_; }})")
        p, t, nullable = self.ptr(e.target, True)
        if t == STRING:
            val = self.expr(e.value)
            tmp = self.strtemp()
            if e.op == ".=":
                cur = self.expr(e.target)
                val = f"pd_concat({tmp}, {cur}, {val})"
            else:
                val = f"pd_strcpy({tmp}, {val})"
            return f"({{ const char *v_ = {val}; char *p_ = {p}; if (p_) pd_strcpy(p_, v_); v_; }})"
        val = self.expr(e.value)
        if e.op == "=":
            upd = "*p_ = v_"
        elif e.op in ("/=", "%="):
            fn = "pd_div" if e.op == "/=" else "pd_mod"
            upd = f"*p_ = {fn}(c, *p_, v_, {_where(e)})"
        elif e.op in ("+=", "-=", "*="):
            upd = f"*p_ = (int64_t)((uint64_t)*p_ {e.op[0]} (uint64_t)v_)"
        elif e.op in ("<<=", ">>="):
            upd = f"*p_ = (int64_t)(*p_ {e.op[:2]} (v_ & 63))"
        elif e.op in ("&=", "|=", "^="):
            upd = f"*p_ {e.op} v_"
        else:
            raise _err(f"unknown assignment operator '{e.op}'", e)
        if nullable:
            return f"({{ int64_t v_ = {val}; int64_t *p_ = {p}; p_ ? ({upd}) : 0; }})"
        return f"({{ int64_t v_ = {val}; int64_t *p_ = {p}; {upd}; }})"

    def target(self, e: ast.TargetSymbol) -> str:
        name = e.name
        if name == "$$name":
            return "c->site->name"
        if name == "$$provider":
            return "c->site->provider"
        if name == "$return":
            return "pd_func_return(c)"
        if name == "$$return":
            return f"pd_sprintf({self.strtemp()}, \"return=%#llx\", " \
                   "(unsigned long long)pd_func_return(c))"
        if name in ("$$parms", "$$vars") and self.sites and \
                all(isinstance(s, FunctionSite) for s in self.sites):
            return self.function_parms()
        if _is_param_name(name):
            if not self.scope.in_entry and id(e) in self.tr.entry_index:
                return f"ent_[{self.tr.entry_index[id(e)]}]"   # .return: as at the entry
            return f"pd_fetch_arg(c, {self.tr.param_slot(name[1:])})"
        if name in ("$$parms", "$$vars"):
            t = self.strtemp()
            n = min(len(s.args) for s in self.sites) if self.sites else 0
            if n == 0:
                return '""'
            fmt = " ".join(f"$arg{i + 1}=%#llx" for i in range(n))
            args = ", ".join(f"(unsigned long long)pd_fetch_arg(c, {i})" for i in range(n))
            return f"pd_sprintf({t}, {_c_string(fmt)}, {args})"
        return f"pd_fetch_arg(c, {int(name[4:]) - 1})"

    def function_parms(self) -> str:
        """stap's `$$parms` of a function probe, "a=0x1 b=0x7ffc..." ("?": unreadable),
        chosen by the site when the probe covers several functions."""
        t = self.strtemp()
        cases: dict[tuple[str, int], str] = {}
        for site in self.sites:
            assert isinstance(site, FunctionSite)
            func = dwarf.function_at(site.path, site.func_addr)
            params = func.params if func is not None else ()
            fmt = " ".join(f"{p.name}=0x%llx" if p.location else f"{p.name}=?" for p in params)
            args = "".join(f", (unsigned long long)pd_fetch_arg(c, {self.tr.param_slot(p.name)})"
                           for p in params if p.location)
            cases[(site.path, site.pc)] = f"pd_sprintf({t}, {_c_string(fmt)}{args})" \
                if args else _c_string(fmt)
        if len(cases) == 1:
            return next(iter(cases.values()))
        out = '""'
        for (path, pc), value in cases.items():
            out = (f"(c->site->pc == {pc:#x} && !strcmp(pd_objects[c->site->object].path, "
                   f"{_c_string(path)}) ? (const char *){value} : {out})")
        return out

    def usym_call(self, name: str, args: list[str]) -> str:
        self.tr.usym = True
        if name == "print_ubacktrace":
            fid = self.tr.format_id(parse_format("%s\n"))
            return f"(pd_print_ubacktrace(c, {fid}), 0)"
        t = self.strtemp()
        if name == "usymdata":
            self.tr.usymdata = True
            return f"pd_usymdata(c, {t}, {args[0]})"
        return f"pd_usymname(c, {t}, {args[0]})" if args else f"pd_ubacktrace(c, {t})"

    def call(self, e: ast.Call) -> str:
        name = e.name
        if name in PRINT_FUNCS:
            return self.print_call(e)
        args = [self.expr(a) for a in e.args]
        simple = {"pid": "pd_pid()", "tid": "pd_tid()", "ppid": "pd_ppid()",
                  "uid": "(int64_t)getuid()", "euid": "(int64_t)geteuid()",
                  "gid": "(int64_t)getgid()", "cpu": "(int64_t)sched_getcpu()",
                  "target": "pd_target(c)", "execname": "pd_execname()",
                  "pp": "c->probe->pp", "pn": "c->probe->pp",
                  # issue 7: the probed function's name ("" outside function probes)
                  "ppfunc": "(c->site && c->site->nop_len == 0 ? c->site->name : \"\")",
                  "probefunc": "(c->site && c->site->nop_len == 0 ? c->site->name : \"\")",
                  "gettimeofday_s": "(pd_gettime_ns(1) / 1000000000)",
                  "gettimeofday_ms": "(pd_gettime_ns(1) / 1000000)",
                  "gettimeofday_us": "(pd_gettime_ns(1) / 1000)",
                  "gettimeofday_ns": "pd_gettime_ns(1)",
                  "local_clock_ns": "pd_gettime_ns(0)",
                  "get_cycles": "(int64_t)__builtin_ia32_rdtsc()"}
        if name in simple:
            return simple[name]
        if name == "exit":
            return "(pd_exit(c), 0)"
        if name in ("usymname", "usymdata", "ubacktrace", "print_ubacktrace"):
            return self.usym_call(name, args)
        if name == "log":
            fid = self.tr.format_id(parse_format("%s\n"))
            tmp = self.strtemp()
            return (f"(pd_strcpy({tmp}, {args[0]}), pd_rec_open(c, PD_REC_PRINTF, {fid}, 1), "
                    f"pd_rec_str(c, {tmp}), pd_rec_close(c), 0)")
        if name == "error":
            return f"(pd_error(c, \"%s\", {args[0]}), 0)"
        if name == "warn":
            return f"(pd_warn_probe(c, {args[0]}), 0)"
        if name == "strlen":
            return f"(int64_t)strlen({args[0]})"
        if name == "abs":
            return f"({{ int64_t a_ = {args[0]}; a_ < 0 ? (int64_t)(0 - (uint64_t)a_) : a_; }})"
        if name == "substr":
            t = self.strtemp()
            ln = args[2] if len(args) > 2 else "MAXSTRINGLEN"
            return f"pd_substr({t}, {args[0]}, {args[1]}, {ln})"
        if name == "isinstr":
            return f"(int64_t)(strstr({args[0]}, {args[1]}) != NULL)"
        if name == "strtol":
            base = args[1] if len(args) > 1 else "10"
            return f"(int64_t)strtoll({args[0]}, NULL, (int)({base}))"
        if name == "str_replace":
            t = self.strtemp()
            return f"pd_str_replace({t}, {args[0]}, {args[1]}, {args[2]})"
        if name in ("user_string2", "user_string_n2"):
            t = self.strtemp()
            n = args[1] if name == "user_string_n2" else "MAXSTRINGLEN"
            return f"pd_user_string_safe(c, {t}, {args[0]}, {n}, {args[-1]})"
        if name == "user_string_nofault":   # stap: "" when unreadable, never an error
            return f"pd_user_string_safe(c, {self.strtemp()}, {args[0]}, MAXSTRINGLEN, \"\")"
        if name in SET_USER and name not in self.tr.funcs:
            return set_user_c(name, args, _where(e))
        if name in ("user_string_quoted", "user_string_n_quoted"):
            # stap: "NULL" for a null pointer, "<unknown>" when unreadable, else quoted
            t = self.strtemp()
            n = args[1] if len(args) > 1 else "MAXSTRINGLEN"
            raw = f"pd_user_string_safe(c, {t}, {args[0]}, {n}, \"\")"
            return (f"({{ int64_t a_ = {args[0]}; a_ == 0 ? (const char *)\"NULL\" : "
                    f"(pd_strcpy({t}, \"\"), {raw}[0] || pd_user_read_ok(c, a_)) ? "
                    f"pd_text_str({t}, {t}, -1, 1) : (const char *)\"<unknown>\"; }})")
        if name == "text_str":
            return f"pd_text_str({self.strtemp()}, {args[0]}, -1, 0)"
        if name == "text_strn":
            return f"pd_text_str({self.strtemp()}, {args[0]}, {args[1]}, (int)({args[2]}))"
        fp_ops = {"fp_add": "+", "fp_sub": "-", "fp_mul": "*", "fp_div": "/", "fp_lt": "<",
                  "fp_le": "l", "fp_eq": "="}
        if name in fp_ops:
            return f"pd_fp_op({args[0]}, {args[1]}, '{fp_ops[name]}')"
        if name in ("fp32_to_fp64", "long_to_fp", "fp_to_long", "string_to_fp"):
            return f"pd_{name}({args[0]})"
        if name == "fp_to_string":
            return f"pd_fp_to_string({self.strtemp()}, {args[0]}, {args[1]})"
        if name == "tokenize":
            return f"pd_tokenize({self.strtemp()}, {args[0]}, {args[1]})"
        if name in ("user_string", "user_string_n"):
            t = self.strtemp()
            n = args[1] if len(args) > 1 else "MAXSTRINGLEN"
            return f"(c->where = {_where(e)}, pd_user_string(c, {t}, {args[0]}, {n}))"
        if name in USER_READS:
            size, signed = USER_READS[name]
            size_c = "sizeof(long)" if size == 0 else str(size)
            return f"(c->where = {_where(e)}, pd_user_read(c, {args[0]}, {size_c}, {signed}))"
        info = self.tr.funcs[name]
        if info.uses_globals:
            self.needs_lock = True
        if info.ret == STRING:
            t = self.strtemp()
            return f"f_{name}(c, {t}{''.join(', ' + a for a in args)})"
        return f"f_{name}(c{''.join(', ' + a for a in args)})"

    def print_call(self, e: ast.Call) -> str:
        name = e.name
        if name in ("printf", "sprintf"):
            fmt = e.args[0]
            assert isinstance(fmt, ast.StringLiteral)
            spec = parse_format(fmt.value, fmt.loc)
            args = list(e.args[1:])
        else:
            args = list(e.args)
            if name in ("printd", "printdln"):
                if not args or not isinstance(args[0], ast.StringLiteral):
                    raise _err(f"{name}() needs a literal delimiter first", e)
                delim = args.pop(0)
                assert isinstance(delim, ast.StringLiteral)
                sep = delim.value.replace("%", "%%")
            else:
                sep = ""
            if len(args) == 1 and isinstance(args[0], ast.HistOp):
                return self.print_hist(args[0], newline=name.endswith("ln"))
            pieces = [("%s" if self.type_of(a) == STRING else "%d") for a in args]
            text = sep.join(pieces) + ("\n" if name.endswith("ln") else "")
            spec = parse_format(text, e.loc)
        if name.startswith("s"):
            return self.sprintf(spec, args, e)
        if _formats_in_probe(spec):
            # numbers only, bounded: formatted in the handler into one TEXT record,
            # which the drain joins with its neighbours (issue 6: millions a second)
            return f"({{ const char *t_ = {self.sprintf(spec, args, e)}; " \
                   "pd_rec_open(c, PD_REC_TEXT, 0, 1); pd_rec_str(c, t_); pd_rec_close(c); 0; })"
        fid = self.tr.format_id(spec)
        # Arguments are evaluated before the record opens: a user function called
        # in an argument may print records of its own.
        evals: list[str] = []
        puts: list[str] = []
        for a, t in zip(args, spec.arg_types, strict=True):
            if t == STRING:
                tmp = self.strtemp()
                evals.append(f"pd_strcpy({tmp}, {self.expr(a)})")
                puts.append(f"pd_rec_str(c, {tmp})")
            else:
                tmp = self.temp("int64_t")
                evals.append(f"({tmp} = {self.expr(a)})")
                puts.append(f"pd_rec_i64(c, {tmp})")
        parts = [*evals, f"pd_rec_open(c, PD_REC_PRINTF, {fid}, {len(args)})", *puts]
        parts.append("pd_rec_close(c)")
        return "(" + ", ".join(parts) + ", 0)"

    def print_hist(self, h: ast.HistOp, newline: bool) -> str:
        var = self.tr.globals[h.operand.name] if isinstance(h.operand, ast.Symbol) else (
            self.tr.globals[h.operand.base.name]
            if isinstance(h.operand, ast.Index) and isinstance(h.operand.base, ast.Symbol)
            else None)
        if var is None:
            raise _err("histograms need a global statistic", h)
        fmt = (HistFormat("log") if h.kind == "log" else
               HistFormat("linear", *h.params))
        fid = self.tr.format_id(fmt)
        sp = self.stat_ptr(h.operand)
        return (f"({{ const struct pd_stat *s_ = {sp}; if (s_) pd_stat_emit_hist(c, s_, "
                f"&sd_{var.name}, {fid}); 0; }})")

    def sprintf(self, spec: FormatSpec, args: list[ast.Expr], e: ast.Call) -> str:
        """sprintf in the probe, with stap's formatting rules (pd_sf_* in pd_string.c)."""
        t = self.strtemp()
        parts = [f"{t}[0] = 0"]
        values = iter(args)
        for piece in spec.pieces:
            if isinstance(piece, str):
                parts.append(f"pd_sf_lit({t}, {_c_string(piece)})")
                continue
            width = f"pd_sf_clamp({self.expr(next(values))})" if piece.width == -1 else (
                "-1" if piece.width is None else str(piece.width))
            prec = f"pd_sf_clamp({self.expr(next(values))})" if piece.precision == -1 else (
                "-1" if piece.precision is None else str(piece.precision))
            flag = f"'{piece.flags[0]}'" if piece.flags else "0"
            value = self.expr(next(values))
            if piece.conv == "s":
                parts.append(f"pd_sf_str({t}, {value}, {flag}, {width}, {prec})")
            elif piece.conv == "c":
                parts.append(f"pd_sf_chr({t}, {value}, {flag}, {width})")
            elif piece.conv in "diuxXop":
                parts.append(f"pd_sf_num({t}, {value}, '{piece.conv}', {flag}, {width}, {prec})")
            else:
                raise _err(f"sprintf does not support '%{piece.conv}'", e)
        return "({ " + "; ".join(parts) + f"; (const char *){t}; }})"

    # ------------------------------------------------------------- statements
    def stmt(self, s: ast.Stmt) -> None:
        if isinstance(s, ast.Block):
            for st in s.statements:
                self.stmt(st)
            return
        if isinstance(s, ast.Empty):
            return
        self.line(f"PD_ACTION(c, {_where(s.expr if isinstance(s, ast.ExprStatement) else s)});")
        target = _counter_update(s.expr) if isinstance(s, ast.ExprStatement) else None
        kcount = _kcount_update(s.expr) if isinstance(s, ast.ExprStatement) else None
        if isinstance(s, ast.ExprStatement) and target is not None and \
                self.is_global(target.name) and target.name in self.tr.atomic_globals:
            var = self.tr.globals[target.name]
            self.line(f"pd_counter_add(c, {var.offset}, {counter_at(var.counter)}, "
                      f"{self.tr.counter_area}, {self.tr.counter_stride}, "
                      f"{self.update_delta(s.expr)});")
            self.check()
        elif isinstance(s, ast.ExprStatement) and kcount is not None and \
                isinstance(kcount.base, ast.Symbol) and kcount.base.name in self.tr.kcount_globals:
            # the thread's own table, under its slot lock only (pd_kstat.c)
            var = self.tr.globals[kcount.base.name]
            self.line(f"c->where = {_where(kcount)}; pd_kstat_add(c, c->globals + {var.offset}, "
                      f"&kd_{var.name}, {self.key_blob(var, kcount.indexes)}, "
                      f"{self.update_delta(s.expr)});")
            self.check()
        elif isinstance(s, ast.ExprStatement):
            self.line(f"(void)({self.expr(s.expr)});")
            self.check()
        elif isinstance(s, ast.If):
            self.line(f"if ({self.expr(s.cond)}) {{")
            self.block(s.then)
            if s.else_ is not None:
                self.line("} else {")
                self.block(s.else_)
            self.line("}")
            self.check()
        elif isinstance(s, ast.While):
            self.line("for (;;) {")
            self.indent += 1
            self.line(f"PD_ACTION(c, {_where(s)});")
            self.check()
            self.line(f"int64_t cond_ = {self.expr(s.cond)};")
            self.check()
            self.line("if (!cond_) break;")
            self.indent -= 1
            self.block(s.body)
            self.line("}")
            self.check()
        elif isinstance(s, ast.For):
            if s.init is not None:
                self.line(f"(void)({self.expr(s.init)});")
                self.check()
            step = f"(void)({self.expr(s.step)})" if s.step is not None else ""
            self.line(f"for (;; {step}) {{")
            self.indent += 1
            self.line(f"PD_ACTION(c, {_where(s)});")
            self.check()
            if s.cond is not None:
                self.line(f"if (!({self.expr(s.cond)})) break;")
                self.check()
            self.indent -= 1
            self.block(s.body)
            self.line("}")
            self.check()
        elif isinstance(s, ast.Foreach):
            self.foreach(s)
        elif isinstance(s, ast.Delete):
            self.delete(s)
        elif isinstance(s, ast.Next):
            self.line("goto out;")
        elif isinstance(s, ast.Break):
            self.line("break;")
        elif isinstance(s, ast.Continue):
            self.line("continue;")
        elif isinstance(s, ast.Return):
            if s.value is not None:
                assert self.scope.func is not None
                if self.scope.func.ret == STRING:
                    self.line(f"pd_strcpy(ret, {self.expr(s.value)});")
                else:
                    self.line(f"ret = {self.expr(s.value)};")
                self.check()
            self.line("goto out;")
        elif isinstance(s, ast.Try):
            self.ntemp += 1
            label = f"catch_{self.ntemp}"
            self.line("{")
            self.err_label.append(label)
            self.block(s.body)
            self.err_label.pop()
            self.line(f"{label}:")
            self.line("if (c->error) {")
            self.indent += 1
            self.line("c->error = 0;")
            if s.catch_var is not None:
                self.line(f"pd_strcpy({self.local(s.catch_var.name)}, c->errmsg);")
            self.indent -= 1
            self.block(s.handler)
            self.line("}")
            self.line("}")
            self.check()
        else:
            raise _err(f"{type(s).__name__} is not supported", s)

    def update_delta(self, e: ast.Expr) -> str:
        """What the counter update `e` (`x++`, `x -= v`, ...) adds, as C."""
        value = self.expr(e.value) if isinstance(e, ast.Assign) else "1"
        op = e.op if isinstance(e, ast.Assign | ast.IncDec) else "+"
        return f"{'' if op[0] == '+' else '-'}(int64_t)({value})"

    def block(self, s: ast.Stmt) -> None:
        self.indent += 1
        self.stmt(s)
        self.indent -= 1

    def foreach(self, s: ast.Foreach) -> None:
        assert isinstance(s.array, ast.Symbol)
        var = self.tr.globals[s.array.name]
        assert var.array is not None
        max_entries = _max_entries(var)
        it = self.temp("uint8_t *", f"[{max_entries}]")
        column, order = 0, 1
        if s.sort is not None:
            column = s.sort.column if s.sort.column > 0 else -1
            if s.sort.column == 0 and var.array.value == STAT:
                agg = s.sort.aggregate or "count"
                column = -1 - ["count", "sum", "min", "max", "avg"].index(agg) \
                    if agg in ("count", "sum", "min", "max", "avg") else -1
            order = -1 if s.sort.descending else 1
        n = self.temp("uint32_t")
        i = self.temp("uint32_t")
        lim = self.temp("int64_t")
        if var.name in self.tr.kstat_globals and var.name not in self.iterating:
            # (a nested foreach over the same statistic keeps the outer one's merge)
            self.line(_kstat_merge(var, self.gptr(var)))
            self.check()
        self.line(f"{n} = pd_map_sorted({self.gptr(var)}, &md_{var.name}, {it}, "
                  f"{column}, {order});")
        self.line(f"{lim} = {self.expr(s.limit) if s.limit is not None else '-1'};")
        self.check()
        if s.slice is not None:
            # `foreach (... in a[*, k])`: keep the entries the slice matches, in order
            blob = self.key_blob(var, s.slice)
            kept = self.temp("uint32_t")
            self.line(f"{{ const uint8_t *kb_ = {blob}; {kept} = 0;")
            self.line(f"  for ({i} = 0; {i} < {n}; {i}++)")
            self.line(f"    if (pd_map_entry_matches(&md_{var.name}, {it}[{i}], kb_, "
                      f"{self.wildcard_mask(s.slice)})) {it}[{kept}++] = {it}[{i}];")
            self.line(f"  {n} = {kept}; }}")
            self.check()
        self.line(f"for ({i} = 0; {i} < {n} && ({lim} < 0 || {i} < {lim}); {i}++) {{")
        self.indent += 1
        at = 0
        for k, kt in zip(s.keys, var.array.keys, strict=True):
            if kt == STRING:
                self.line(f"pd_strcpy({self.local(k.name)}, (const char *)({it}[{i}] + {at}));")
            else:
                self.line(f"memcpy(&{self.local(k.name)}, {it}[{i}] + {at}, 8);")
            at += _type_size(kt)
        if s.value is not None:
            vt = var.array.value
            if vt == STRING:
                self.line(f"pd_strcpy({self.local(s.value.name)}, "
                          f"(const char *)({it}[{i}] + {at}));")
            elif vt == LONG:
                self.line(f"memcpy(&{self.local(s.value.name)}, {it}[{i}] + {at}, 8);")
            else:
                raise _err("foreach value variables over statistics are not supported", s.value)
        self.indent -= 1
        self.iterating.append(var.name)
        self.block(s.body)
        self.iterating.pop()
        self.line("}")
        self.check()

    def delete(self, s: ast.Delete) -> None:
        t = s.target
        if isinstance(t, ast.Symbol):
            if self.is_global(t.name):
                var = self.tr.globals[t.name]
                if var.array is not None:
                    self.line(f"{self.map_api(var, 'clear').rstrip(', ')});")
                else:
                    self.line(f"memset({self.gptr(var)}, 0, {var.size});")
            else:
                lt = self.scope.locals.get(t.name)
                self.line(f"{self.local(t.name)}[0] = 0;" if lt == STRING else
                          f"{self.local(t.name)} = 0;")
            return
        assert isinstance(t, ast.Index) and isinstance(t.base, ast.Symbol)
        var = self.tr.globals[t.base.name]
        mask = self.wildcard_mask(t.indexes)
        if mask:
            self.line(f"{self.map_api(var, 'match')}{self.key_blob(var, t.indexes)}, {mask}, 1);")
        else:
            self.line(f"{self.map_api(var, 'delete')}{self.key_blob(var, t.indexes)});")
        self.check()

    def local_decls(self, skip: set[str]) -> list[str]:
        out = []
        for name, t in self.scope.locals.items():
            if name in skip:
                continue
            if t == STRING:
                out.append(f"    char {self.local(name)}[MAXSTRINGLEN] = \"\";")
            else:
                out.append(f"    int64_t {self.local(name)} = 0;")
        return out


def _entry_handler(tr: Translator, pi: int, scope: Scope,
                   nodes: list[ast.Expr]) -> tuple[list[str], bool]:
    """The hidden entry handler of a .return probe using @entry (entry.py), and
    whether it takes the globals lock."""
    em = Emitter(tr, scope, scope.sites)
    scope.in_entry = True
    try:
        em.line("int64_t v_[PD_ENTRY_VALS] = {0};")
        for k, n in enumerate(nodes):
            em.line(f"v_[{k}] = {em.expr(n.operand if isinstance(n, ast.Entry) else n)};")
            em.check()
        em.line(f"pd_entry_push(c, {pi}, v_);")
    finally:
        scope.in_entry = False
    return (["", f"static void probe_{pi}_entry(struct pd_ctx *c)", "{",
             *em.local_decls(set()), *em.decls, *em.lines,
             "out:", "    return;", "}"], em.needs_lock)


def _is_param_name(name: str) -> bool:
    """`$fd`: a DWARF parameter (not `$argN`, `$return` or a `$$` variable)."""
    return re.fullmatch(r"\$[A-Za-z_]\w*", name) is not None and name != "$return" and \
        re.fullmatch(r"\$arg\d+", name) is None


def _arg_initializer(spec: ArgSpec) -> str:
    if spec.kind == ArgKind.CONST:
        # `$sym` immediates are link-time addresses: the runtime adds the load bias.
        return (f"{{INT64_C({spec.value}), PD_ARG_CONST, {spec.size}, {int(spec.signed)}, 0, "
                f"-1, -1, 1, 0, {int(spec.disp_is_vaddr)}}}")
    if spec.kind == ArgKind.REG:
        return (f"{{0, PD_ARG_REG, {spec.size}, {int(spec.signed)}, 0, {spec.reg}, -1, 1, "
                f"{spec.reg_shift}, 0}}")
    if spec.kind == ArgKind.MEM:
        seg = "PD_SEG_TP" if spec.segment else "PD_SEG_NONE"
        return (f"{{INT64_C({spec.disp}), PD_ARG_MEM, {spec.size}, {int(spec.signed)}, {seg}, "
                f"{spec.base}, {spec.index}, {spec.scale}, 0, {int(spec.disp_is_vaddr)}}}")
    # Never read: the translator refused any $argN that names it.
    return "{0, PD_ARG_CONST, 8, 0, 0, -1, -1, 1, 0, 0}"


def translate(script: ast.Script, resolution: Resolution, *,
              defines: dict[str, str] | None = None) -> Program:
    LIMITS.clear()
    LIMITS.update(DEFAULT_LIMITS)
    for name in DEFAULT_LIMITS:
        if defines and name in defines:
            LIMITS[name] = int(defines[name])
    tr = Translator(script, resolution)
    tr.infer()
    tr.atomic_globals = _find_atomic_globals(script, tr)
    tr.pstat_globals = _find_pstat_globals(script, tr)
    tr.kcount_globals = _find_kcount_globals(script, tr)
    tr.kstat_globals = _find_kstat_globals(script, tr) | tr.kcount_globals
    tr.variance_stats = {_stat_name(n.operand)
                         for n in _iter_nodes((script.probes, script.functions))
                         if isinstance(n, ast.StatOp) and n.op == "variance"}
    globals_size = tr.layout_globals()
    # -D limits are compiled into both modules; naming them here puts them
    # into the checksum, so a module built with other limits is never reused.
    limits = [f"/* -D {k}={v} */" for k, v in sorted((defines or {}).items())]
    out: list[str] = ["/* Generated by pydyn: one source for every ABI. */", *limits,
                      '#include "pd_runtime.h"', "#include <sched.h>", "#include <stdlib.h>",
                      "#include <unistd.h>", "",
                      *toplevel_c(script)]
    # globals: array and statistic descriptors
    for var in tr.globals.values():
        if var.type == STAT or (var.array and var.array.value == STAT):
            lo, hi, step = var.hist_linear or (0, 0, 1)
            out.append(f"static const struct pd_statdesc sd_{var.name} = "
                       f"{{{int(var.hist_log)}, {int(var.hist_linear is not None)}, "
                       f"{lo}, {hi}, {step}, {int(var.name in tr.variance_stats)}}};")
        if var.array is not None:
            out.append(f"static const struct pd_mapdesc md_{var.name} = "
                       f"{{{_mapdesc_fields(tr, var, _type_size(var.array.value))}}};")
            lay = tr.kstat_layouts.get(var.name)
            if lay is not None:
                out.extend(kstat.descriptors_c(var.name, lay,
                                               _mapdesc_fields(tr, var, lay.value_size)))
    out.append("")
    # function prototypes and bodies
    for f in script.functions:
        out.append(_func_signature(tr.funcs[f.name]) + ";")
    for f in script.functions:
        out.extend(_emit_function(tr, f))
    # probes
    probe_rows: list[str] = []
    site_rows: list[str] = []
    arg_tables: list[str] = []
    objects: dict[str, int] = {}
    object_rows: list[str] = []
    required: set[str] = set()
    timers: list[tuple[int, int, int]] = []
    needs_wait = False
    all_sites: list[ProbeSite] = []
    all_plans: list[PatchPlan] = []
    # function probes (issue 7): one site per entry address, with its entry/return probes
    fgroups: dict[tuple[str, int], tuple[FunctionSite, int, list[int], list[int]]] = {}

    def object_index(path: str, abi: str) -> int:
        if path not in objects:
            objects[path] = len(objects)
            object_rows.append(f"    {{{_c_string(path)}, {PD_ABI[abi]}}},")
        return objects[path]

    ordered: list[tuple[int, ResolvedPoint]] = []
    locks: dict[int, bool] = {}
    lock_bits: dict[int, int] = {}   # pd_probe.locks: PD_PROBE_LOCKS | PD_PROBE_FAST
    hidden: dict[tuple[int, int], int] = {}

    def hidden_entry(pi: int, rp: ResolvedPoint) -> int:
        """The probe row of probe pi's @entry handler for point rp (entry.py)."""
        if (pi, id(rp)) not in hidden:
            hidden[(pi, id(rp))] = len(probe_rows)
            probe_rows.append(f"    {{PD_PROBE_MARK, {int(entry_locks[pi])}, probe_{pi}_entry, "
                              f"{_c_string(format_point(rp.point))}, -1, 0}},")
        return hidden[(pi, id(rp))]

    entry_locks: dict[int, bool] = {}   # probes with @entry: their hidden entry handler
    fentry_vals: set[tuple[str, int]] = set()   # functions whose returns read @entry
    freturn_vals: set[tuple[str, int]] = set()  # ... and $return
    fast_rows: set[int] = set()                 # probe rows of FAST probes
    return_plans: list[tuple[FunctionSite, ReturnPlan]] = []   # retplan.py, per function
    entries_of = [_entry_values(p, tr.scopes[id(p)]) for p in script.probes]
    if any(entries_of):
        out.extend(entry_helpers_c(max(len(n) for n in entries_of)))
    for nodes in entries_of:
        tr.entry_index.update((id(n), k) for k, n in enumerate(nodes))
    for pi, probe in enumerate(script.probes):
        scope = tr.scopes[id(probe)]
        em = Emitter(tr, scope, scope.sites)
        em.stmt(probe.body)
        locks[pi] = em.needs_lock
        local_decls = [*em.local_decls(set()), *em.decls]
        fast = not entries_of[pi] and is_fast(local_decls, em.lines)
        lock_bits[pi] = int(em.needs_lock) | (PD_PROBE_FAST if fast else 0)
        pop: list[str] = []
        if entries_of[pi]:
            pop = ["    int64_t ent_[PD_ENTRY_VALS];", *entry_pop_c(pi)]
            handler, entry_locks[pi] = _entry_handler(tr, pi, scope, entries_of[pi])
            out.extend(handler)
        lines, where = fast_lines(pi, em.lines) if fast else (em.lines, [])
        body = ["", *where,
                f"static {'PD_FAST_FN ' if fast else ''}void probe_{pi}(struct pd_ctx *c)",
                "{", *local_decls, *pop, *lines,
                "out:", "    return;", "}"]
        out.extend(body)
        ordered += [(pi, rp) for rp in resolution.points.get(id(probe), [])]
    # begin(N)/end(N)/error(N): lower priorities run first; ties keep source order.
    ordered.sort(key=lambda item: item[1].priority)
    for pi, rp in ordered:
        scope = tr.scopes[id(script.probes[pi])]
        pidx = len(probe_rows)
        obj = -1
        if rp.kind in ("process_begin", "process_end") and rp.object_path:
            info = resolution.objects.get(rp.object_path)
            abi = ABI_OF_MACHINE.get(info.machine, "m64") if info else "m64"
            obj = object_index(rp.object_path, abi)
            required.add(abi)
        probe_rows.append(
            f"    {{{PROBE_KIND_C.get(rp.kind, 'PD_PROBE_BEGIN')}, "
            f"{lock_bits[pi]}, probe_{pi}, {_c_string(format_point(rp.point))}, "
            f"{obj}, {rp.period_ns}"
            f"{f', probe_{pi}_where' if lock_bits[pi] & PD_PROBE_FAST else ''}}},")
        if lock_bits[pi] & PD_PROBE_FAST:
            fast_rows.add(pidx)
        if rp.kind in ("mark", "function", "timer", "process_begin", "process_end"):
            needs_wait = True
        if rp.kind == "timer":
            timers.append((pidx, rp.period_ns, rp.randomize_ns))
        if rp.kind == "never":
            probe_rows.pop()
            continue
        for site in rp.sites:
            site_abi = ABI_OF_MACHINE.get(site.machine)
            if site_abi is None:
                raise _err(f"{site.path}: {site.machine} targets are not supported yet",
                           rp.point)
            required.add(site_abi)
            oi = object_index(site.path, site_abi)
            if isinstance(site, FunctionSite):
                group = fgroups.setdefault((site.path, site.pc), (site, oi, [], []))
                (group[3] if site.is_return else group[2]).append(pidx)
                if site.is_return and any(
                        isinstance(n, ast.TargetSymbol) and n.name in ("$return", "$$return")
                        for n in _iter_nodes(script.probes[pi].body)):
                    freturn_vals.add((site.path, site.pc))
                if pi in entry_locks:
                    group[2].append(hidden_entry(pi, rp))
                    fentry_vals.add((site.path, site.pc))
                continue
            ai = len(site_rows)
            arg_tables.append(
                f"static const struct pd_argdesc args_{ai}[] = {{"
                + ", ".join(_arg_initializer(a) for a in site.args)
                + ("" if site.args else "{0}") + "};")
            plan = plan_site(site)    # issue 6: the runtime only applies it
            plan_decls, plan_init = plan_c(plan, ai, _c_string)
            arg_tables.extend(plan_decls)
            site_rows.append(
                f"    {{{site.pc:#x}, {site.semaphore:#x}, args_{ai}, "
                f"{_c_string(site.provider)}, {_c_string(site.name)}, {oi}, {pidx}, "
                f"{site.nop_len}, {len(site.args)}, {plan_init}}},")
            all_sites.append(site)
            all_plans.append(plan)
    for site, oi, entries, returns in fgroups.values():
        ai = len(site_rows)
        fargs = [*site.args, *(dwarf.param_args(site.path, site.func_addr, tr.param_names)
                               if tr.param_names else [])]
        arg_tables.append(f"static const struct pd_argdesc args_{ai}[] = {{"
                          + ", ".join(_arg_initializer(a) for a in fargs) + "};")
        arg_tables.append(f"static const uint32_t fprobes_{ai}[] = {{"
                          + ", ".join(str(p) for p in entries + returns) + "};")
        plan = plan_function(site)
        plan_decls, plan_init = plan_c(plan, ai, _c_string)
        arg_tables.extend(plan_decls)
        rplan = None
        if returns:
            rplan = plan_returns(site, site.func_addr, site.func_size,
                                 entry_values=(site.path, site.pc) in fentry_vals,
                                 return_value=(site.path, site.pc) in freturn_vals,
                                 forced=(defines or {}).get("PD_RETURN_HIJACK", "0") != "0")
            return_plans.append((site, rplan))
        exits = rplan.exits if rplan else ()
        head = f"    {{{site.pc:#x}, 0, args_{ai}, {_c_string(site.provider)}, "
        # a function with patched exits: this hijack row, then its alternatives (pd_runtime.h)
        site_rows.append(
            f"{head}{_c_string(site.name)}, {oi}, {(entries + returns)[0]}, 0, {len(fargs)}, "
            f"{plan_init}, fprobes_{ai}, {len(entries)}, {len(returns)}, "
            f"{'PD_FX_HIJACK' if exits else 0}}},")
        all_sites.append(site)
        all_plans.append(plan)
        # a row with one probe is run as a mark's (nentry 0: the FAST mark path, pd_regs
        # as the stub has them); an exit's probes that read registers need the caller's ip
        if exits and entries:
            mark_like = len(entries) == 1
            site_rows.append(
                f"{head}{_c_string(site.name)}, {oi}, {entries[0]}, 0, {len(fargs)}, "
                f"{plan_init}, fprobes_{ai}, {0 if mark_like else len(entries)}, 0, "
                "PD_FX_ALT},")
        for ex in exits:
            ei = len(site_rows)
            exit_decls, exit_init = plan_c(ex.plan, ei, _c_string)
            arg_tables.extend(exit_decls)
            mark_like = len(returns) == 1 and returns[0] in fast_rows
            site_rows.append(
                f"    {{{ex.site.pc:#x}, 0, args_{ai}, {_c_string(site.provider)}, "
                f"{_c_string(site.name)}, {oi}, {returns[0]}, 0, {len(fargs)}, {exit_init}, "
                f"fprobes_{ai} + {len(entries)}, {0 if mark_like else len(returns)}, 0, "
                "PD_FX_ALT | PD_FX_EXIT},")
            all_sites.append(dataclasses.replace(ex.site, is_return=True))
            all_plans.append(ex.plan)
    # the exit report: globals written but never read are printed after `end`
    report = _exit_report(tr)
    if report:
        out.extend(["", "static void probe_exit_report(struct pd_ctx *c)", "{", *report,
                    "}"])
        probe_rows.append('    {PD_PROBE_END, 1, probe_exit_report, "end (report)", -1, 0},')
    out.append("")
    out.extend(arg_tables)
    out.append("const struct pd_probe pd_probes[] = {")
    out.extend(probe_rows or ["    {0, 0, NULL, NULL, -1, 0},"])
    out.append("};")
    out.append("const struct pd_site pd_sites[] = {")
    out.extend(site_rows or ["    {0, 0, NULL, NULL, NULL, 0, 0, 0, 0},"])
    out.append("};")
    out.append("const struct pd_object pd_objects[] = {")
    out.extend(object_rows or ['    {"", 0},'])
    out.append("};")
    if tr.usym:
        out.extend(unwind_c(objects, _c_string, data=tr.usymdata))
    out.extend(["", "void pd_init_globals(uint8_t *g)", "{", "    (void)g;"])
    for var in tr.globals.values():
        if var.decl is not None and var.decl.init is not None:
            init = var.decl.init
            if isinstance(init, ast.StringLiteral):
                out.append(f"    pd_strcpy((char *)(g + {var.offset}), "
                           f"{_c_string(init.as_bytes())});")
            else:
                out.append(f"    *(int64_t *)(g + {var.offset}) = INT64_C({init.value});")
    out.append("}")
    source = "\n".join(out) + "\n"
    digest = hashlib.sha256(source.encode() + runtime_digest()).digest()
    trailer = (
        "const struct pd_module_info pd_module = {\n"
        f"    {{{', '.join(str(b) for b in digest)}}},\n"
        f"    {globals_size}, {len(probe_rows)}, {len(site_rows)}, {len(object_rows)}, 0\n"
        "};\n")
    # Required ABIs: every binary named in a probe point; the -c target adds its own.
    program = Program(source + trailer, digest, tr.formats, frozenset(required), globals_size,
                      needs_wait, timers, all_sites, warnings=tr.warnings, plans=all_plans,
                      scalars={n: (v.offset, v.type, v.size) for n, v in tr.globals.items()
                               if v.array is None and v.type in (LONG, STRING)},
                      report=tr.report)
    program.return_plans = [(f"{s.name}@{s.func_addr:#x}", str(r)) for s, r in return_plans]
    return program


def _iter_nodes(node: object, prune: tuple[type, ...] = ()) -> Iterator[object]:
    """Every AST node below `node` (dataclass fields, tuples), depth first; not
    below a node of a `prune` type."""
    yield node
    if isinstance(node, tuple):
        for item in node:
            yield from _iter_nodes(item, prune)
    elif dataclasses.is_dataclass(node) and not isinstance(node, (type, *prune)):
        for f in dataclasses.fields(node):
            if f.name != "loc":
                yield from _iter_nodes(getattr(node, f.name), prune)


def _entry_values(probe: ast.Probe, scope: Scope) -> list[ast.Expr]:
    """What a .return probe needs from its entry (entry.py): each `@entry(x)` and,
    as in stap, each `$param` outside one (its value at the entry)."""
    returns = bool(scope.sites) and all(isinstance(s, FunctionSite) and s.is_return
                                        for s in scope.sites)
    return [n for n in _iter_nodes(probe.body, (ast.Entry, ast.Defined))
            if isinstance(n, ast.Entry) or (returns and isinstance(n, ast.TargetSymbol)
                                            and _is_param_name(n.name))]


def counter_at(index: int) -> int:
    """Where counter `index` is in a thread's block: after the sequence word."""
    return 8 + 8 * index


def _update_target(e: object) -> ast.Expr | None:
    """The lvalue of `x++`, `x--`, `x += v`, `x -= v` (prefix or not), else None."""
    if isinstance(e, ast.IncDec):
        return e.operand
    if isinstance(e, ast.Assign) and e.op in ("+=", "-="):
        return e.target
    return None


def _counter_update(e: object) -> ast.Symbol | None:
    """The global target of `x++`, `x--`, `x += v`, `x -= v`, else None."""
    t = _update_target(e)
    return t if isinstance(t, ast.Symbol) else None


def _kcount_update(e: object) -> ast.Index | None:
    """The array element of `c[k]++`, `c[k] -= v`, ..., else None."""
    t = _update_target(e)
    return t if isinstance(t, ast.Index) and isinstance(t.base, ast.Symbol) else None


def _find_atomic_globals(script: ast.Script, tr: Translator) -> set[str]:
    """Long scalars whose every write is a statement-level counter update.

    Those are updated with one atomic add and read with an atomic load, so
    probes that touch nothing else run without the globals lock (a counting
    probe then costs a few ns, not a lock round trip)."""
    candidates = {n for n, v in tr.globals.items() if v.array is None and v.type == LONG}
    statement_level: set[int] = set()
    for node in _iter_nodes((script.probes, script.functions)):
        if isinstance(node, ast.ExprStatement) and _counter_update(node.expr) is not None:
            statement_level.add(id(node.expr))
    for node in _iter_nodes((script.probes, script.functions)):
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
    for scope in tr.scopes.values():
        candidates -= set(scope.locals)
    return candidates


def _find_pstat_globals(script: ast.Script, tr: Translator) -> set[str]:
    """Scalar statistics never deleted: their `<<<` goes to per-thread slots.

    A delete would have to clear slots other threads are writing, so a deleted
    statistic keeps the one locked struct pd_stat."""
    stats = {n for n, v in tr.globals.items() if v.array is None and v.type == STAT}
    for node in _iter_nodes((script.probes, script.functions)):
        if isinstance(node, ast.Delete) and isinstance(node.target, ast.Symbol):
            stats.discard(node.target.name)
    for scope in tr.scopes.values():
        stats -= set(scope.locals)
    return stats


def _find_kstat_globals(script: ast.Script, tr: Translator) -> set[str]:
    """Statistic arrays whose `<<<` goes to per-thread tables (kstat.py): all of them but
    `global s%` (dropping the oldest entry needs one table) and names a local shadows."""
    found = {n for n, v in tr.globals.items() if v.array is not None and v.array.value == STAT
             and not (v.decl is not None and v.decl.wrap)}
    for scope in tr.scopes.values():
        found -= set(scope.locals)
    return found


def _find_kcount_globals(script: ast.Script, tr: Translator) -> set[str]:
    """Long arrays used only as keyed counters: their adds go to per-thread tables.

    Conservative: every write is a statement-level `c[K]++`/`--`/`+= E`/`-= E` or a
    `delete`, every other mention is `c[K]`, `[K] in c` or `foreach (... in c)`.  An
    assignment, an update used as a value (`x = c[k]++` needs the old value, which
    per-thread sums cannot give), any other use of the name, `global c%` or a local of
    the same name keep the locked map."""
    found = {n for n, v in tr.globals.items() if v.array is not None
             and (v.array.value or LONG) == LONG and not (v.decl is not None and v.decl.wrap)}
    nodes = list(_iter_nodes((script.probes, script.functions)))
    updates = {id(node.expr) for node in nodes if isinstance(node, ast.ExprStatement)
               and _kcount_update(node.expr) is not None}
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
    for scope in tr.scopes.values():
        found -= set(scope.locals)
    return found


def _mapdesc_fields(tr: Translator, var: GlobalVar, value_size: int) -> str:
    """The initializer of an array's struct pd_mapdesc, for values of `value_size`."""
    assert var.array is not None
    ktypes = ", ".join("PD_T_STRING" if k == STRING else "PD_T_LONG" for k in var.array.keys)
    vt = {STRING: "PD_T_STRING", STAT: "PD_T_STAT"}.get(var.array.value or LONG, "PD_T_LONG")
    sd = f"&sd_{var.name}" if var.array.value == STAT else "NULL"
    key_size = tr._key_size(var)
    return (f"{_c_string(var.name)}, {_capacity(var)}, {_max_entries(var)}, "
            f"{len(var.array.keys)}, {key_size}, {value_size}, {16 + key_size + value_size}, "
            f"{vt}, {{{ktypes}}}, {sd}, {int(bool(var.decl and var.decl.wrap))}")


def _kstat_merge(var: GlobalVar, ptr: str) -> str:
    """Before iterating a keyed statistic: rebuild its merged map from the slots."""
    return f"pd_kstat_merge(c, {ptr}, &kd_{var.name});"


def _stat_name(e: ast.Expr) -> str:
    if isinstance(e, ast.Index) and isinstance(e.base, ast.Symbol):
        return e.base.name
    return e.name if isinstance(e, ast.Symbol) else ""


def _stat_read(var: GlobalVar, ptr: str, pstats: set[str]) -> str:
    """A scalar statistic to read: per-thread slots are merged first."""
    if var.name in pstats:
        return f"((const struct pd_stat *)pd_pstat_read({ptr}))"
    return f"((struct pd_stat *){ptr})"


def _func_signature(info: FuncInfo) -> str:
    params = []
    for p, t in zip(info.decl.params, info.params, strict=True):
        params.append(f"const char *a_{p.name}" if t == STRING else f"int64_t a_{p.name}")
    ret = "const char *" if info.ret == STRING else "int64_t "
    first = "struct pd_ctx *c" + (", char *ret" if info.ret == STRING else "")
    return f"static {ret}f_{info.decl.name}({', '.join([first, *params])})"


def _emit_function(tr: Translator, f: ast.Function) -> list[str]:
    info = tr.funcs[f.name]
    if isinstance(f.body, ast.Embedded):
        return embedded_function_c(_func_signature(info), [
            (p.name, t or LONG) for p, t in zip(f.params, info.params, strict=True)],
            info.ret, f.body.code, _where(f))
    scope = tr.scopes[id(f)]
    em = Emitter(tr, scope)
    em.stmt(f.body)
    params = {p.name for p in f.params}
    copies = []
    for p, t in zip(f.params, info.params, strict=True):
        if t == STRING:
            copies.append(f"    char l_{p.name}[MAXSTRINGLEN]; pd_strcpy(l_{p.name}, a_{p.name});")
        else:
            copies.append(f"    int64_t l_{p.name} = a_{p.name};")
    ret_init = ["    ret[0] = 0;"] if info.ret == STRING else ["    int64_t ret = 0;"]
    nest = ["    if (++c->nesting > MAXNESTING) {",
            f"        c->where = {_where(f)};",
            "        pd_error(c, \"MAXNESTING exceeded\");",
            "        goto out;", "    }"]
    return ["", _func_signature(info), "{", *ret_init, *copies, *em.local_decls(params),
            *em.decls, *nest, *em.lines, "out:", "    c->nesting--;", "    return ret;", "}"]


STAT_EXIT_FIELDS = " @count=%#d @min=%#d @max=%#d @sum=%#d @avg=%#d"


def _exit_report(tr: Translator) -> list[str]:
    """stap prints every global the script writes but never reads, in its formats
    (elaborate.cxx add_global_var_display): longs %#x, strings quoted, stats
    fields %#d, arrays sorted by value, largest first (stats by @count)."""
    lines: list[str] = []
    for var in tr.globals.values():
        if var.read or not var.written:
            continue
        g = f"(c->globals + {var.offset})"
        if var.array is None:
            if var.type == STAT:
                fid = tr.report_format_id(parse_format(f"{var.name}{STAT_EXIT_FIELDS}\n"),
                                          ("stats", var.name, (), "stat"))
                empty = tr.report_format_id(parse_format(f"{var.name} @count=0x0\n"),
                                            ("stats", var.name, (), "empty"))
                lines += [f"    {{ const struct pd_stat *s_ = "
                          f"{_stat_read(var, g, tr.pstat_globals)};",
                          f"      if (!s_->count) {{ pd_rec_open(c, PD_REC_PRINTF, {empty}, 0); "
                          "pd_rec_close(c); }",
                          f"      else {{ pd_rec_open(c, PD_REC_PRINTF, {fid}, 5); "
                          "pd_rec_i64(c, s_->count); pd_rec_i64(c, s_->min); "
                          "pd_rec_i64(c, s_->max); pd_rec_i64(c, s_->sum); "
                          "pd_rec_i64(c, s_->sum / s_->count); pd_rec_close(c); } }"]
            elif var.type == STRING:
                fid = tr.report_format_id(parse_format(f'{var.name}="%#s"\n'),
                                          ("map", var.name, (), STRING))
                lines.append(f"    pd_rec_open(c, PD_REC_PRINTF, {fid}, 1); "
                             f"pd_rec_str(c, (const char *){g}); pd_rec_close(c);")
            else:
                fid = tr.report_format_id(parse_format(f"{var.name}=%#x\n"),
                                          ("map", var.name, (), LONG))
                value = tr.counter_read(var.name) if var.name in tr.atomic_globals \
                    else f"*(int64_t *){g}"
                lines.append(f"    pd_rec_open(c, PD_REC_PRINTF, {fid}, 1); "
                             f"pd_rec_i64(c, {value}); pd_rec_close(c);")
            continue
        assert var.array is not None
        keyfmt = ",".join('"%#s"' if k == STRING else "%#d" for k in var.array.keys)
        valfmt, nvals = {STAT: (STAT_EXIT_FIELDS, 5), STRING: ('="%#s"', 1)}.get(
            var.array.value or LONG, ("=%#x", 1))
        value = var.array.value or LONG
        fid = tr.report_format_id(
            parse_format(f"{var.name}[{keyfmt}]{valfmt}\n"),
            ("stats" if value == STAT else "map", var.name,
             tuple(STRING if k == STRING else LONG for k in var.array.keys),
             "stat" if value == STAT else value))
        max_entries = _max_entries(var)
        lines.append("    {")
        if var.name in tr.kstat_globals:
            lines.append(f"        {_kstat_merge(var, g)}")
        lines.append(f"        static __thread uint8_t *it_[{max_entries}];")
        lines.append(f"        uint32_t n_ = pd_map_sorted({g}, &md_{var.name}, it_, -1, -1);")
        lines.append("        for (uint32_t i_ = 0; i_ < n_; i_++) {")
        lines.append(f"            pd_rec_open(c, PD_REC_PRINTF, {fid}, "
                     f"{len(var.array.keys) + nvals});")
        at = 0
        for k in var.array.keys:
            if k == STRING:
                lines.append(f"            pd_rec_str(c, (const char *)(it_[i_] + {at}));")
            else:
                lines.append(f"            {{ int64_t k_; memcpy(&k_, it_[i_] + {at}, 8); "
                             "pd_rec_i64(c, k_); }")
            at += _type_size(k)
        if var.array.value == STAT:
            lines.append(f"            struct pd_stat *s_ = (struct pd_stat *)(it_[i_] + {at});")
            lines.append("            pd_rec_i64(c, s_->count); pd_rec_i64(c, s_->min); "
                         "pd_rec_i64(c, s_->max); pd_rec_i64(c, s_->sum); "
                         "pd_rec_i64(c, s_->count ? s_->sum / s_->count : 0);")
        elif var.array.value == STRING:
            lines.append(f"            pd_rec_str(c, (const char *)(it_[i_] + {at}));")
        else:
            lines.append(f"            {{ int64_t v_; memcpy(&v_, it_[i_] + {at}, 8); "
                         "pd_rec_i64(c, v_); }")
        lines.append("            pd_rec_close(c);")
        lines.append("        }")
        lines.append("    }")
    return lines


def iter_program_sites(program: Program) -> Iterator[ProbeSite]:
    yield from program.sites


__all__ = ["Program", "HistFormat", "translate", "format_point", "ResolvedPoint",
           "SourceLocation"]
