"""Pass 3e, tables: the rows the runtime arms from -- pd_probes (one a probe point,
begin/end/error sorted by priority; a hidden row for each @entry handler), pd_sites
(each site with its argument descriptors and its patch plan; a function's entry row
with its entry and return probes, then its patched exits), pd_objects, and the
initial values of the globals."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import NamedTuple

from ...shmlayout.globals import PD_PROBE_FAST
from ..elf.argspec import ArgKind, ArgSpec
from ..elf.functions import FunctionSite
from ..elf.reader import abi_of_machine
from ..elf.stapsdt import ProbeSite
from ..elf.unwind import unwind_c
from ..plan import PatchPlan, ReturnPlan, SitePlans, plan_c
from ..pointnames import site_names
from ..resolve import Resolution, ResolvedPoint, format_point
from ..script import ast
from .common import _c_string, _err
from .emit import Handlers, Unit

PD_ABI = {"m64": "PD_ABI_X86_64", "m32": "PD_ABI_I386", "aarch64": "PD_ABI_AARCH64"}
PROBE_KIND_C = {"begin": "PD_PROBE_BEGIN", "end": "PD_PROBE_END", "error": "PD_PROBE_ERROR",
                "mark": "PD_PROBE_MARK", "process_begin": "PD_PROBE_PROCESS_BEGIN",
                "process_end": "PD_PROBE_PROCESS_END", "timer": "PD_PROBE_TIMER",
                "thread_begin": "PD_PROBE_THREAD_BEGIN", "thread_end": "PD_PROBE_THREAD_END",
                "function": "PD_PROBE_MARK"}
# Points the runtime fires itself in the processes of the session, optionally only in
# those running one object (pd_probe.object).
PROCESS_EVENTS = ("process_begin", "process_end", "thread_begin", "thread_end")


class Tables(NamedTuple):
    c_lines: list[str]
    nprobes: int
    nsites: int
    nobjects: int
    required: frozenset[str]                 # ABIs of the probed objects
    timers: list[tuple[int, int, int]]       # (probe row, period, randomization)
    needs_wait: bool                         # a probe fires in the target processes
    sites: list[ProbeSite]                   # every site row's site ...
    plans: list[PatchPlan]                   # ... and plan
    return_plans: list[tuple[FunctionSite, ReturnPlan]]
    objects: list[tuple[str, list[str]]]     # pd_objects' paths, each with its probe points


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
    if spec.kind == ArgKind.EXPR:
        # a file-scope compound literal: static storage, an address constant
        ops = ", ".join(f"{{INT64_C({arg}), {op}, {reg}}}" for op, reg, arg in spec.ops)
        return (f"{{0, PD_ARG_EXPR, {spec.size}, {int(spec.signed)}, 0, -1, -1, 1, 0, 0, "
                f"(const struct pd_dwop[]){{{ops}}}}}")
    # Never read: the translator refused any $argN that names it.
    return "{0, PD_ARG_CONST, 8, 0, 0, -1, -1, 1, 0, 0}"


def build_tables(resolution: Resolution, plans: SitePlans, unit: Unit,
                 handlers: Handlers, report: list[str],
                 symbols: Sequence[tuple[str, str]] = ()) -> Tables:
    """Pass 3e: the probe, site and object tables (`report`: the exit report's body,
    run as the last `end` probe; `symbols`: (path, ABI) of the objects -d and --ldd
    add to the symbol and unwind tables)."""
    b = _Builder(resolution, plans, unit, handlers)
    b.symbol_objects = [(path, PD_ABI[abi]) for path, abi in symbols if abi in PD_ABI]
    ordered = [(pi, ri, rp) for pi, points in enumerate(resolution.points)
               for ri, rp in enumerate(points)]
    # begin(N)/end(N)/error(N): lower priorities run first; ties keep source order.
    ordered.sort(key=lambda item: item[2].priority)
    for pi, ri, rp in ordered:
        b.add_point(pi, ri, rp)
    for site, oi, entries, returns in b.functions.values():
        b.add_function(site, oi, entries, returns)
    b.share_addresses()
    if report:   # the exit report: globals written but never read, after `end`
        b.probe_rows.append('    {PD_PROBE_END, 1, probe_exit_report, "end (report)", -1, 0},')
    return Tables(b.render(), len(b.probe_rows), len(b.site_rows), len(b.object_rows),
                  frozenset(b.required), b.timers, b.needs_wait, b.sites, b.plans,
                  b.return_plans, [(path, b.object_points.get(oi, []))
                                   for path, oi in b.objects.items()])


def _by_name(rp: ResolvedPoint, used: bool) -> list[tuple[ResolvedPoint, str, str]]:
    """The point's sites grouped by their pp() and pn() (pointnames.py), each group with
    them: a probe row each; pn is "" where it is pp.  A script that calls neither
    (`used` False) reads no DWARF for them and has a row per pn(), the name runtime
    messages give: a mark's sites share one, not one per address."""
    if rp.kind not in ("mark", "function") or not rp.sites:
        return [(rp, format_point(rp.point), "")]
    groups: dict[tuple[str, str], list[ProbeSite]] = {}
    for site in rp.sites:
        pp, pn = site_names(rp.point, site, rp.program, used)
        key = (pp, "" if pn == pp else pn) if used else (pn, "")
        groups.setdefault(key, []).append(site)
    return [(dataclasses.replace(rp, sites=tuple(sites)), pp, pn)
            for (pp, pn), sites in groups.items()]


