"""Pass 3d, emit: one C handler `static void probe_N(struct pd_ctx *c)` per probe, one C
function per script function, the descriptors of arrays and statistics.

Globals are read and written at the offsets of the layout; output is a binary record
(format id + values) that the launcher formats or, for a printf of integers only, text
formatted in the handler.  A probe the analysis proves FAST (fast.py) is compiled
`general-regs-only`.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

from ...shmlayout.globals import (
    ENTRY_HEAD,
    PD_HIST_LOG_BUCKETS,
    PD_HIST_MAX_BUCKETS,
    PD_PROBE_FAST,
    PD_PROBE_REGS,
    PD_PROBE_SP,
)
from .. import kstat
from ..elf import dwarf
from ..elf.dwarf_types import Access
from ..elf.functions import FunctionSite
from ..elf.stapsdt import ProbeSite
from ..entry import helpers_c as entry_helpers_c
from ..entry import peek_c as entry_peek_c
from ..entry import pop_c as entry_pop_c
from ..errors import SourceLocation
from ..format import FormatSpec, parse_format
from ..guru import (
    SET_USER,
    embedded_expr_c,
    embedded_function_c,
    function_entry,
    function_exit,
    pragma_globals,
    set_user_c,
    toplevel_c,
)
from ..plan import EntryKeep
from ..program import Format, HistFormat, ReportTag
from ..script import ast
from ..script.walk import entry_values, is_param_name, iter_nodes
from . import autocast, tvars
from .analysis import GlobalPlan, _stat_name, counter_update, kcount_update
from .autocast import DwarfType
from .common import LONG, STAT, STRING, _c_string, _err, _where
from .fast import FastCheck, where_table
from .layout import GlobalsLayout
from .limits import Limits
from .regex import (
    SUBMATCH_FUNCS,
    RegexError,
    compile_regex,
    parse_regex,
    regex_c,
    regex_groups_c,
)
from .types import ARG_FUNCS, PRINT_FUNCS, USER_READS, FuncInfo, GlobalVar, Scope, Types

STAT_OPS = {"count": "PD_STAT_COUNT", "sum": "PD_STAT_SUM", "min": "PD_STAT_MIN",
            "max": "PD_STAT_MAX", "avg": "PD_STAT_AVG", "variance": "PD_STAT_VARIANCE"}
USYM_FUNCS = frozenset({"usymname", "usymdata", "ubacktrace", "print_ubacktrace",
                        "print_ubacktrace_brief", "umodname",
                        "ustack", "ucallers", "sprint_ubacktrace", "print_usyms",
                        "print_ustack", "sprint_usyms", "sprint_ustack"})
REGISTER_FUNCS = frozenset({"register", "u_register", "uaddr", "regparm", "asmlinkage",
                            "fastcall", *ARG_FUNCS})


class Unit:
    """What the handlers of one translation share: the earlier passes' results, and
    what emitting them collects (formats, exit-report tags, whether the unwind tables
    are needed)."""

    def __init__(self, types: Types, plan: GlobalPlan, layout: GlobalsLayout,
                 limits: Limits) -> None:
        self.types = types
        self.plan = plan
        self.layout = layout
        self.limits = limits
        self.globals = types.globals
        self.funcs = types.funcs
        self.formats: list[Format] = []
        self._format_ids: dict[object, int] = {}
        self.report: dict[int, ReportTag] = {}   # exit-report format id -> its tag
        self.entry_index: dict[int, int] = {}   # id(@entry node) -> its value slot
        # per probe: its sites reading values of the function's entry (plan.EntryKeep)
        self.entry_keeps: dict[int, tuple[EntryKeep, ...]] = {}
        self.usym = False   # usymname/ubacktrace used: emit the unwind tables
        self.usymdata = False   # usymdata used: the tables carry data symbols too
        self.is_return = False  # is_return() used: pd_probe_is_return[] is emitted
        # pp() or pn() used: the probe rows name functions by their DWARF declaration
        self.pp_used = False
        self.regexes: dict[bytes, str] = {}   # a =~ pattern -> its matcher (regex.py)
        # the script reads sub-matches (matched(), ngroups()): each =~ records its
        # string, each handler has a struct pd_match for them with this many group
        # values (0: the script reads none)
        self.match_caps = 0

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

    def __init__(self, tr: Unit, scope: Scope, sites: tuple[ProbeSite, ...] = (),
                 fast: bool = False) -> None:
        self.tr = tr
        self.wheres: list[str] | None = [] if fast else None   # FAST: its statements' wheres
        self.fast = fast
        self.scope = scope
        self.sites = sites
        self.lines: list[str] = []
        self.decls: list[str] = []
        self.ntemp = 0
        # key buffers, reused by the statements that follow one another: a buffer lives
        # only while its statement runs (nested statements take the ones after their
        # parent's).  A buffer per statement made gcc's time grow with the square of a
        # probe's statements (2,048 map stores: 20 s).  (decls index, name, size) each.
        self.key_pool: list[tuple[int, str, int]] = []
        self.key_used = 0
        self.outline = False   # statements counted by a call (outline_statements)
        self.indent = 1
        self.err_label = ["out"]
        self.needs_lock = False
        self.iterating: list[str] = []   # the arrays of the enclosing foreach loops

    def temp(self, ctype: str, suffix: str = "") -> str:
        self.ntemp += 1
        name = f"t{self.ntemp}"
        self.decls.append(f"    {ctype} {name}{suffix};")
        return name

    def key_temp(self, size: int) -> str:
        """A key buffer of at least `size` bytes for the current statement."""
        if self.key_used == len(self.key_pool):
            name = self.temp("uint8_t", f"[{size}]")
            self.key_pool.append((len(self.decls) - 1, name, size))
        at, name, have = self.key_pool[self.key_used]
        if size > have:
            self.decls[at] = f"    uint8_t {name}[{size}];"
            self.key_pool[self.key_used] = (at, name, size)
        self.key_used += 1
        return name

    def strtemp(self) -> str:
        return self.temp("char", "[MAXSTRINGLEN]")

    def line(self, text: str) -> None:
        self.lines.append("    " * self.indent + text)

    def action(self, node: object) -> None:
        """Count a statement against MAXACTION.  A FAST handler compares the statement's
        number instead and finds its `where` in the probe's table (fast.where_table)."""
        if self.wheres is None:
            self.line(f"{'pd_action' if self.outline else 'PD_ACTION'}(c, {_where(node)});")
        else:
            self.wheres.append(_where(node))
            self.line(f"PD_ACTION_FAST(c, {len(self.wheres)});")

    def check(self) -> None:
        self.line(f"if (PD_UNLIKELY(c->error)) goto {self.err_label[-1]};")

    # ------------------------------------------------------------ expressions
    def type_of(self, e: ast.Expr) -> str | None:
        return self.tr.types._infer(e, self.scope)

    def local(self, name: str) -> str:
        return f"l_{name}"

    def is_global(self, name: str) -> bool:
        return name not in self.scope.locals and name in self.tr.globals

    def gptr(self, var: GlobalVar) -> str:
        self.needs_lock = True  # every global access but the atomic counters takes the lock
        return f"(c->globals + {self.tr.layout.offset(var.name)})"

    def key_blob(self, var: GlobalVar, keys: tuple[ast.Expr, ...]) -> str:
        assert var.array is not None
        kb = self.key_temp(max(self.tr.limits.key_size(var), 8))
        parts = []
        at = 0
        for k, kt in zip(keys, var.array.keys, strict=True):
            if isinstance(k, ast.Wildcard):
                pass  # not compared (see wildcard_mask)
            elif kt == STRING:
                parts.append(f"pd_key_str({kb} + {at}, {self.expr(k)})")
            else:
                parts.append(f"pd_key_i64({kb} + {at}, {self.expr(k)})")
            at += self.tr.limits.type_size(kt)
        return f"({', '.join([*parts, kb])})"

    def map_api(self, var: GlobalVar, op: str) -> str:
        """`pd_map_OP(map, &md_X, ` or, for a keyed statistic, `pd_kstat_OP(c, area, &kd_X, `."""
        if var.name in self.tr.plan.kstats:
            return f"pd_kstat_{op}(c, {self.gptr(var)}, &kd_{var.name}, "
        return f"pd_map_{op}({self.gptr(var)}, &md_{var.name}, "

    @staticmethod
    def wildcard_mask(keys: tuple[ast.Expr, ...]) -> int:
        return sum(1 << i for i, k in enumerate(keys) if isinstance(k, ast.Wildcard))

    def map_get(self, var: GlobalVar, keys: tuple[ast.Expr, ...], create: bool,
                node: ast.Expr | None = None) -> str:
        if var.name in self.tr.plan.kstats and not create:
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
            if self.is_global(e.name) and e.name in self.tr.plan.counters and not create:
                return f"(&(int64_t){{{self.tr.layout.counter_read(e.name)}}})", LONG, False
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
                return self.hist_bucket(e)
            p, t, _ = self.ptr(e, False)
            if t == STRING:
                return f"({{ char *p_ = {p}; p_ ? p_ : \"\"; }})"
            return f"({{ int64_t *p_ = {p}; p_ ? *p_ : 0; }})"
        if isinstance(e, ast.TargetSymbol):
            return self.target(e)
        if isinstance(e, ast.Cast | ast.AtVar):
            return self.cast(e)
        if isinstance(e, ast.AutoCast):
            return self.autocast(e)
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
            chosen = self.tr.types.defined_choice(e, self.scope)
            if chosen is not None:
                return self.expr(chosen)
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
            read = f"pd_stat_get(c, s_, {STAT_OPS[e.op]})"
            if e.op == "variance":
                # the statistic's one shift: its values were added with it
                shift = self.tr.plan.variance_shift.get(_stat_name(e.operand), 0)
                read = (f"pd_stat_variance(c, s_, {shift}, "
                        f"{int(isinstance(e.operand, ast.Index))})")
            # an array element that does not exist (never added to, or deleted): stap's
            # @count and @sum are 0, the others an empty aggregate
            missing = "0" if e.op in ("count", "sum") else \
                '(pd_error(c, "empty aggregate"), 0)'
            return f"({{ const struct pd_stat *s_ = {sp}; s_ ? {read} : {missing}; }})"
        if isinstance(e, ast.Call):
            return self.call(e)
        if isinstance(e, ast.RegexMatch):
            name = self.tr.regexes[e.pattern.as_bytes()]
            subject = self.expr(e.left)
            found = f"{name}({subject})"
            if self.tr.match_caps:   # stap's last_match: a `!~` records it too
                found = (f"({{ const char *rs_ = {subject}; int64_t rm_ = {name}(rs_); "
                         f"pd_re_attempt(c, &{name}_prog, rs_, rm_); rm_; }})")
            return f"(int64_t)!{found}" if e.op == "!~" else found
        if isinstance(e, ast.Defined):
            return "1" if self._defined(e.operand) else "0"
        if isinstance(e, ast.Embedded):
            for line in self.global_macros(e.code, e.loc):
                self.line(line)
            return embedded_expr_c(e.code)
        if isinstance(e, ast.Entry):
            return f"ent_[{self.tr.entry_index[id(e)]}]"
        raise _err(f"{type(e).__name__} is not supported here", e)

    def global_macros(self, code: str, loc: SourceLocation) -> list[str]:
        """stap's STAP_GLOBAL_GET_NAME(KEYS...) and STAP_GLOBAL_SET_NAME(KEYS..., VALUE)
        for the globals embedded C names in its `pragma:read` and `pragma:write`: the
        C of the script's own read and write of the global (a missing key reads 0 or
        ""), the macro's arguments as the keys and the value."""
        out = []
        for kind in ("read", "write"):
            for name in pragma_globals(code, kind):
                var = self.tr.globals[name]
                keys = var.array.keys if var.array else []
                # argument names no C of the emitter uses for its own temporaries
                params = [f"stap_global_k{i}" for i in range(len(keys))]
                target: ast.Expr = ast.Symbol(name, loc)
                if keys:
                    target = ast.Index(ast.Symbol(name, loc), tuple(
                        ast.Embedded(_embedded_arg(p, t), loc)
                        for p, t in zip(params, keys, strict=True)), loc)
                if kind == "read":
                    macro, c = f"STAP_GLOBAL_GET_{name}", self.expr(target)
                else:
                    vt = var.array.value if var.array else var.type
                    value = ast.Embedded(_embedded_arg("stap_global_v", vt), loc)
                    assign = self.expr(ast.Assign("=", target, value, loc))
                    # a statement in stap; a value here, as `%{ %}` in a statement is one
                    macro, c = f"STAP_GLOBAL_SET_{name}", f"(void)({assign}), 0"
                    params.append("stap_global_v")
                out += [f"#undef {macro}", f"#define {macro}({', '.join(params)}) ({c})"]
        return out

    def cast(self, e: ast.Cast | ast.AtVar) -> str:
        """@cast / @var: the fault-safe reads from the pointer or the global's address."""
        subs = tvars.cast_subscripts(e)
        if isinstance(e, ast.Cast):
            acc = tvars.cast_access(self.sites, e)
            root = self.expr(e.operand)
        else:
            acc = tvars.atvar_access(self.sites, e)
            root = self.atvar_root(e, acc)
        read = tvars.access_c(acc, root, lambda k: self.expr(subs[k]), _where(e))
        if isinstance(e, ast.Cast) and not self.sites and e.module is not None and \
                e.module.startswith("<"):
            return self.abi_guard(read, "m64", e)
        return read

    def atvar_root(self, e: ast.AtVar, acc: Access) -> str:
        """The address of @var's global: plus the load bias of the probe's object, or in a
        script function that of the binary the @var names, looked up in the process."""
        if self.sites:
            return f"(int64_t)(c->bias + {acc.root.address:#x}u)"
        path = _c_string(tvars.atvar_path(self.sites, e))
        return (f"(int64_t)((uint64_t)pd_object_bias_of(c, {path}, {_where(e)}) + "
                f"{acc.root.address:#x}u)")

    def autocast(self, e: ast.AutoCast) -> str:
        """Suffixes on a value that carries a DWARF type (autocast.py): the reads of its
        access from the operand's value, as a @cast's."""
        acc = self.tr.types.autocasts[id(e)]
        t = self.tr.types.dtype(e.operand, self.scope)
        if autocast.pretty_depth(e):
            assert t is not None
            return self.autocast_pretty(t, e)
        subs = tvars.cast_subscripts(e)
        # the operand first: a function it calls sets c->where for its own reads
        self.ntemp += 1
        root = f"ac{self.ntemp}_"
        read = (f"({{ int64_t {root} = {self.expr(e.operand)}; "
                f"{tvars.access_c(acc, root, lambda k: self.expr(subs[k]), _where(e))}; }})")
        # a type from headers may reach a probe of the other ABI through a function
        abi = tvars.header_abi(t.path) if t is not None else None
        return self.abi_guard(read, abi, e) if abi is not None else read

    def target_write(self, tgt: ast.TargetSymbol | ast.Cast | ast.AtVar | ast.AutoCast,
                     value: ast.Expr) -> str:
        """Guru mode's `$var = v`, `$p->m = v`, `@var("g")->m = v`, `@cast(p, "T")->m = v`,
        `x->m = v`, `$return = v`: v stored where the read would load it (tvars.store_c;
        pd_set_user*: a fault is the handler's error), or into the variable's register or
        stack slot (pd_store_arg); the assignment's value is v."""
        self.ntemp += 1
        v = f"tv{self.ntemp}_"
        if isinstance(tgt, ast.TargetSymbol):
            store = self.target_store(tgt, v)
            return (f"({{ int64_t {v} = {self.expr(value)}; c->where = {_where(tgt)}; "
                    f"{store}; {v}; }})")
        acc = self.tr.types.write_access(tgt, self.scope)
        assert acc is not None
        subs = tvars.cast_subscripts(tgt)
        if isinstance(tgt, ast.AtVar):
            root, head = self.atvar_root(tgt, acc), ""
        else:   # the operand first: a function it calls sets c->where for its own reads
            root = f"ac{self.ntemp}_"
            head = f"int64_t {root} = {self.expr(tgt.operand)}; "
        store = tvars.store_c(acc, root, lambda k: self.expr(subs[k]), _where(tgt), v)
        write = (f"({{ {head}int64_t {v} = {self.expr(value)}; c->where = {_where(tgt)}; "
                 f"{store}; {v}; }})")
        t = self.tr.types.dtype(tgt.operand, self.scope) if isinstance(tgt, ast.AutoCast) \
            else None
        abi = tvars.header_abi(t.path) if t is not None else \
            "m64" if isinstance(tgt, ast.Cast) and not self.sites and tgt.module is not None \
            and tgt.module.startswith("<") else None
        return self.abi_guard(write, abi, tgt) if abi is not None else write

    def target_store(self, e: ast.TargetSymbol, v: str) -> str:
        """C storing the C value `v` into `$return` or `$var...` at each site of the probe
        (chosen by the site where they differ)."""
        if e.name == "$return":
            return f"pd_set_return(c, {v})"
        subs = tvars.subscripts(e)
        cases: dict[tuple[str, int], str] = {}
        for site in self.sites:
            assert isinstance(site, FunctionSite)
            acc = tvars.store_access(site, e)
            if acc.root.kind == "param":
                slot = self.tr.types.param_slot(acc.root.name)
                root = f"pd_fetch_arg(c, {slot})"
                cases[(site.path, site.pc)] = tvars.store_c(
                    acc, root, lambda k: self.expr(subs[k]), _where(e), v,
                    functools.partial("pd_store_arg(c, {}, {})".format, slot))
            else:
                root = f"(int64_t)(c->bias + {acc.root.address:#x}u)"
                cases[(site.path, site.pc)] = tvars.store_c(
                    acc, root, lambda k: self.expr(subs[k]), _where(e), v)
        return tvars.by_site(cases)

    def autocast_pretty(self, t: DwarfType, e: ast.AutoCast) -> str:
        """`x->m$`: stap's sprintf of the value's parts, the operand read once; "ERROR"
        if a read faults, as target_pretty."""
        fmt, reads = autocast.pretty(t, e)
        self.ntemp += 1
        root = f"ac{self.ntemp}_"
        nodes: list[ast.Expr] = []
        for acc, literals, string in reads:
            read = ast.Embedded(tvars.access_c(acc, root, literals.__getitem__, _where(e)),
                                e.loc)
            nodes.append(ast.Call("user_string_quoted", (read,), e.loc) if string else read)
        body = self.sprintf(parse_format(fmt), nodes, ast.Call("sprintf", (), e.loc))
        abi = tvars.header_abi(t.path)
        if abi is not None:
            body = f"(sizeof(void *) == {4 if abi == 'm32' else 8} ? {body} : \"ERROR\")"
        return (f"({{ int64_t {root} = {self.expr(e.operand)}; int e_ = c->error; "
                f"const char *r_ = {body}; "
                f"if (!e_ && c->error) {{ c->error = 0; r_ = \"ERROR\"; }} r_; }})")

    def abi_guard(self, read: str, abi: str, e: ast.Expr) -> str:
        """A read of types compiled from headers for `abi` where no probed binary says
        which ABI runs it (begin, end, timers and script functions: the launcher's, m64):
        in a process of the other ABI it is the handler's error, never a read at the
        wrong offsets."""
        word = 4 if abi == "m32" else 8
        msg = _c_string(f"types from headers compiled for {abi} read in a process of "
                        "another ABI")
        return (f"(sizeof(void *) == {word} ? ({read}) : "
                f"(c->where = {_where(e)}, pd_error(c, {msg}), INT64_C(0)))")

    def _defined(self, e: ast.Expr) -> bool:
        return self.tr.types.is_defined(e, self.scope)

    def stat_ptr(self, e: ast.Expr) -> str:
        if isinstance(e, ast.Symbol):
            var = self.tr.globals[e.name]
            return _stat_read(var, self.gptr(var), self.tr.plan.pstats)
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
        count = _literal_int(e.right)
        if e.op in ("<<", ">>") and count is not None and count <= 0:
            # stap folds a shift by a literal count of 0 or less to the value shifted
            # (elaborate.cxx); a count it computes at run time is taken modulo 64
            return f"({a})"
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
            if isinstance(target, ast.Symbol) and target.name in self.tr.plan.pstats:
                # the thread's own slot: no globals lock (pd_pstat.c)
                off = self.tr.layout.offset(target.name)
                add = "pd_fast_pstat_add" if self.fast else "pd_pstat_add"
                return (f"({{ int64_t v_ = {self.expr(e.value)}; {add}(c, c->globals + "
                        f"{off}, v_, {self.statdesc_of(target)}); v_; }})")
            if isinstance(target, ast.Index) and isinstance(target.base, ast.Symbol) and \
                    target.base.name in self.tr.plan.kstats:
                # the thread's own table, under its slot lock only (pd_kstat.c)
                var = self.tr.globals[target.base.name]
                return (f"({{ int64_t v_ = {self.expr(e.value)}; c->where = {_where(target)}; "
                        f"{self.kstat_add()}(c, c->globals + {self.tr.layout.offset(var.name)}, "
                        f"&kd_{var.name}, "
                        f"{self.key_blob(var, target.indexes)}, v_); v_; }})")
            if isinstance(target, ast.Symbol):
                sp = self.stat_ptr(target)
            else:
                p, _, _ = self.ptr(target, True)
                sp = p
            return (f"({{ int64_t v_ = {self.expr(e.value)}; struct pd_stat *s_ = {sp}; "
                    f"if (s_) pd_stat_add(s_, v_, {self.statdesc_of(target)}); v_; }})")
        tgt = e.target
        if isinstance(tgt, ast.TargetSymbol | ast.Cast | ast.AtVar | ast.AutoCast):
            return self.target_write(tgt, e.value)
        if e.op == "=" and self.outline and isinstance(tgt, ast.Index) and \
                isinstance(tgt.base, ast.Symbol) and self.is_global(tgt.base.name):
            var = self.tr.globals[tgt.base.name]
            if var.array is not None and (var.array.value or LONG) == LONG and \
                    var.name not in self.tr.plan.kstats:
                # one call a statement in a handler of many (outline_statements); the
                # value first, then the key, as the inline form evaluates them
                return (f"({{ int64_t v_ = {self.expr(e.value)}; pd_map_set_i64(c, "
                        f"{self.gptr(var)}, &md_{var.name}, "
                        f"{self.key_blob(var, tgt.indexes)}, v_, {_where(tgt)}); }})")
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
        if id(e) in self.tr.types.badvars:   # --skip-badvars
            return "INT64_C(0)"
        if name == "$$name":
            return "c->site->name"
        if name == "$$provider":
            return "c->site->provider"
        if name == "$return" and e.components:   # `$return$`, as $$return shows it
            return f"pd_sprintf({self.strtemp()}, \"%#llx\", " \
                   "(unsigned long long)pd_func_return(c))"
        if name == "$return":
            return "pd_fast_return(c)" if self.fast else "pd_func_return(c)"
        if name == "$$return":
            return f"pd_sprintf({self.strtemp()}, \"return=%#llx\", " \
                   "(unsigned long long)pd_func_return(c))"
        functions = bool(self.sites) and all(isinstance(s, FunctionSite) for s in self.sites)
        if functions and tvars.pretty_depth(e):
            return self.target_pretty(e)
        if name in ("$$parms", "$$vars", "$$locals") and functions:
            return self.function_parms(e)
        if is_param_name(name):
            if not self.scope.in_entry and id(e) in self.tr.entry_index:
                return f"ent_[{self.tr.entry_index[id(e)]}]"   # .return: as at the entry
            if tvars.has_suffix(e) or any(isinstance(s, FunctionSite) and tvars.is_static(s, e)
                                          for s in self.sites):
                return self.target_access(e)
            fetched = f"{self.fetch_arg()}(c, {self.tr.types.param_slot(name[1:])})"
            return tvars.by_site({(s.path, s.pc): tvars.read_c(s, name[1:], fetched)
                                  for s in self.sites if isinstance(s, FunctionSite)}) \
                if self.sites and all(isinstance(s, FunctionSite) for s in self.sites) \
                else fetched
        if name in ("$$parms", "$$vars"):
            t = self.strtemp()
            n = min(len(s.args) for s in self.sites) if self.sites else 0
            if n == 0:
                return '""'
            fmt = " ".join(f"$arg{i + 1}=%#llx" for i in range(n))
            args = ", ".join(f"(unsigned long long)pd_fetch_arg(c, {i})" for i in range(n))
            return f"pd_sprintf({t}, {_c_string(fmt)}, {args})"
        return f"{self.fetch_arg()}(c, {int(name[4:]) - 1})"

    def fetch_arg(self) -> str:
        """The runtime's argument read: FAST handlers' reads loads where they can
        (runtime/pd_fastval.c)."""
        return "pd_fast_arg" if self.fast else "pd_fetch_arg"

    def fast_context(self, e: ast.TargetSymbol) -> bool:
        """Whether a FAST handler may read `e` (fast.py): `$return`, or at sites that are
        no return (or in an @entry operand) `$argN` and a plain parameter (what target()
        reads with pd_fetch_arg)."""
        if id(e) in self.tr.types.badvars or e.components or e.addressof:
            return False
        if e.name == "$return":
            return True
        if not self.scope.in_entry and any(isinstance(s, FunctionSite) and s.is_return
                                           for s in self.sites):
            return False    # (an @entry operand is read at the entry)
        if is_param_name(e.name):
            # a float is widened by pd_fp32_to_fp64, which uses the vector registers
            return id(e) not in self.tr.entry_index and not any(
                isinstance(s, FunctionSite) and (tvars.is_static(s, e) or tvars.is_float32(
                    s, e.name[1:])) for s in self.sites)
        return e.name.startswith("$arg") and e.name[4:].isdigit()

    def target_access(self, e: ast.TargetSymbol,
                      sites: tuple[ProbeSite, ...] | None = None) -> str:
        """`$p->a`, `$arr[i]`, `&$x`, `$static_var`: the fault-safe reads of each site's
        access (tvars.py), chosen by the site when they differ."""
        subs = tvars.subscripts(e)
        cases: dict[tuple[str, int], str] = {}
        for site in self.sites if sites is None else sites:
            assert isinstance(site, FunctionSite)
            acc = tvars.access(site, e)
            root = (f"pd_fetch_arg(c, {self.tr.types.param_slot(acc.root.name)})"
                    if acc.root.kind == "param" else
                    f"(int64_t)(c->bias + {acc.root.address:#x}u)")
            cases[(site.path, site.pc)] = tvars.access_c(
                acc, root, lambda k: self.expr(subs[k]), _where(e))
        return tvars.by_site(cases)

    def target_pretty(self, e: ast.TargetSymbol) -> str:
        """`$var$`, `$var$$`, `$$parms$`...: stap's sprintf of the value's parts (tvars.py),
        "ERROR" if a read faults, as stap's pretty printer catches it."""
        plans = {(s.path, s.pc): tvars.pretty(s, e) for s in self.sites
                 if isinstance(s, FunctionSite)}
        if len(set(plans.values())) > 1:
            raise _err(f"'{e.name}': the functions this probe covers print it differently",
                       e, "use a probe per function")
        fmt, values = next(iter(plans.values()))
        nodes: list[ast.Expr] = []
        for name, comps, string in values:
            parts = tuple(ast.Member(str(v), e.loc) if k == "member" else
                          ast.Subscript(ast.NumberLiteral(int(str(v)), e.loc), e.loc)
                          for k, v in comps)
            sym = ast.TargetSymbol(name, parts, False, e.loc)
            nodes.append(ast.Call("user_string_quoted", (sym,), e.loc) if string else sym)
        body = self.sprintf(parse_format(fmt), nodes, ast.Call("sprintf", (), e.loc))
        return (f"({{ int e_ = c->error; const char *r_ = {body}; "
                f"if (!e_ && c->error) {{ c->error = 0; r_ = \"ERROR\"; }} r_; }})")

    def function_parms(self, e: ast.TargetSymbol) -> str:
        """stap's `$$parms`, `$$locals`, `$$vars` of a function or statement probe:
        "a=0x1 p={...} buf=[...] x=?" (at an entry the locals are not set yet, "?",
        except statics; inside the function each is read where it is there, in stap's
        order: the innermost scope's first), chosen by the site when the probe covers
        several functions."""
        name = e.name
        t = self.strtemp()
        cases: dict[tuple[str, int], str] = {}
        for site in self.sites:
            assert isinstance(site, FunctionSite)
            func = dwarf.function_at(site.path, site.func_addr)
            parts: list[tuple[str, str, list[str]]] = []   # (name, text, its values)
            inside = func is not None and \
                dwarf.site_params(site.path, site.func_addr, site.pc) is not func.params
            for p in tvars.site_vars(site, name) if func is not None else ():
                if p.placeholder:
                    parts.append((p.name, f"{p.name}={p.placeholder}", []))
                elif p.location is None:
                    parts.append((p.name, f"{p.name}=?", []))
                else:
                    fetched = f"pd_fetch_arg(c, {self.tr.types.param_slot(p.name)})"
                    parts.append((p.name, f"{p.name}=0x%llx",
                                  [f"(unsigned long long){tvars.read_c(site, p.name, fetched)}"]))
            for v in func.locals if func is not None and name != "$$parms" else ():
                if inside and not v.static:
                    continue   # site_vars had it, located here
                if v.placeholder or not v.static:
                    parts.append((v.name, f"{v.name}={v.placeholder or '?'}", []))
                    continue
                sym = ast.TargetSymbol(f"${v.name}", (), False, e.loc)
                parts.append((v.name, f"{v.name}=0x%llx",
                              [f"(unsigned long long){self.target_access(sym, (site,))}"]))
            if inside and func is not None:
                order = dwarf.get_dwarf(site.path).scope_names(func, site.pc)
                rank = {n: i for i, n in enumerate(order)}
                parts.sort(key=lambda part: rank.get(part[0], len(rank)))
            fmt = _c_string(" ".join(text for _, text, _ in parts))
            args = [a for _, _, values in parts for a in values]
            cases[(site.path, site.pc)] = \
                f"pd_sprintf({t}, {fmt}{''.join(', ' + a for a in args)})" if args else fmt
        return tvars.by_site(cases, "const char *")

    def usym_call(self, name: str, args: list[str]) -> str:
        """The symbol and backtrace built-ins (runtime/pd_usym.c)."""
        self.tr.usym = True
        if name in ("usymdata", "print_usyms", "print_ustack", "sprint_usyms",
                    "sprint_ustack"):
            self.tr.usymdata = True   # the tables carry data symbols and extents
        if name in ("print_ubacktrace", "print_ubacktrace_brief"):
            fid = self.tr.format_id(parse_format("%s"))
            return f"(pd_print_ubacktrace(c, {fid}, {int(name.endswith('_brief'))}), 0)"
        if name in ("print_usyms", "print_ustack"):
            fid = self.tr.format_id(parse_format("%s"))
            return f"(pd_print_usyms(c, {fid}, {args[0]}), 0)"
        if name == "ustack":
            return f"pd_ustack(c, {args[0]})"
        t = self.strtemp()
        if name in ("sprint_usyms", "sprint_ustack"):
            return f"pd_sprint_usyms(c, {t}, {args[0]})"
        if name == "ubacktrace":
            return f"pd_ubacktrace(c, {t})"
        return f"pd_{name}(c, {t}{''.join(', ' + a for a in args)})"

    def is_return(self) -> str:
        """1 in a `.return` probe: a constant where every point of the probe says, else
        (a function called from probes, a probe on entries and returns) its row's."""
        if self.scope.kind == "probe" and self.sites:
            kinds = {isinstance(s, FunctionSite) and s.is_return for s in self.sites}
            if len(kinds) == 1:
                return "INT64_C(1)" if kinds.pop() else "INT64_C(0)"
        self.tr.is_return = True
        return "(int64_t)pd_probe_is_return[c->probe - pd_probes]"

    def register_call(self, name: str, args: list[str]) -> str:
        """The register and argument built-ins (runtime/pd_uregs.c)."""
        if name in ("register", "u_register"):
            return f"pd_uregister(c, {args[0]}, {int(name == 'register')})"
        if name == "uaddr":
            return "pd_uaddr(c)"
        if name == "regparm":
            return f"(pd_regparm(c, {args[0]}), 0)"
        if name == "asmlinkage":   # no argument in a register: i386's default already
            return "(sizeof(long) == 4 ? (c->regparm = PD_REGPARM_SET) : 0, 0)"
        if name == "fastcall":     # i386: three in registers
            return "(sizeof(long) == 4 ? (c->regparm = PD_REGPARM_SET | 3) : 0, 0)"
        how = ARG_FUNCS[name]
        if how is None:
            return f"pd_uarg64(c, {args[0]})"
        return f"pd_uarg(c, {args[0]}, {how[0]}, {how[1]})"

    def call(self, e: ast.Call) -> str:
        name = e.name
        if name in PRINT_FUNCS:
            return self.print_call(e)
        args = [self.expr(a) for a in e.args]
        now = "pd_fast_gettime_ns(c, " if self.fast else "pd_gettime_ns("
        simple = {"pid": "pd_pid()", "tid": "pd_tid()", "ppid": "pd_ppid()",
                  "uid": "(int64_t)getuid()", "euid": "(int64_t)geteuid()",
                  "gid": "(int64_t)getgid()", "cpu": "(int64_t)sched_getcpu()",
                  "target": "pd_target(c)", "execname": "pd_execname()",
                  "pp": "c->probe->pp", "pn": "PD_PROBE_NAME(c->probe)",
                  # the probed function's name ("" outside function probes)
                  "ppfunc": "(c->site && c->site->nop_len == 0 ? c->site->name : \"\")",
                  "probefunc": "(c->site && c->site->nop_len == 0 ? c->site->name : \"\")",
                  "gettimeofday_s": f"({now}1) / 1000000000)",
                  "gettimeofday_ms": f"({now}1) / 1000000)",
                  "gettimeofday_us": f"({now}1) / 1000)",
                  "gettimeofday_ns": f"{now}1)",
                  "local_clock_ns": f"{now}0)",
                  "get_cycles": "(int64_t)pd_cycles()"}
        if name in simple:
            if name in ("pp", "pn"):
                self.tr.pp_used = True
            return simple[name]
        if name == "exit":
            return "(pd_exit(c), 0)"
        if name in USYM_FUNCS:
            return self.usym_call(name, args)
        if name in REGISTER_FUNCS:
            return self.register_call(name, args)
        if name == "is_return":
            return self.is_return()
        if name == "log":
            fid = self.tr.format_id(parse_format("%s\n"))
            tmp = self.strtemp()
            return (f"(pd_strcpy({tmp}, {args[0]}), pd_rec_open(c, PD_REC_PRINTF, {fid}, 1), "
                    f"pd_rec_str(c, {tmp}), pd_rec_close(c), 0)")
        if name == "error":
            return f"(pd_error(c, \"%s\", {args[0]}), 0)"
        if name == "raise":
            return f"(pd_raise(c, {args[0]}), 0)"
        if name == "system":
            return f"(pd_system(c, {args[0]}), 0)"
        if name == "warn":
            return f"(pd_warn_probe(c, {args[0]}), 0)"
        if name == "strlen":
            return f"(int64_t)strlen({args[0]})"
        if name in ("matched", "matched_str"):
            return f"pd_re_matched(c, {self.strtemp()}, {args[0] if args else '0'})"
        if name == "ngroups":
            return "pd_re_ngroups(c)"
        if name == "abs":
            return f"({{ int64_t a_ = {args[0]}; a_ < 0 ? (int64_t)(0 - (uint64_t)a_) : a_; }})"
        if name == "substr":
            t = self.strtemp()
            ln = args[2] if len(args) > 2 else "MAXSTRINGLEN"
            return f"pd_substr({t}, {args[0]}, {args[1]}, {ln})"
        if name == "isinstr":
            return f"(int64_t)(strstr({args[0]}, {args[1]}) != NULL)"
        if name == "strtol":
            return f"pd_strtol({args[0]}, {args[1] if len(args) > 1 else '10'})"
        if name in ("stringat", "randint"):
            return f"pd_{name}(c, {', '.join(args)})"
        if name == "strpos":
            return f"pd_strpos({args[0]}, {args[1]})"
        if name == "ctime":
            if not args:
                args = ["(pd_gettime_ns(1) / 1000000000)"]
            return f"pd_ctime(c, {self.strtemp()}, {args[0]})"
        if name == "errno_p":
            return f"pd_errno_p({args[0]})"
        if name == "isdigit":
            return f"(int64_t)((unsigned)({args[0]})[0] - '0' < 10)"
        if name == "uarch_bytes":   # the probed process's ABI (the module's)
            return "(int64_t)sizeof(long)"
        if name == "returnval":
            return "pd_returnval(c)"
        if name == "returnstr":
            return f"pd_returnstr(c, {self.strtemp()}, {args[0]})"
        if name == "errno_str":
            return f"pd_errno_str({self.strtemp()}, {args[0]})"
        if name == "string_quoted":
            return f"pd_text_str({self.strtemp()}, {args[0]}, -1, 1)"
        if name == "str_replace":
            t = self.strtemp()
            return f"pd_str_replace({t}, {args[0]}, {args[1]}, {args[2]})"
        if name == "user_string" and len(args) == 2:
            name = "user_string2"
        if name == "user_string_n" and len(args) == 3:
            name = "user_string_n2"
        if name in ("user_string2", "user_string_n2"):
            t = self.strtemp()
            n = args[1] if name == "user_string_n2" else "MAXSTRINGLEN"
            return f"pd_user_string_safe(c, {t}, {args[0]}, {n}, {args[-1]})"
        if name == "user_string_nofault":   # stap: "" when unreadable, never an error
            return f"pd_user_string_safe(c, {self.strtemp()}, {args[0]}, MAXSTRINGLEN, \"\")"
        if name in SET_USER and name not in self.tr.funcs:
            return set_user_c(name, args, _where(e))
        if name in ("user_string_quoted", "user_string_n_quoted"):
            # stap: the string quoted; the address as 0x... (NULL: 0x0) when unreadable
            t = self.strtemp()
            n = args[1] if len(args) > 1 else "MAXSTRINGLEN"
            raw = f"pd_user_string_safe(c, {t}, a_, {n}, \"\")"
            return (f"({{ int64_t a_ = {args[0]}; "
                    f"(pd_strcpy({t}, \"\"), a_ != 0 && ({raw}[0] || pd_user_read_ok(c, a_))) ? "
                    f"pd_text_str({t}, {t}, -1, 1) : "
                    f"pd_sprintf({t}, \"0x%llx\", (unsigned long long)a_); }})")
        if name in ("user_string_utf16", "user_string_utf32"):
            width = 2 if name.endswith("16") else 4
            return (f"(c->where = {_where(e)}, "
                    f"pd_user_string_utf(c, {self.strtemp()}, {args[0]}, {width}))")
        if name in ("user_buffer_quoted", "user_buffer_quoted_error"):
            raise_ = int(name.endswith("_error"))
            return (f"(c->where = {_where(e)}, pd_user_buffer_quoted(c, {self.strtemp()}, "
                    f"{', '.join(args)}, {raise_}))")
        if name == "text_str":
            return f"pd_text_str({self.strtemp()}, {args[0]}, -1, 0)"
        if name == "text_strn":
            # a length of 0 (or less) is the whole string, as stap has it
            return (f"pd_text_str({self.strtemp()}, {args[0]}, "
                    f"({{ int64_t n_ = {args[1]}; n_ > 0 ? n_ : -1; }}), (int)({args[2]}))")
        fp_ops = {"fp_add": "+", "fp_sub": "-", "fp_mul": "*", "fp_div": "/", "fp_lt": "<",
                  "fp_le": "l", "fp_eq": "="}
        if name in fp_ops:
            return f"pd_fp_op({args[0]}, {args[1]}, '{fp_ops[name]}')"
        if name in ("fp32_to_fp64", "long_to_fp", "fp_sqrt"):
            return f"pd_{name}({args[0]})"
        if name == "string_to_fp":
            return f"(c->where = {_where(e)}, pd_string_to_fp(c, {args[0]}))"
        if name == "fp_to_long":
            if len(args) == 1:   # pydyn's short form: toward zero
                return f"pd_fp_to_long({args[0]}, 1)"
            # stap's (fp, roundingMode, exact): `exact` raises a flag nothing reads
            return (f"({{ int64_t f_ = {args[0]}, m_ = {args[1]}; (void)({args[2]}); "
                    "pd_fp_to_long(f_, m_); })")
        if name == "fp_to_string":
            return f"pd_fp_to_string({self.strtemp()}, {args[0]}, {args[1]})"
        if name == "tokenize":
            return f"pd_tokenize({self.strtemp()}, {args[0]}, {args[1]})"
        if name in ("user_string", "user_string_n"):
            t = self.strtemp()
            n = args[1] if len(args) > 1 else "MAXSTRINGLEN"
            return f"(c->where = {_where(e)}, pd_user_string(c, {t}, {args[0]}, {n}))"
        if name == "@uderef":
            size_lit = e.args[0]
            assert isinstance(size_lit, ast.NumberLiteral)
            return (f"(c->where = {_where(e)}, "
                    f"pd_user_read(c, {args[1]}, {size_lit.value}, 0))")
        if name in ("@uregister", "@kregister"):
            regno = e.args[0]
            assert isinstance(regno, ast.NumberLiteral)
            return (f"(c->where = {_where(e)}, "
                    f"pd_uregno(c, INT64_C({regno.value}), {int(name == '@uregister')}))")
        if name in USER_READS:
            size, signed = USER_READS[name]
            size_c = "sizeof(long)" if size == 0 else str(size)
            if not name.endswith("_error"):
                return f"pd_user_read_or0({args[0]}, {size_c}, {signed})"
            return f"(c->where = {_where(e)}, pd_user_read(c, {args[0]}, {size_c}, {signed}))"
        info = self.tr.funcs[name]
        if info.uses_globals:
            self.needs_lock = True
        # The call site is the caller's `where` while the function runs (its call
        # chain in an error, stap's "called from"): set after the arguments, whose
        # own calls set theirs.
        temps = [f"{'const char *' if t == STRING else 'int64_t '}p{i}_ = {a};"
                 for i, (a, t) in enumerate(zip(args, info.params, strict=True))]
        passed = [f"p{i}_" for i in range(len(args))]
        if info.ret == STRING:
            passed.insert(0, self.strtemp())
        call = f"f_{name}({', '.join(['c', *passed])})"
        return f"({{ {' '.join(temps)}{' ' if temps else ''}c->where = {_where(e)}; {call}; }})"

    def print_call(self, e: ast.Call) -> str:
        name = e.name
        if name in ("printf", "sprintf"):
            fmt = e.args[0]
            assert isinstance(fmt, ast.StringLiteral)
            spec = parse_format(fmt.value, fmt.loc, legacy_p=self.tr.types.script.legacy_p)
            args = list(e.args[1:])
        else:
            args = list(e.args)
            if name in ("printd", "printdln", "sprintd", "sprintdln"):
                if not args or not isinstance(args[0], ast.StringLiteral):
                    raise _err(f"{name}() needs a literal delimiter first", e)
                delim = args.pop(0)
                assert isinstance(delim, ast.StringLiteral)
                sep = delim.value.replace("%", "%%")
            else:
                sep = ""
            if len(args) == 1 and isinstance(args[0], ast.HistOp):
                # stap's print_format of a histogram: println and sprintln add no newline
                return self.print_hist(args[0], to_string=name.startswith("s"))
            pieces = [("%s" if self.type_of(a) == STRING else "%d") for a in args]
            text = sep.join(pieces) + ("\n" if name.endswith("ln") else "")
            spec = parse_format(text, e.loc)
        if name.startswith("s"):
            return self.sprintf(spec, args, e)
        if self.tr.limits.formats_in_probe(spec) or \
                any(not isinstance(p, str) and p.conv == "P" for p in spec.pieces):
            # numbers only, bounded: formatted in the handler into one TEXT record,
            # which the drain joins with its neighbours (millions a second)
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

    def print_hist(self, h: ast.HistOp, to_string: bool) -> str:
        var = self.tr.globals[h.operand.name] if isinstance(h.operand, ast.Symbol) else (
            self.tr.globals[h.operand.base.name]
            if isinstance(h.operand, ast.Index) and isinstance(h.operand.base, ast.Symbol)
            else None)
        if var is None:
            raise _err("histograms need a global statistic", h)
        sp = self.stat_ptr(h.operand)
        if to_string:   # drawn here (pd_hist.c), as the launcher draws a printed one
            return f"pd_stat_sprint_hist(c, {self.strtemp()}, {sp}, &sd_{var.name})"
        fmt = (HistFormat("log") if h.kind == "log" else
               HistFormat("linear", *h.params))
        fid = self.tr.format_id(fmt)
        return f"(pd_stat_emit_hist(c, {sp}, &sd_{var.name}, {fid}), 0)"

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
            elif piece.conv in "diuxXopP":
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
        keys = self.key_used
        try:
            self._stmt(s)
        finally:
            self.key_used = keys      # its key buffers are free for the next statement

    def _stmt(self, s: ast.Stmt) -> None:
        self.action(s.expr if isinstance(s, ast.ExprStatement) else s)
        target = counter_update(s.expr) if isinstance(s, ast.ExprStatement) else None
        kcount = kcount_update(s.expr) if isinstance(s, ast.ExprStatement) else None
        if isinstance(s, ast.ExprStatement) and target is not None and \
                self.is_global(target.name) and target.name in self.tr.plan.counters:
            self.line(self.tr.layout.counter_add(target.name, self.update_delta(s.expr)))
            self.check()
        elif isinstance(s, ast.ExprStatement) and kcount is not None and \
                isinstance(kcount.base, ast.Symbol) and kcount.base.name in self.tr.plan.kcounts:
            # the thread's own table, under its slot lock only (pd_kstat.c)
            var = self.tr.globals[kcount.base.name]
            self.line(f"c->where = {_where(kcount)}; {self.kstat_add()}(c, c->globals + "
                      f"{self.tr.layout.offset(var.name)}, "
                      f"&kd_{var.name}, {self.key_blob(var, kcount.indexes)}, "
                      f"{self.update_delta(s.expr)});")
            self.check()
        elif isinstance(s, ast.ExprStatement):
            self.line(f"(void)({self.expr(s.expr)});")
            self.check()
        elif isinstance(s, ast.If) and (branch := self.tr.types.defined_branch(
                s, self.scope)) is not None:
            self.stmt(branch)
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
            self.action(s)
            self.check()
            self.line(f"int64_t cond_ = {self.expr(s.cond)};")
            self.check()
            self.line("if (!cond_) break;")
            self.indent -= 1
            self.block(s.body)
            self.line("}")
            self.check()
        elif isinstance(s, ast.For):
            if s.init is not None:   # a statement of its own in stap's count
                self.action(s.init)
                self.line(f"(void)({self.expr(s.init)});")
                self.check()
            step = f"(void)({self.expr(s.step)})" if s.step is not None else ""
            self.line(f"for (;; {step}) {{")
            self.indent += 1
            self.action(s)
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

    def kstat_add(self) -> str:
        """A keyed statistic's or counter's add: a FAST handler's saves the vector
        registers around it (runtime/pd_fastval.c)."""
        return "pd_fast_kstat_add" if self.fast else "pd_kstat_add"

    def update_delta(self, e: ast.Expr) -> str:
        """What the counter update `e` (`x++`, `x -= v`, ...) adds, as C."""
        value = self.expr(e.value) if isinstance(e, ast.Assign) else "1"
        op = e.op if isinstance(e, ast.Assign | ast.IncDec) else "+"
        return f"{'' if op[0] == '+' else '-'}(int64_t)({value})"

    def block(self, s: ast.Stmt) -> None:
        self.indent += 1
        self.stmt(s)
        self.indent -= 1

    def hist_buckets(self, h: ast.HistOp) -> int:
        """The buckets of a histogram as stap numbers them (pd_stat_add's layout): log
        128 (64 holds 0), linear underflow, one a step from lo to hi, overflow."""
        if h.kind == "log":
            return PD_HIST_LOG_BUCKETS
        lo, hi, step = h.params
        return min((hi - lo) // step + 3, PD_HIST_MAX_BUCKETS)

    def hist_bucket(self, e: ast.Index) -> str:
        assert isinstance(e.base, ast.HistOp) and len(e.indexes) == 1
        n = self.hist_buckets(e.base)
        return (f"({{ const struct pd_stat *s_ = {self.stat_ptr(e.base.operand)}; "
                f"int64_t b_ = {self.expr(e.indexes[0])}; "
                f"s_ && b_ >= 0 && b_ < {n} ? s_->hist[b_] : 0; }})")

    def foreach_hist(self, s: ast.Foreach, h: ast.HistOp) -> None:
        sp = self.temp("const struct pd_stat *")
        i, lim = self.temp("int64_t"), self.temp("int64_t")
        self.line(f"{sp} = {self.stat_ptr(h.operand)};")
        self.line(f"{lim} = {self.expr(s.limit) if s.limit is not None else '-1'};")
        self.check()
        self.line(f"for ({i} = 0; {sp} && {i} < {self.hist_buckets(h)} && "
                  f"({lim} < 0 || {i} < {lim}); {i}++) {{")
        self.indent += 1
        self.line(f"{self.local(s.keys[0].name)} = {i};")
        if s.value is not None:
            self.line(f"{self.local(s.value.name)} = {sp}->hist[{i}];")
        self.indent -= 1
        self.block(s.body)
        self.line("}")
        self.check()

    def foreach(self, s: ast.Foreach) -> None:
        if isinstance(s.array, ast.HistOp):
            self.foreach_hist(s, s.array)
            return
        assert isinstance(s.array, ast.Symbol)
        var = self.tr.globals[s.array.name]
        assert var.array is not None
        max_entries = self.tr.limits.max_entries(var)
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
        if var.name in self.tr.plan.kstats and var.name not in self.iterating:
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
            at += self.tr.limits.type_size(kt)
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
                    size = self.tr.layout.slots[var.name].size
                    self.line(f"memset({self.gptr(var)}, 0, {size});")
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



OUTLINE_STATEMENTS = 64


def outline_statements(body: ast.Stmt) -> bool:
    """Whether a body has so many statements that each counts itself with a call to
    pd_action: inline, the check is a few instructions a statement, and gcc's time on one
    function grows faster than its size (2,048 statements: seconds per ABI).  Small
    handlers, the hot ones, keep it inline."""
    return sum(1 for n in iter_nodes(body) if isinstance(n, ast.Stmt)) > OUTLINE_STATEMENTS


def _entry_handler(tr: Unit, pi: int, scope: Scope,
                   nodes: list[ast.Expr]) -> tuple[list[str], int]:
    """The hidden entry handler of a .return probe using @entry (entry.py), and its
    pd_probes.locks: the globals lock, or FAST (fast.py) and PD_PROBE_REGS (the push
    reads sp; PD_PROBE_SP where no value reads the context) when every value is a FAST
    value."""
    operands = [n.operand if isinstance(n, ast.Entry) else n for n in nodes]
    scope.in_entry = True
    try:
        check = FastCheck(tr.plan, Emitter(tr, scope, scope.sites).fast_context)
        fast = all(check.value(o) for o in operands)
        em = Emitter(tr, scope, scope.sites, fast=fast)
        em.line("int64_t v_[PD_ENTRY_VALS] = {0};")
        for k, o in enumerate(operands):
            if fast:    # a statement of a FAST handler: its number against MAXACTION
                em.action(o)
            em.line(f"v_[{k}] = {em.expr(o)};")
            em.check()
        em.line(f"pd_entry_push(c, {pi}, v_);")
    finally:
        scope.in_entry = False
    locks = _fast_locks(check.reads_context, True) if fast else int(em.needs_lock)
    return (["", *(where_table(pi, em.wheres, "_entry") if em.wheres is not None else []),
             f"static {'PD_FAST_FN ' if fast else ''}void probe_{pi}_entry(struct pd_ctx *c)",
             "{", *em.local_decls(set()), *em.decls, *_match_decls(tr, fast), *em.lines,
             "out:", "    return;", "}"], locks)


def _fast_locks(reads_context: bool, entry_frames: bool) -> int:
    """pd_probes.locks of a FAST handler: PD_PROBE_REGS when it reads a context value or
    pushes or pops `@entry` frames, which are found by the stack pointer alone: then,
    reading nothing else, also PD_PROBE_SP."""
    regs = PD_PROBE_REGS if reads_context or entry_frames else 0
    return PD_PROBE_FAST | regs | (PD_PROBE_SP if entry_frames and not reads_context else 0)


def _match_decls(tr: Unit, fast: bool) -> list[str]:
    """A handler's struct pd_match, in a script that reads sub-matches: what its `=~`
    leave matched() (stap keeps it in the probe's context, as c->match does).  A FAST
    handler has no `=~` and calls nothing that could read it."""
    if not tr.match_caps or fast:
        return []
    return [f"    int32_t mcaps_[{tr.match_caps}];",
            "    struct pd_match m_;",
            "    m_.prog = NULL;",
            "    m_.caps = mcaps_;",
            "    c->match = &m_;"]


def _literal_int(e: ast.Expr) -> int | None:
    """The value of a number literal, negated or not."""
    if isinstance(e, ast.NumberLiteral):
        return e.value
    if isinstance(e, ast.Unary) and e.op == "-" and isinstance(e.operand, ast.NumberLiteral):
        return -e.operand.value
    return None


def _mapdesc_fields(tr: Unit, var: GlobalVar, value_size: int) -> str:
    """The initializer of an array's struct pd_mapdesc, for values of `value_size`."""
    assert var.array is not None
    ktypes = ", ".join("PD_T_STRING" if k == STRING else "PD_T_LONG" for k in var.array.keys)
    vt = {STRING: "PD_T_STRING", STAT: "PD_T_STAT"}.get(var.array.value or LONG, "PD_T_LONG")
    sd = f"&sd_{var.name}" if var.array.value == STAT else "NULL"
    key_size = tr.limits.key_size(var)
    return (f"{_c_string(var.name)}, {tr.limits.capacity(var)}, {tr.limits.max_entries(var)}, "
            f"{len(var.array.keys)}, {key_size}, {value_size}, "
            f"{ENTRY_HEAD + key_size + value_size}, "
            f"{vt}, {{{ktypes}}}, {sd}, {int(bool(var.decl and var.decl.wrap))}, "
            f"{int(bool(var.decl and var.decl.size))}")


def _kstat_merge(var: GlobalVar, ptr: str) -> str:
    """Before iterating a keyed statistic: rebuild its merged map from the slots."""
    return f"pd_kstat_merge(c, {ptr}, &kd_{var.name});"


def _stat_read(var: GlobalVar, ptr: str, pstats: frozenset[str]) -> str:
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


def _embedded_arg(c_name: str, t: str | None) -> str:
    """A macro argument as an embedded expression of the global's type: a string a
    pointer, a long not one, else the C does not compile (a void value), as stap's
    macros of C types refuse a mismatch (buildko/global_access.stp)."""
    pointer = f"__builtin_classify_type({c_name}) == 5"   # gcc's pointer_type_class
    if t == STRING:
        return f"/* string */ __builtin_choose_expr({pointer}, {c_name}, (void)0)"
    return f"__builtin_choose_expr({pointer}, (void)0, {c_name})"


def _emit_function(tr: Unit, f: ast.Function) -> list[str]:
    info = tr.funcs[f.name]
    scope = tr.types.func_scopes[f.name]
    if isinstance(f.body, ast.Embedded):
        em = Emitter(tr, scope)
        macros = em.global_macros(f.body.code, f.body.loc)
        return embedded_function_c(_func_signature(info), [
            (p.name, t or LONG) for p, t in zip(f.params, info.params, strict=True)],
            info.ret, f.body.code, _where(f), [*em.decls, *em.lines, *macros])
    em = Emitter(tr, scope)
    em.outline = outline_statements(f.body)
    em.stmt(f.body)
    params = {p.name for p in f.params}
    copies = []
    for p, t in zip(f.params, info.params, strict=True):
        if t == STRING:
            copies.append(f"    char l_{p.name}[MAXSTRINGLEN]; pd_strcpy(l_{p.name}, a_{p.name});")
        else:
            copies.append(f"    int64_t l_{p.name} = a_{p.name};")
    ret_init = ["    ret[0] = 0;"] if info.ret == STRING else ["    int64_t ret = 0;"]
    return ["", _func_signature(info), "{", *ret_init, *copies, *em.local_decls(params),
            *em.decls, *function_entry(), *em.lines, "out:", *function_exit(),
            "    return ret;", "}"]




class Handlers(NamedTuple):
    """The emit pass's output: C of the descriptors, functions and handlers, and per
    probe (by index in the script) its pd_probe.locks bits and, for a probe reading
    entry values, its hidden entry handler's."""

    c_lines: list[str]
    locks: list[int]                 # PD_PROBE_LOCKS | PD_PROBE_FAST
    entry_locks: dict[int, int]      # probes with an entry handler: its pd_probes.locks


def emit(script: ast.Script, unit: Unit) -> Handlers:
    """Pass 3d: descriptors, functions and one handler per probe."""
    out: list[str] = []
    for var in unit.globals.values():
        if var.type == STAT or (var.array and var.array.value == STAT):
            lo, hi, step = var.hist_linear or (0, 0, 1)
            out.append(f"static const struct pd_statdesc sd_{var.name} = "
                       f"{{{int(var.hist_log)}, {int(var.hist_linear is not None)}, "
                       f"{lo}, {hi}, {step}, {int(var.name in unit.plan.variance)}, "
                       f"{unit.plan.variance_shift.get(var.name, 0)}}};")
        if var.array is not None:
            out.append(f"static const struct pd_mapdesc md_{var.name} = "
                       f"{{{_mapdesc_fields(unit, var, unit.limits.type_size(var.array.value))}}};")
            lay = unit.layout.kstats.get(var.name)
            if lay is not None:
                out.extend(kstat.descriptors_c(var.name, lay,
                                               _mapdesc_fields(unit, var, lay.value_size)))
    out.append("")
    every = list(iter_nodes((script.probes, script.functions)))
    if any(isinstance(n, ast.Call) and n.name in SUBMATCH_FUNCS for n in every):
        unit.match_caps = 2 * max([1] + [parse_regex(n.pattern.as_bytes()).ngroups + 1
                                         for n in every if isinstance(n, ast.RegexMatch)])
    for n in every:
        if isinstance(n, ast.RegexMatch) and n.pattern.as_bytes() not in unit.regexes:
            name = f"re_{len(unit.regexes)}"
            unit.regexes[n.pattern.as_bytes()] = name
            out.extend(regex_c(name, n.pattern.value, compile_regex(n.pattern.as_bytes()),
                               n.pattern.loc))
            if unit.match_caps:
                try:
                    out.extend(regex_groups_c(name, n.pattern.as_bytes()))
                except RegexError as exc:   # its anchored DFA or its rows too large
                    raise _err(f"regular expression too large for matched(): {exc}",
                               n.pattern) from None
    for f in script.functions:
        out.append(_func_signature(unit.funcs[f.name]) + ";")
    for f in script.functions:
        out.extend(_emit_function(unit, f))
    locks: list[int] = []
    entry_locks: dict[int, int] = {}
    entries_of = [entry_values(p, _returns_only(scope))
                  for p, scope in zip(script.probes, unit.types.probe_scopes, strict=True)]
    if any(entries_of) or unit.entry_keeps:
        # a kept entry holds every register, by DWARF number (aarch64: 33)
        out.extend(entry_helpers_c(max([len(n) for n in entries_of]
                                       + ([33] if unit.entry_keeps else []))))
    for nodes in entries_of:
        unit.entry_index.update((id(n), k) for k, n in enumerate(nodes))
    for pi, probe in enumerate(script.probes):
        scope = unit.types.probe_scopes[pi]
        check = FastCheck(unit.plan, Emitter(unit, scope, scope.sites).fast_context)
        guard = _callee_guard(unit, scope)
        # a probe reading the registers kept at the entry sets c->entry_regs, and a
        # callee probe reads the stack: not FAST
        fast = check.is_fast(probe.body) and pi not in unit.entry_keeps and guard is None
        em = Emitter(unit, scope, scope.sites, fast=fast)
        em.outline = outline_statements(probe.body)
        em.stmt(probe.body)
        local_decls = [*em.local_decls(set()), *em.decls]
        assert not fast or all(d.lstrip().startswith("uint8_t t") for d in local_decls), \
            "a FAST handler has no local but key buffers"
        locks.append(int(em.needs_lock)
                     | (_fast_locks(check.reads_context, bool(entries_of[pi])) if fast else 0))
        pop: list[str] = []
        if entries_of[pi]:
            pop = ["    int64_t ent_[PD_ENTRY_VALS];", *entry_pop_c(pi)]
            handler, entry_locks[pi] = _entry_handler(unit, pi, scope, entries_of[pi])
            out.extend(handler)
        elif pi in unit.entry_keeps:
            pop = entry_peek_c(pi, _return_slot(unit.entry_keeps[pi]))
            out.extend(["", f"static void probe_{pi}_entry(struct pd_ctx *c)", "{",
                        f"    pd_entry_keep(c, {pi});", "}"])
            entry_locks[pi] = 0   # no lock, not FAST
        out.extend(["", *(where_table(pi, em.wheres) if em.wheres is not None else []),
                    f"static {'PD_FAST_FN ' if fast else ''}void probe_{pi}(struct pd_ctx *c)",
                    "{", *local_decls, *_match_decls(unit, fast), *pop,
                    *([f"    if (!({guard}))", "        goto out;"] if guard else []),
                    *em.lines,
                    "out:", "    return;", "}"])
    return Handlers(out, locks, entry_locks)


def _return_slot(keeps: tuple[EntryKeep, ...]) -> str:
    """C of the return-address slot of the running call at each site: its CFA (by the
    `.eh_frame` rule there) less a word, where the entry found it (entry.py)."""
    cases = {}
    for k in keeps:
        reg, off = k.cfa
        word = 4 if k.site.machine == "i386" else 8
        cases[(k.site.path, k.site.pc)] = \
            f"(int64_t)((uint64_t)pd_reg(c->regs, {reg}) + {off - word})"
    return tvars.by_site(cases)


# Where a function's return address is at its entry, by machine: on the stack's top
# word (x86), in the link register (aarch64).
_RETURN_ADDRESS_AT_ENTRY = {
    "x86_64": "(uint64_t)*(const uint64_t *)(uintptr_t)pd_reg(c->regs, 7)",
    "i386": "(uint64_t)*(const uint32_t *)(uintptr_t)pd_reg(c->regs, 4)",
    "aarch64": "(uint64_t)pd_reg(c->regs, 30)",
}


def _callee_guard(unit: Unit, scope: Scope) -> str | None:
    """C of the test a `.callee` probe passes before its body: the call returns to one
    of the call sites DWARF names (link-time addresses: less the object's load bias).
    None when no site of the probe is a callee's."""
    callers: dict[tuple[str, int], set[tuple[int, ...]] | None] = {}
    machines: dict[tuple[str, int], str] = {}
    for s in scope.sites:
        key = (s.path, s.pc)
        machines[key] = s.machine
        mine = set(s.callers) if isinstance(s, FunctionSite) and s.callers else None
        have = callers.get(key, set())
        callers[key] = None if mine is None or (key in callers and have is None) \
            else (have or set()) | mine
    if all(v is None for v in callers.values()):
        return None
    cases = {}
    deeper = False
    for key, chains in callers.items():
        if chains is None:
            cases[key] = "1"
            continue
        levels = max(len(ch) for ch in chains)
        deeper |= levels > 1
        # level 1 from the stack's top (or lr); further up through the unwind tables
        reads = [f"uint64_t r0_ = {_RETURN_ADDRESS_AT_ENTRY[machines[key]]} - "
                 "(uint64_t)c->bias;"]
        reads += [f"uint64_t r{k}_ = (uint64_t)pd_ustack_or_zero(c, {k + 1}) - "
                  "(uint64_t)c->bias;" for k in range(1, levels)]
        test = " || ".join("(" + " && ".join(f"r{k}_ == {r:#x}u" for k, r in enumerate(ch))
                           + ")" for ch in sorted(chains))
        cases[key] = f"({{ {' '.join(reads)} {test}; }})"
    if deeper:
        unit.usym = True   # the unwind tables for pd_ustack_or_zero
    return tvars.by_site(cases)


def _returns_only(scope: Scope) -> bool:
    """Every site of the probe is a function's return."""
    return bool(scope.sites) and all(isinstance(s, FunctionSite) and s.is_return
                                     for s in scope.sites)


def prologue(script: ast.Script, defines: dict[str, str]) -> list[str]:
    """The head of the source: the `-D` limits (compiled into both modules; naming them
    puts them into the checksum, so a module built with other limits is never reused),
    the includes (<signal.h>: guru C names signals, as stap's kernel headers let it,
    `raise(%{ SIGUSR2 %})`), the script's top-level guru C."""
    return ["/* Generated by pydyn: one source for every ABI. */",
            *(f"/* -D {k}={v} */" for k, v in sorted(defines.items())),
            '#include "pd_runtime.h"', "#include <sched.h>", "#include <signal.h>",
            "#include <stdlib.h>", "#include <unistd.h>", "", *toplevel_c(script)]
