"""Pass 3a, symbols and types: every global, function and local of the script, and its
type (long, string, statistic, arrays of them), inferred to a fixpoint as stap's
semantic pass does; unresolved or conflicting types are errors at their use."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..elf import dwarf
from ..elf.argspec import ArgKind
from ..elf.dwarf_types import Access
from ..elf.functions import NARGS, FunctionSite
from ..elf.stapsdt import ProbeSite
from ..errors import ScriptError, ScriptWarning, TargetError
from ..format import parse_format
from ..guru import SET_USER, embedded_is_string, pragma_globals, set_user_params
from ..resolve import Resolution
from ..script import ast
from ..script.walk import is_param_name, iter_nodes
from . import autocast, tvars
from .autocast import DwarfType
from .common import LONG, STAT, STRING, _err
from .regex import RegexError, compile_regex


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
    read: bool = False
    written: bool = False
    hist_log: bool = False
    hist_linear: tuple[int, int, int] | None = None

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
    ret_dtype: DwarfType | None = None   # the DWARF type its returns carry (autocast.py)


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
    "log": ((STRING,), None), "system": ((STRING,), None), "raise": ((LONG,), None),
    "strlen": ((STRING,), LONG), "substr": ((STRING, LONG, LONG), STRING),
    "matched": ((LONG,), STRING), "matched_str": ((), STRING), "ngroups": ((), LONG),
    "isinstr": ((STRING, STRING), LONG), "strtol": ((STRING, LONG), LONG),
    "str_replace": ((STRING, STRING, STRING), STRING),
    "user_string": ((LONG,), STRING), "user_string_n": ((LONG, LONG), STRING),
    "user_string2": ((LONG, STRING), STRING), "user_string_n2": ((LONG, LONG, STRING), STRING),
    "user_string_quoted": ((LONG,), STRING), "user_string_n_quoted": ((LONG, LONG), STRING),
    "user_string_nofault": ((LONG,), STRING),
    "text_str": ((STRING,), STRING), "text_strn": ((STRING, LONG, LONG), STRING),
    "tokenize": ((STRING, STRING), STRING),
    # runtime/pd_tapset.c
    "stringat": ((STRING, LONG), LONG), "strpos": ((STRING, STRING), LONG),
    "randint": ((LONG,), LONG), "ctime": ((LONG,), STRING), "errno_str": ((LONG,), STRING),
    "string_quoted": ((STRING,), STRING), "errno_p": ((LONG,), LONG),
    "isdigit": ((STRING,), LONG), "uarch_bytes": ((), LONG),
    "returnval": ((), LONG), "returnstr": ((LONG,), STRING),
    "fp_add": ((LONG, LONG), LONG), "fp_sub": ((LONG, LONG), LONG),
    "fp_mul": ((LONG, LONG), LONG), "fp_div": ((LONG, LONG), LONG),
    "fp_lt": ((LONG, LONG), LONG), "fp_le": ((LONG, LONG), LONG), "fp_eq": ((LONG, LONG), LONG),
    "fp32_to_fp64": ((LONG,), LONG), "long_to_fp": ((LONG,), LONG), "fp_sqrt": ((LONG,), LONG),
    "fp_to_long": ((LONG,), LONG), "string_to_fp": ((STRING,), LONG),
    "fp_to_string": ((LONG, LONG), STRING),
    "user_char": ((LONG,), LONG), "user_short": ((LONG,), LONG), "user_int": ((LONG,), LONG),
    "user_long": ((LONG,), LONG), "user_int8": ((LONG,), LONG), "user_uint8": ((LONG,), LONG),
    "user_int16": ((LONG,), LONG), "user_uint16": ((LONG,), LONG),
    "user_int32": ((LONG,), LONG), "user_uint32": ((LONG,), LONG),
    "user_int64": ((LONG,), LONG), "user_uint64": ((LONG,), LONG),
    "user_ushort": ((LONG,), LONG), "user_uint": ((LONG,), LONG), "user_ulong": ((LONG,), LONG),
    **{f"{name}_error": ((LONG,), LONG) for name in (
        "user_char", "user_short", "user_ushort", "user_int", "user_long", "user_ulong",
        "user_int8", "user_uint8", "user_int16", "user_uint16", "user_int32", "user_uint32",
        "user_int64", "user_uint64")},
    "user_string_utf16": ((LONG,), STRING), "user_string_utf32": ((LONG,), STRING),
    "user_buffer_quoted": ((LONG, LONG, LONG), STRING),
    "user_buffer_quoted_error": ((LONG, LONG, LONG), STRING),
    "abs": ((LONG,), LONG),
    # symbols and backtraces from the launcher's tables (elf/unwind.py)
    "usymname": ((LONG,), STRING), "ubacktrace": ((), STRING), "print_ubacktrace": ((), None),
    "print_ubacktrace_brief": ((), None),
    "usymdata": ((LONG,), STRING), "umodname": ((LONG,), STRING), "ustack": ((LONG,), LONG),
    "ucallers": ((LONG,), STRING), "sprint_ubacktrace": ((), STRING),
    "print_usyms": ((STRING,), None), "print_ustack": ((STRING,), None),
    "sprint_usyms": ((STRING,), STRING), "sprint_ustack": ((STRING,), STRING),
    # the probe's registers (runtime/pd_uregs.c, stap's registers.stp of each arch)
    "uaddr": ((), LONG), "register": ((STRING,), LONG), "u_register": ((STRING,), LONG),
    "int_arg": ((LONG,), LONG), "uint_arg": ((LONG,), LONG), "long_arg": ((LONG,), LONG),
    "ulong_arg": ((LONG,), LONG), "longlong_arg": ((LONG,), LONG),
    "ulonglong_arg": ((LONG,), LONG), "pointer_arg": ((LONG,), LONG),
    "s32_arg": ((LONG,), LONG), "u32_arg": ((LONG,), LONG), "s64_arg": ((LONG,), LONG),
    "u64_arg": ((LONG,), LONG), "asmlinkage": ((), None), "fastcall": ((), None),
    "regparm": ((LONG,), None), "is_return": ((), LONG),
}
# *_arg(n): stap's _stp_arg(n, sign_extend, truncate); None: longlong_arg's
ARG_FUNCS: dict[str, tuple[int, int] | None] = {
    "int_arg": (1, 1), "s32_arg": (1, 1), "uint_arg": (0, 1), "u32_arg": (0, 1),
    "long_arg": (1, 0), "ulong_arg": (0, 0), "pointer_arg": (0, 0),
    "longlong_arg": None, "ulonglong_arg": None, "s64_arg": None, "u64_arg": None}
# what guru mode writes: context and DWARF values (`$x = v`, `x->m = v`)
Target = ast.TargetSymbol | ast.Cast | ast.AtVar | ast.AutoCast
TARGETS = (ast.TargetSymbol, ast.Cast, ast.AtVar, ast.AutoCast)

MAX_INDEXES = 9   # a map's keys (runtime/pd_runtime.h PD_MAX_KEYS)
PRINT_FUNCS = {"printf", "sprintf", "print", "println", "sprint", "sprintln", "printd",
               "printdln", "sprintd", "sprintdln"}
USER_READS = {"user_char": (1, 1), "user_short": (2, 1), "user_int": (4, 1),
              "user_long": (0, 1), "user_int8": (1, 1), "user_uint8": (1, 0),
              "user_int16": (2, 1), "user_uint16": (2, 0), "user_int32": (4, 1),
              "user_uint32": (4, 0), "user_int64": (8, 1), "user_uint64": (8, 0),
              "user_ushort": (2, 0), "user_uint": (4, 0), "user_ulong": (0, 0)}
# user_int_error(addr) and the others: the same read, an error where addr cannot be
# read (the plain forms are 0 there, as stap's tapset has them)
USER_READS.update({f"{name}_error": how for name, how in list(USER_READS.items())
                   if name != "user_uint"})


def not_global_array(base: ast.Symbol) -> ScriptError:
    return _err(f"'{base.name}' is not a global array", base, f"declare it: global {base.name}")


def scalar_not_array(base: ast.Symbol) -> ScriptError:
    return _err(f"'{base.name}' is a scalar, not an array", base)


def arity_mismatch(base: ast.Symbol, nkeys: int, before: int) -> ScriptError:
    return _err(f"array '{base.name}' used with {nkeys} keys, elsewhere with {before}", base)


def array_without_index(sym: ast.Symbol) -> ScriptError:
    return _err(f"array '{sym.name}' used without an index", sym)


def not_a_statistic(e: ast.Expr) -> ScriptError:
    return _err("aggregate operations need a global statistic", e)


def not_assignable(e: ast.Expr) -> ScriptError:
    return _err("cannot assign to this expression", e)


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
        self.dtypes: dict[str, DwarfType] = {}   # the DWARF type each local carries



class Types:
    """The symbols of a script (globals, functions, each probe's and function's locals)
    and their types, inferred to a fixpoint (`infer`); the emit pass asks it again for
    the type of any expression."""

    def __init__(self, script: ast.Script, resolution: Resolution) -> None:
        self.script = script
        self.resolution = resolution
        self.globals: dict[str, GlobalVar] = {}
        self.funcs: dict[str, FuncInfo] = {}
        self.changed = False
        self.warnings: list[ScriptWarning | str] = []
        # the first array indexed with more keys than a map holds: as in stap, whose
        # maps are C templates of at most MAX_INDEXES keys, the script translates and
        # fails to build
        self.too_wide: ScriptError | None = None
        # --skip-badvars: target variables that cannot be read where probed read as 0
        self.skip_badvars = False
        self.badvars: set[int] = set()   # id() of each such TargetSymbol
        # DWARF parameters a probe reads ($fd): slot k is site argument NARGS + k
        self.param_names: list[str] = []
        # autocasts: the access of each (by id()), and those whose operand has no DWARF
        # type yet (a later local or function return may give it one)
        self.autocasts: dict[int, Access] = {}
        self.untyped: dict[int, tuple[ast.AutoCast, DwarfType | None]] = {}
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
        self.probe_scopes: list[Scope] = []   # by the probe's index in the script
        for points in resolution.points:
            sites = tuple(s for rp in points for s in rp.sites)
            self.probe_scopes.append(Scope("probe", sites=sites,
                                           probe_kinds=tuple(rp.kind for rp in points)))
        self.func_scopes = {f.name: Scope("function", self.funcs[f.name])
                            for f in script.functions}

    def scopes(self) -> list[Scope]:
        """Every probe's and function's scope."""
        return [*self.probe_scopes, *self.func_scopes.values()]

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
            self.untyped = {}
            for probe, scope in zip(self.script.probes, self.probe_scopes, strict=True):
                self._infer_stmt(probe.body, scope)
            for f in self.script.functions:
                if not isinstance(f.body, ast.Embedded):   # guru C: typed by its callers
                    self._infer_stmt(f.body, self.func_scopes[f.name])
                # a parameter its body types (`"foo" . x`) is typed for the callers too,
                # and for a function nobody calls (-u keeps it)
                info = self.funcs[f.name]
                for i, p in enumerate(f.params):
                    if info.params[i] is None and info.locals.get(p.name) is not None:
                        info.params[i] = info.locals[p.name]
                        self.changed = True
            if not self.changed:
                break
        for e, dt in self.untyped.values():
            raise autocast.untyped_error(e, dt)
        self._pragma_globals()
        for name, var in list(self.globals.items()):
            if not var.read and not var.written and var.type is None and (
                    var.array is None or var.array.value is None):
                # stap elides a global the script never uses (the warning is of the
                # optimisation's first round: warnings.never_assigned)
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
        for scope in self.scopes():
            for name, t in scope.locals.items():
                if t is None and name in scope.first_use:
                    raise _err(f"unresolved type for identifier '{name}'",
                               scope.first_use[name], "assign it a value first")

    def _pragma_globals(self) -> None:
        """The globals embedded C names in `/* pragma:read:NAME */` and
        `/* pragma:write:NAME */` are read and written there, as stap's symbol
        resolution counts them (optimize.check_symbols checked the names)."""
        owners: list[tuple[object, Scope]] = [
            *zip(self.script.probes, self.probe_scopes, strict=True),
            *((f, self.func_scopes[f.name]) for f in self.script.functions)]
        for owner, scope in owners:
            for node in iter_nodes(owner):
                if isinstance(node, ast.Embedded):
                    for kind in ("read", "write"):
                        for name in pragma_globals(node.code, kind):
                            var = self.globals[name]
                            var.read |= kind == "read"
                            var.written |= kind == "write"
                            # its STAP_GLOBAL_* macros take the globals lock
                            scope.uses_globals = True
                            if scope.func is not None:
                                scope.func.uses_globals = True

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
                raise array_without_index(sym)
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
            raise not_global_array(base)
        scope.uses_globals = True
        if var.type is not None:
            raise scalar_not_array(base)
        if var.array is None:
            var.array = ArrayType([None] * nkeys, None)
            self.changed = True
        if not var.array.keys:
            var.array.keys = [None] * nkeys
            self.changed = True
        if len(var.array.keys) != nkeys:
            raise arity_mismatch(base, nkeys, len(var.array.keys))
        if nkeys > MAX_INDEXES and self.too_wide is None:
            self.too_wide = _err(f"array '{base.name}' has {nkeys} indexes: a map holds "
                                 f"at most {MAX_INDEXES}", base)
        if write:
            var.written = True
        else:
            var.read = True
        return var

    def _index_type(self, node: ast.Index, scope: Scope, t: str | None = None,
                    write: bool = False) -> str | None:
        if isinstance(node.base, ast.HistOp):
            self._infer(node.base, scope)
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
        if isinstance(e, ast.Cast | ast.AtVar):
            return self._cast_type(e, scope)
        if isinstance(e, ast.AutoCast):
            return self._autocast_type(e, scope)
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
            if isinstance(e.operand, TARGETS):
                self._check_target_write(e.operand, e.op, e, scope)
            self._lvalue(e.operand, scope, LONG)
            return LONG
        if isinstance(e, ast.Assign):
            return self._infer_assign(e, scope)
        if isinstance(e, ast.Ternary):
            chosen = self.defined_choice(e, scope)
            if chosen is not None:   # the other branch may name what is not defined here
                return self._infer(chosen, scope, want)
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
                # lo == hi is one bucket (and under/overflow), as stap's runtime has it
                if step <= 0 or hi < lo:
                    raise _err("@hist_linear needs lo <= hi and step > 0", e)
                if (hi - lo) // step + 3 > 128:
                    raise _err("@hist_linear has too many buckets (at most 125)", e)
                if var.hist_linear not in (None, (lo, hi, step)):
                    raise _err(f"'{var.name}' is used with two different @hist_linear", e)
                var.hist_linear = (lo, hi, step)
            if var.hist_log and var.hist_linear:
                raise _err(f"'{var.name}' is used with both @hist_log and @hist_linear", e)
            return "hist"
        if isinstance(e, ast.Call):
            return self._infer_call(e, scope, want)
        if isinstance(e, ast.Embedded):
            return STRING if embedded_is_string(e.code) else LONG
        if isinstance(e, ast.Defined):
            return LONG
        if isinstance(e, ast.Entry):
            return self._entry_type(e, scope)
        if isinstance(e, ast.Wildcard):
            raise _err("unexpected '*'", e)
        if isinstance(e, ast.RegexMatch):
            self._expect(e.left, STRING, scope)
            try:
                compile_regex(e.pattern.as_bytes())
            except RegexError as exc:
                raise _err(f"bad regular expression: {exc}", e.pattern) from None
            return LONG
        raise _err(f"{type(e).__name__} expressions are not supported yet", e)

    def is_defined(self, e: ast.Expr, scope: Scope) -> bool:
        """`@defined(e)`: whether the target variable or @cast/@var `e` resolves here."""
        try:
            if isinstance(e, ast.AutoCast):
                t = self.dtype(e.operand, scope)
                if t is None:
                    return False
                autocast.access(t, e)
            elif isinstance(e, ast.Cast | ast.AtVar):
                self._cast_type(e, scope)
            elif isinstance(e, ast.TargetSymbol):
                self._target_type(e, scope)
        except ScriptError:
            return False
        return True

    def static_truth(self, cond: ast.Expr, scope: Scope) -> bool | None:
        """A condition made of `@defined(x)`, number literals, `!`, `&&` and `||`
        decided here, as stap's pass 2 folds @defined to a literal and then the
        constant condition; None for a condition known only when it runs, or one
        with no @defined in it (left to the C compiler)."""
        if not any(isinstance(n, ast.Defined) for n in iter_nodes(cond)):
            return None
        return self._truth(cond, scope)

    def _truth(self, cond: ast.Expr, scope: Scope) -> bool | None:
        if isinstance(cond, ast.Defined):
            return self.is_defined(cond.operand, scope)
        if isinstance(cond, ast.NumberLiteral):
            return cond.value != 0
        if isinstance(cond, ast.Unary) and cond.op == "!":
            inner = self._truth(cond.operand, scope)
            return None if inner is None else not inner
        if isinstance(cond, ast.Logical):
            left = self._truth(cond.left, scope)
            right = self._truth(cond.right, scope)
            if cond.op == "&&":
                return False if False in (left, right) else (
                    True if left and right else None)
            return True if True in (left, right) else (
                False if left is False and right is False else None)
        return None

    def defined_choice(self, e: ast.Ternary, scope: Scope) -> ast.Expr | None:
        """`@defined(x) ? a : b` (stap's @choose_defined): the branch taken, decided
        here as stap decides it in pass 2, so that the other is never typed or
        emitted; None for a condition decided only when it runs."""
        truth = self.static_truth(e.cond, scope)
        return None if truth is None else e.then if truth else e.else_

    def defined_branch(self, s: ast.If, scope: Scope) -> ast.Stmt | None:
        """`if (@defined(x)) a else b`: the branch taken, as defined_choice (a missing
        else: an empty block)."""
        truth = self.static_truth(s.cond, scope)
        if truth is None:
            return None
        return s.then if truth else s.else_ or ast.Block((), s.loc)

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
        raise not_a_statistic(e)

    def _lvalue(self, e: ast.Expr, scope: Scope, t: str | None) -> str | None:
        if isinstance(e, ast.Symbol):
            return self._sym_type(e, scope, t, write=True)
        if isinstance(e, ast.Index):
            return self._index_type(e, scope, t, write=True)
        raise not_assignable(e)

    def _infer_assign(self, e: ast.Assign, scope: Scope) -> str | None:
        if isinstance(e.target, TARGETS):
            return self._infer_target_write(e, e.target, scope)
        if e.op == "<<<":
            self._stat_operand(e.target, scope, read=False)
            self._expect(e.value, LONG, scope)
            return LONG
        if e.op == "=":
            vt = self._infer(e.value, scope)
            tt = self._lvalue(e.target, scope, vt)
            if isinstance(e.target, ast.Symbol) and self._var_kind(e.target.name,
                                                                   scope) == "local":
                # the local keeps the DWARF type of what it is given (autocast.py)
                name = e.target.name
                cur = scope.dtypes.get(name)
                new = autocast.merge(cur, self.dtype(e.value, scope))
                if new is not None and new != cur:
                    scope.dtypes[name] = new
                    self.changed = True
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

    def _infer_target_write(self, e: ast.Assign, target: Target, scope: Scope) -> str:
        """Guru mode's `$var = v`, `$p->m = v`, `$arr[i] = v`, `@var("g")->m = v`,
        `@cast(p, "T")->m = v`, `x->m = v`, `$return = v`: a store where the read would
        load (a bitfield's bits merged into their bytes), or into the variable's register
        or stack slot (tvars.store_c); stap's errors where it cannot."""
        self._check_target_write(target, e.op, e, scope)
        self._infer(target, scope)
        self._expect(e.value, LONG, scope)
        if isinstance(target, ast.TargetSymbol):
            if target.name != "$return":
                for site in scope.sites:
                    assert isinstance(site, FunctionSite)
                    tvars.store_access(site, target)
            return LONG
        acc = self.write_access(target, scope)
        if acc is not None:
            tvars.check_store(acc, target)
        return LONG

    def _check_target_write(self, target: Target, op: str, node: ast.Node,
                            scope: Scope) -> None:
        """stap's refusals of a write, in its order: without -g; a context variable or a
        parameter of a .return probe (its value at the entry); any operator but `=`."""
        if not self.script.guru:
            what = {ast.Cast: "write to @cast context variable", ast.AtVar:
                    "write to @var variable", ast.TargetSymbol: "write to target variable"
                    }.get(type(target), "write")
            raise _err(f"{what} not permitted; need stap -g", target)
        if isinstance(target, ast.TargetSymbol):
            name = target.name
            functions = scope.kind == "probe" and bool(scope.sites) and all(
                isinstance(s, FunctionSite) for s in scope.sites)
            if name.startswith("$$") or not functions or (
                    name.startswith("$arg") and name[4:].isdigit()):
                raise _err("cannot write to context variable", target)
            if name != "$return" and any(isinstance(s, FunctionSite) and s.is_return
                                         for s in scope.sites):
                raise _err("write to target variable not permitted in .return probes",
                           target)
            if tvars.pretty_depth(target):
                raise _err("cannot write to pretty-printed variable", target)
        if op != "=":
            raise _err("Only the following assign operator is implemented on target "
                       "variables: =", node)

    def write_access(self, target: ast.Cast | ast.AtVar | ast.AutoCast,
                     scope: Scope) -> Access | None:
        """The read access of a written target (None: an autocast not typed yet)."""
        if isinstance(target, ast.Cast):
            return tvars.cast_access(scope.sites, target)
        if isinstance(target, ast.AtVar):
            return tvars.atvar_access(scope.sites, target)
        return self.autocasts.get(id(target))

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

    @staticmethod
    def _one_kind_of_site(e: ast.TargetSymbol, scope: Scope) -> None:
        """A target variable means the value at the entry in a return probe: a probe on
        entries and returns at once could not say which."""
        returns = [isinstance(s, FunctionSite) and s.is_return for s in scope.sites]
        if not scope.in_entry and any(returns) and not all(returns):
            raise _err(f"'{e.name}' in a probe on both entries and returns", e,
                       "use separate probes")

    def _dwarf_param(self, e: ast.TargetSymbol, scope: Scope) -> str:
        """`$name` in a function probe: a DWARF parameter every site has."""
        self._one_kind_of_site(e, scope)
        for site in scope.sites:
            assert isinstance(site, FunctionSite)
            try:
                dwarf.readable_param(site.path, site.func_addr, e.name[1:], site.pc)
            except TargetError as exc:
                raise _err(f"'{e.name}': {exc}", e) from exc
        return LONG

    def _dwarf_access(self, e: ast.TargetSymbol, scope: Scope) -> str:
        """`$p->a`, `$arr[i]`, `&$x`, `$static_var` in a function probe (tvars.py)."""
        self._one_kind_of_site(e, scope)
        for site in scope.sites:
            assert isinstance(site, FunctionSite)
            tvars.access(site, e)
        for index in tvars.subscripts(e):
            self._expect(index, LONG, scope)
        return LONG

    def _cast_type(self, e: ast.Cast | ast.AtVar, scope: Scope) -> str:
        """`@cast(ptr, "struct foo", "PATH")->m`, `@var("g@file.c")->m` (tvars.py)."""
        if not scope.sites and e.module is None:
            # @cast of a named binary or of headers needs no probed binary: the value is
            # the address, no load bias is added; @var of a named binary is at its load
            # address in the process (pd_object_bias_of)
            raise _err(f"{'@cast' if isinstance(e, ast.Cast) else '@var'} needs a process "
                       "probe: its binary gives the DWARF"
                       f"{' and the load address' if isinstance(e, ast.AtVar) else ''}", e,
                       'or name the binary: @var("g", "/path/bin")' if isinstance(e, ast.AtVar)
                       else 'or name the types\' binary or headers: @cast(p, "T", "<hdr.h>")')
        if isinstance(e, ast.Cast):
            self._expect(e.operand, LONG, scope)
            tvars.cast_access(scope.sites, e)
        else:
            tvars.atvar_access(scope.sites, e)
        for index in tvars.cast_subscripts(e):
            self._expect(index, LONG, scope)
        return LONG

    def dtype(self, e: ast.Expr, scope: Scope) -> DwarfType | None:
        """The DWARF type the value of `e` carries (autocast.py), as far as known yet."""
        if isinstance(e, ast.Symbol):
            if self._var_kind(e.name, scope) != "local":
                return None
            return autocast.usable(scope.dtypes.get(e.name))
        if isinstance(e, ast.Assign):
            return self.dtype(e.value, scope) if e.op == "=" else None
        if isinstance(e, ast.Ternary):
            chosen = self.defined_choice(e, scope)
            if chosen is not None:
                return self.dtype(chosen, scope)
            a = self.dtype(e.then, scope)
            return a if a == self.dtype(e.else_, scope) else None
        if isinstance(e, ast.Call) and e.name in self.funcs:
            return autocast.usable(self.funcs[e.name].ret_dtype)
        if isinstance(e, ast.Cast | ast.AtVar):
            return tvars.cast_dtype(scope.sites, e)
        if isinstance(e, ast.TargetSymbol) and scope.kind == "probe" and \
                id(e) not in self.badvars and is_param_name(e.name):
            return tvars.target_dtype(scope.sites, e)
        if isinstance(e, ast.AutoCast) and id(e) in self.autocasts:
            t = self.dtype(e.operand, scope)
            return autocast.of_access(t.path, self.autocasts[id(e)]) if t else None
        return None

    def _autocast_type(self, e: ast.AutoCast, scope: Scope) -> str:
        """Suffixes on an ordinary value: resolved on the DWARF type the value carries;
        one not known yet waits for the fixpoint (a later local or function return)."""
        self._expect(e.operand, LONG, scope)
        for index in tvars.cast_subscripts(e):
            self._expect(index, LONG, scope)
        t = self.dtype(e.operand, scope)
        if t is None:
            cur = scope.dtypes.get(e.operand.name) if isinstance(e.operand, ast.Symbol) else \
                None
            self.untyped[id(e)] = (e, cur)
            return LONG
        self.autocasts[id(e)] = autocast.access(t, e)
        if autocast.pretty_depth(e):
            autocast.pretty(t, e)
            return STRING
        return LONG

    def _target_type(self, e: ast.TargetSymbol, scope: Scope) -> str:
        if id(e) in self.badvars:
            return LONG
        try:
            return self._target_type_checked(e, scope)
        except ScriptError as exc:
            if not self.skip_badvars or not is_param_name(e.name) or not scope.sites or \
                    not all(isinstance(s, FunctionSite) for s in scope.sites) or \
                    tvars.pretty_depth(e):
                raise
            self.badvars.add(id(e))
            loc = e.loc
            self.warnings.append(f"WARNING: {exc.message}: read as 0 (--skip-badvars) at "
                                 f"{loc.file}:{loc.line}:{loc.column}")
            return LONG

    def _target_type_checked(self, e: ast.TargetSymbol, scope: Scope) -> str:
        name = e.name
        functions = scope.kind == "probe" and bool(scope.sites) and all(
            isinstance(s, FunctionSite) for s in scope.sites)
        if functions and tvars.pretty_depth(e) and (
                is_param_name(name) or name in ("$$parms", "$$vars", "$$locals")):
            returns = [isinstance(s, FunctionSite) and s.is_return for s in scope.sites]
            if any(returns) and not scope.in_entry:
                raise _err(f"'{name}' pretty printing is not available in .return probes", e)
            for site in scope.sites:
                assert isinstance(site, FunctionSite)
                tvars.pretty(site, e)
            return STRING
        if functions and is_param_name(name) and (tvars.has_suffix(e) or any(
                isinstance(s, FunctionSite) and tvars.is_static(s, e) for s in scope.sites)):
            return self._dwarf_access(e, scope)
        if name == "$return" and len(e.components) == 1 and tvars.pretty_depth(e):
            # `$return$`: the value as $$return shows it, without the name
            returns = [isinstance(s, FunctionSite) and s.is_return and not scope.in_entry
                       for s in scope.sites or ()]
            if scope.kind != "probe" or not returns or not all(returns):
                raise _err(f"'{name}$' is only available in function .return probes", e)
            return STRING
        if e.components:
            raise _err(f"'{name}' has no members here: marks expose only $argN", e)
        if functions and is_param_name(name):
            return self._dwarf_param(e, scope)
        if functions and name in ("$$parms", "$$vars", "$$locals") and not scope.in_entry and any(
                isinstance(s, FunctionSite) and s.is_return for s in scope.sites):
            raise _err(f"'{name}' is not available in .return probes", e,
                       "name the parameters: $x there is its value at the entry")
        if functions and name in ("$$parms", "$$vars", "$$locals"):
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
        if name in ("$$name", "$$provider", "$$parms", "$$vars") or (
                functions and name == "$$locals"):
            if scope.kind != "probe" or not scope.sites:
                raise _err(f"'{name}' is only available in process mark probes", e)
            return STRING
        returns = [isinstance(s, FunctionSite) and s.is_return and not scope.in_entry
                   for s in scope.sites or ()]
        if name in ("$return", "$$return"):   # function .return probes
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

    def _infer_call(self, e: ast.Call, scope: Scope, want: str | None = None) -> str | None:
        name = e.name
        if name in PRINT_FUNCS:
            for a in e.args:
                if self._infer(a, scope) == STAT:
                    raise _err("a statistic has no value to print", a,
                               "print @count(x), @sum(x), @min(x), @max(x), @avg(x) "
                               "or @hist_log(x)")
            if name in ("printf", "sprintf"):
                fmt = e.args[0]
                assert isinstance(fmt, ast.StringLiteral)
                spec = parse_format(fmt.value, fmt.loc, legacy_p=self.script.legacy_p)
                args = e.args[1:]
                if len(args) != len(spec.arg_types):
                    raise _err(f"format string expects {len(spec.arg_types)} argument(s), "
                               f"{len(args)} given", e)
                for a, t in zip(args, spec.arg_types, strict=True):
                    self._expect(a, t, scope)
            return STRING if name.startswith("s") else None
        user_fn = name in self.funcs
        params: tuple[str, ...]
        if name == "raise" and not self.script.guru:
            raise _err("raise() sends a signal to the probed thread: only in guru mode", e,
                       "run with -g")
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
            if name == "fp_to_long" and len(e.args) == 3:   # stap's (fp, mode, exact)
                params = (LONG, LONG, LONG)
            if name == "ctime" and not e.args:
                params = ()
            # stap's two-argument forms: a default for an unreadable address
            if name in ("user_string", "user_string_n") and len(e.args) == len(params) + 1:
                params = (*params, STRING)
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
        if name == "@uderef":
            # @uderef(SIZE, addr): SIZE bytes of the probed process at addr, unsigned
            size = e.args[0]
            assert isinstance(size, ast.NumberLiteral)
            if size.value not in (1, 2, 4, 8):
                raise _err("@uderef reads 1, 2, 4 or 8 bytes", size)
            self._expect(e.args[1], LONG, scope)
            return LONG
        if name in ("@uregister", "@kregister"):
            # @uregister(N): DWARF register N of the probed thread; @kregister(N): a
            # kernel register, which no pydyn probe context has (an error when run)
            return LONG
        if info is None and name.startswith("@"):
            raise _err(f"'{name}' is not supported", e)
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
        if info.ret is None and want is not None and isinstance(info.decl.body, ast.Embedded):
            # guru C declares no type: its callers' use gives it, as stap's pass 2 has it
            # (`"v" . f()`: a string, whose STAP_RETVALUE the C then must fill as one)
            info.ret = self._set(info.ret, want, e, f"the value of '{name}'")
        return info.ret

    def _infer_stmt(self, s: ast.Stmt, scope: Scope) -> None:
        if isinstance(s, ast.Block):
            for st in s.statements:
                self._infer_stmt(st, scope)
        elif isinstance(s, ast.ExprStatement):
            self._infer(s.expr, scope)
        elif isinstance(s, ast.If):
            branch = self.defined_branch(s, scope)
            if branch is not None:   # the other branch may name what is not defined here
                self._infer_stmt(branch, scope)
                return
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
                dt = autocast.merge(scope.func.ret_dtype, self.dtype(s.value, scope))
                if dt != scope.func.ret_dtype:
                    scope.func.ret_dtype = dt
                    self.changed = True
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
            # the buckets of a histogram: key the bucket's index, value its count
            if len(s.keys) != 1 or s.slice is not None or s.sort is not None:
                raise _err("foreach over a histogram takes one key, no slice and no sort",
                           s.array)
            self._infer(s.array, scope)   # (marks the statistic's histogram kept)
            self._local_type(scope, s.keys[0], LONG)
            if s.value is not None:
                self._local_type(scope, s.value, LONG)
            if s.limit is not None:
                self._expect(s.limit, LONG, scope)
            self._infer_stmt(s.body, scope)
            return
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
        if s.sort is not None and s.sort.aggregate is not None and \
                var.array.value not in (None, STAT):
            raise _err(f"'@{s.sort.aggregate}' sorts an array of statistics; "
                       f"'{var.name}' holds {var.array.value}s", s.sort)
        # stap's no_var_mutation_during_iteration_check: the array may not be written
        # (here or in a function called here) while it is iterated
        for n in iter_nodes(s.body):
            target = n.target if isinstance(n, ast.Assign) else \
                n.operand if isinstance(n, ast.IncDec) else None
            called = n.name if isinstance(n, ast.Call) and n.name in self.funcs else None
            if (isinstance(target, ast.Index) and isinstance(target.base, ast.Symbol)
                    and target.base.name == var.name) or \
                    (called and var.name in self._arrays_written_by(called, set())):
                raise _err(f"variable '{var.name}' modified during 'foreach' iteration",
                           n if isinstance(n, ast.Node) else s)
        self._infer_stmt(s.body, scope)

    def _arrays_written_by(self, func: str, seen: set[str]) -> set[str]:
        """Arrays the function (or one it calls) writes an element of."""
        seen.add(func)
        out: set[str] = set()
        for n in iter_nodes(self.funcs[func].decl.body):
            target = n.target if isinstance(n, ast.Assign) else \
                n.operand if isinstance(n, ast.IncDec) else None
            if isinstance(target, ast.Index) and isinstance(target.base, ast.Symbol):
                out.add(target.base.name)
            if isinstance(n, ast.Call) and n.name in self.funcs and n.name not in seen:
                out |= self._arrays_written_by(n.name, seen)
        return out

    def _infer_delete(self, s: ast.Delete, scope: Scope) -> None:
        t = s.target
        if isinstance(t, TARGETS):
            self._check_target_write(t, "delete", s, scope)
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


def infer_types(script: ast.Script, resolution: Resolution,
                skip_badvars: bool = False) -> Types:
    """Pass 3a: the script's symbols with their types."""
    types = Types(script, resolution)
    types.skip_badvars = skip_badvars
    types.infer()
    return types