class _Builder:
    """The rows of the tables as they are added, and what they need."""

    def __init__(self, resolution: Resolution, plans: SitePlans, unit: Unit,
                 handlers: Handlers) -> None:
        self.resolution, self.site_plans, self.unit = resolution, plans, unit
        self.lock_bits, self.entry_locks = handlers.locks, handlers.entry_locks
        self.probe_rows: list[str] = []
        self.site_rows: list[str] = []
        self.decls: list[str] = []            # argument tables, plans, probe lists
        self.objects: dict[str, int] = {}
        self.object_abis: dict[str, str] = {}
        self.symbol_objects: list[tuple[str, str]] = []   # -d, --ldd: (path, PD_ABI_*)
        self.object_rows: list[str] = []
        self.object_points: dict[int, list[str]] = {}   # object -> the points naming it
        self.required: set[str] = set()
        self.timers: list[tuple[int, int, int]] = []
        self.needs_wait = False
        self.sites: list[ProbeSite] = []      # every site row's site ...
        self.plans: list[PatchPlan] = []      # ... and plan
        self.return_plans: list[tuple[FunctionSite, ReturnPlan]] = []
        self.fast_rows: set[int] = set()      # probe rows of FAST probes
        self.return_rows: set[int] = set()    # probe rows of .return points (is_return())
        self.hidden: dict[tuple[int, int, str], int] = {}   # (probe, point, pp) -> @entry row
        # function probes: one site per entry address, with its entry/return probe rows
        self.functions: dict[tuple[str, int], tuple[FunctionSite, int, list[int], list[int]]] = {}
        # rows at one address (a mark several probes name, a function entry that is also
        # a mark): one of them is armed and runs them all, in script order (pd_runtime.h)
        self.at_address: dict[tuple[int, int], list[tuple[int, int]]] = {}  # (first probe, row)
        self.function_rows: set[int] = set()

    def object_index(self, path: str, abi: str) -> int:
        if path not in self.objects:
            self.objects[path] = len(self.objects)
            self.object_abis[path] = PD_ABI[abi]
            self.object_rows.append(f"    {{{_c_string(path)}, {PD_ABI[abi]}}},")
        return self.objects[path]

    def point_names(self, oi: int, rp: ResolvedPoint) -> None:
        names = self.object_points.setdefault(oi, [])
        if (name := format_point(rp.point)) not in names:
            names.append(name)

    def probe_row(self, kind: str, locks: int, handler: str, pp: str, pn: str, obj: int,
                  period_ns: int) -> None:
        where = f"{handler}_where" if locks & PD_PROBE_FAST else "NULL"
        self.probe_rows.append(
            f"    {{{kind}, {locks}, {handler}, {_c_string(pp)}, {obj}, {period_ns}, "
            f"{where}{f', {_c_string(pn)}' if pn else ''}}},")

    def hidden_entry(self, pi: int, ri: int, pp: str, pn: str) -> int:
        """The probe row of probe pi's @entry handler for its point ri named pp (entry.py)."""
        key = (pi, ri, pp)
        if key not in self.hidden:
            self.hidden[key] = len(self.probe_rows)
            self.probe_row("PD_PROBE_MARK", self.entry_locks[pi], f"probe_{pi}_entry", pp, pn,
                           -1, 0)
            if self.entry_locks[pi] & PD_PROBE_FAST:
                self.fast_rows.add(self.hidden[key])
        return self.hidden[key]

    def add_point(self, pi: int, ri: int, rp: ResolvedPoint) -> None:
        """Probe pi's point ri: a probe row for each pp() and pn() its sites have (the
        point each resolved to, as stap names it), and their marks' site rows (its
        functions' rows come once every probe of a function is known)."""
        for part, pp, pn in _by_name(rp, self.unit.pp_used):
            self._add_point(pi, ri, part, rp, pp, pn)

    def _add_point(self, pi: int, ri: int, rp: ResolvedPoint, written: ResolvedPoint,
                   pp: str, pn: str) -> None:
        pidx = len(self.probe_rows)
        locks = self.lock_bits[pi]
        obj = -1
        if rp.kind in PROCESS_EVENTS and rp.object_path:
            info = self.resolution.objects.get(rp.object_path)
            abi = (abi_of_machine(info.machine) if info else None) or "m64"
            obj = self.object_index(rp.object_path, abi)
            self.required.add(abi)
            self.point_names(obj, written)
        if rp.kind == "never":
            return
        self.probe_row(PROBE_KIND_C.get(rp.kind, "PD_PROBE_BEGIN"), locks, f"probe_{pi}",
                       pp, pn, obj, rp.period_ns)
        if locks & PD_PROBE_FAST:
            self.fast_rows.add(pidx)
        if rp.sites and all(isinstance(s, FunctionSite) and s.is_return for s in rp.sites):
            self.return_rows.add(pidx)
        if rp.kind in ("mark", "function", "timer", *PROCESS_EVENTS):
            self.needs_wait = True
        if rp.kind == "timer":
            self.timers.append((pidx, rp.period_ns, rp.randomize_ns))
        for site in rp.sites:
            site_abi = abi_of_machine(site.machine)
            if site_abi is None:
                raise _err(f"{site.path}: {site.machine} targets are not supported yet",
                           rp.point)
            self.required.add(site_abi)
            oi = self.object_index(site.path, site_abi)
            self.point_names(oi, written)
            if isinstance(site, FunctionSite):
                group = self.functions.setdefault((site.path, site.pc), (site, oi, [], []))
                (group[3] if site.is_return else group[2]).append(pidx)
                if pi in self.entry_locks and pi not in self.site_plans.entry_keeps:
                    group[2].append(self.hidden_entry(pi, ri, pp, pn))
                keep = next((k for k in self.site_plans.entry_keeps.get(pi, ())
                             if k.site == site), None)
                if keep is not None:   # the registers at the entry of the call
                    entry = self.functions.setdefault((keep.entry.path, keep.entry.pc),
                                                      (keep.entry, oi, [], []))
                    row = self.hidden_entry(pi, ri, pp, pn)
                    if row not in entry[2]:
                        entry[2].append(row)
            else:
                self.add_mark(site, oi, pidx)

    def add_mark(self, site: ProbeSite, oi: int, pidx: int) -> None:
        ai = len(self.site_rows)
        self.decls.append(
            f"static const struct pd_argdesc args_{ai}[] = {{"
            + ", ".join(_arg_initializer(a) for a in site.args)
            + ("" if site.args else "{0}") + "};")
        plan = self.site_plans.mark(site)
        plan_decls, plan_init = plan_c(plan, ai, _c_string)
        self.decls.extend(plan_decls)
        self.at_address.setdefault((oi, site.pc), []).append((pidx, ai))
        self.site_rows.append(
            f"    {{{site.pc:#x}, {site.semaphore:#x}, args_{ai}, "
            f"{_c_string(site.provider)}, {_c_string(site.name)}, {oi}, {pidx}, "
            f"{site.nop_len}, {len(site.args)}, {plan_init}}},")
        self.sites.append(site)
        self.plans.append(plan)

    def add_function(self, site: FunctionSite, oi: int, entries: list[int],
                     returns: list[int]) -> None:
        """A function's entry row with its entry and return probes; with patched exits,
        the alternatives after it (pd_runtime.h)."""
        ai = len(self.site_rows)
        fplan = self.site_plans.function(site)
        fargs = [*site.args, *fplan.param_args(self.unit.types.param_names)]
        self.decls.append(f"static const struct pd_argdesc args_{ai}[] = {{"
                          + ", ".join(_arg_initializer(a) for a in fargs) + "};")
        self.decls.append(f"static const uint32_t fprobes_{ai}[] = {{"
                          + ", ".join(str(p) for p in entries + returns) + "};")
        plan = fplan.entry
        plan_decls, plan_init = plan_c(plan, ai, _c_string)
        self.decls.extend(plan_decls)
        rplan = fplan.returns if returns else None
        if rplan is not None:
            self.return_plans.append((site, rplan))
        exits = rplan.exits if rplan else ()
        head = f"    {{{site.pc:#x}, 0, args_{ai}, {_c_string(site.provider)}, "
        self.at_address.setdefault((oi, site.pc), []).append((min(entries + returns), ai))
        self.function_rows.add(ai)
        self.site_rows.append(
            f"{head}{_c_string(site.name)}, {oi}, {(entries + returns)[0]}, 0, {len(fargs)}, "
            f"{plan_init}, fprobes_{ai}, {len(entries)}, {len(returns)}, "
            f"{'PD_FX_HIJACK' if exits else 0}}},")
        self.sites.append(site)
        self.plans.append(plan)
        # a row with one probe is run as a mark's (nentry 0: the FAST mark path, pd_regs
        # as the stub has them); an exit's probes that read registers need the caller's ip
        if exits and entries:
            mark_like = len(entries) == 1
            self.site_rows.append(
                f"{head}{_c_string(site.name)}, {oi}, {entries[0]}, 0, {len(fargs)}, "
                f"{plan_init}, fprobes_{ai}, {0 if mark_like else len(entries)}, 0, "
                "PD_FX_ALT},")
        elif any(ex.in_entry for ex in exits):
            # return probes only, the ret in the entry's window: the entry's stub is that
            # window's code alone (no probe, no handler call), its ret the way to the exit's
            self.site_rows.append(
                f"{head}{_c_string(site.name)}, {oi}, {returns[0]}, 0, {len(fargs)}, "
                f"{plan_init}, fprobes_{ai}, 0, 0, PD_FX_ALT | PD_FX_BARE}},")
        for ex in exits:
            ei = len(self.site_rows)
            exit_decls, exit_init = plan_c(ex.plan, ei, _c_string)
            self.decls.extend(exit_decls)
            mark_like = len(returns) == 1 and returns[0] in self.fast_rows
            self.site_rows.append(
                f"    {{{ex.site.pc:#x}, 0, args_{ai}, {_c_string(site.provider)}, "
                f"{_c_string(site.name)}, {oi}, {returns[0]}, 0, {len(fargs)}, {exit_init}, "
                f"fprobes_{ai} + {len(entries)}, {0 if mark_like else len(returns)}, 0, "
                f"PD_FX_ALT | PD_FX_EXIT{' | PD_FX_IN_ENTRY' if ex.in_entry else ''}}},")
            self.sites.append(dataclasses.replace(ex.site, is_return=True))
            self.plans.append(ex.plan)

    def share_addresses(self) -> None:
        """Rows at one address: the armed one (a function's, which also hooks its return,
        else the first) lists them all in script order; the others are PD_FX_SHARED."""
        for rows in self.at_address.values():
            if len(rows) < 2:
                continue
            rows.sort()
            armed = next((r for _, r in rows if r in self.function_rows), rows[0][1])
            self.decls.append(f"static const uint32_t shared_{armed}[] = {{"
                              + ", ".join(str(r) for _, r in rows) + "};")
            for _, r in rows:
                if r in self.function_rows:   # (the armed one)
                    more = f"shared_{armed}, {len(rows)}"
                elif r == armed:              # a mark's: no function probes, fx 0, the rows
                    more = f"NULL, 0, 0, 0, shared_{armed}, {len(rows)}"
                else:
                    more = "NULL, 0, 0, PD_FX_SHARED"
                self.site_rows[r] = self.site_rows[r][:-len("},")] + f", {more}}},"

    def render(self) -> list[str]:
        out = ["", *self.decls,
               "const struct pd_probe pd_probes[] = {",
               *(self.probe_rows or ["    {0, 0, NULL, NULL, -1, 0},"]), "};",
               "const struct pd_site pd_sites[] = {",
               *(self.site_rows or ["    {0, 0, NULL, NULL, NULL, 0, 0, 0, 0},"]), "};",
               "const struct pd_object pd_objects[] = {",
               *(self.object_rows or ['    {"", 0},']), "};"]
        unit = self.unit
        if unit.usym:
            out.extend(unwind_c(self.objects, _c_string, data=unit.usymdata,
                                abis=self.object_abis, extra=self.symbol_objects))
        if unit.is_return:
            flags = ", ".join("1" if r in self.return_rows else "0"
                              for r in range(len(self.probe_rows)))
            out.append(f"const uint8_t pd_probe_is_return[] = {{{flags or '0'}}};")
        out.extend(["", "void pd_init_globals(uint8_t *g)", "{", "    (void)g;"])
        for var in unit.globals.values():
            if var.decl is not None and var.decl.init is not None:
                init = var.decl.init
                at = unit.layout.offset(var.name)
                if isinstance(init, ast.StringLiteral):
                    out.append(f"    pd_strcpy((char *)(g + {at}), "
                               f"{_c_string(init.as_bytes())});")
                else:
                    out.append(f"    *(int64_t *)(g + {at}) = INT64_C({init.value});")
        out.append("}")
        return out
