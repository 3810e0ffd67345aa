"""Pass 3: translate a resolved, planned script into one C source for every ABI.

The sub-passes, each a module with a typed input and output (as SystemTap's
semantic pass and bpftrace's pass manager name theirs):

    (probes)  stap's optimisation (optimize.py) and elision of empty probes, before
              planning (`elide_probes`)
    limits    -D MAXSTRINGLEN / MAXMAPENTRIES           -> Limits
    types     symbols and their types, to a fixpoint    -> Types
    warnings  stap's never-assigned / elided-assignment warnings (for optimize.py)
    analysis  which globals leave the globals lock      -> GlobalPlan
    layout    offsets in the segment's globals area     -> GlobalsLayout
    emit      descriptors, functions, one handler a probe (FAST ones: fast.py) -> Handlers
    report    the exit report of globals never read     -> C lines
    tables    probe, site and object rows with the plans (launcher/plan/) -> Tables

The checksum covers the source and the runtime it is built against (`runtime`).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Sequence

from ..errors import ScriptWarning
from ..plan import SitePlans
from ..program import Program
from ..resolve import Resolution
from ..script import ast
from .analysis import analyse
from .emit import Unit, emit, prologue
from .layout import lay_out
from .limits import Limits
from .optimize import check_symbols
from .optimize import optimize as optimize_script
from .report import exit_report
from .tables import build_tables
from .types import Types, infer_types
from .warnings import deduplicate, elision_warnings, empty_probes

__all__ = ["Program", "elide_probes", "translate"]


def elide_probes(script: ast.Script, resolution: Resolution, *, timing: bool = False
                 ) -> tuple[ast.Script, Resolution, list[ScriptWarning | str], bool]:
    """stap's optimisation of pass 2 (optimize.py; not with -u), then its last step: a
    probe whose body is left empty is dropped with its sites, before they are planned,
    so nothing of it is armed; its points were resolved first (a point that does not
    resolve is still an error).  Returns the script, its resolution, the pass's
    warnings in stap's order (given by translate(`pass2=`) once the script is typed;
    -t, `timing`, elides probes without a word, as stap -t) and whether a probe was
    elided."""
    contextless = [i for i, points in enumerate(resolution.points)
                   if not any(rp.sites for rp in points)]
    optimized = optimize_script(script, contextless)
    script = optimized.script
    gone = set(empty_probes(script))
    elided = [] if timing else [w for i in sorted(gone)
                                for w in elision_warnings(script.probes[i])]
    warnings = deduplicate([*optimized.warnings, *elided])
    if gone:
        keep = [i for i in range(len(script.probes)) if i not in gone]
        resolution = dataclasses.replace(resolution,
                                         points=[resolution.points[i] for i in keep])
        script = dataclasses.replace(script, probes=tuple(script.probes[i] for i in keep))
    return script, resolution, warnings, bool(gone)


def translate(script: ast.Script, resolution: Resolution, plans: SitePlans, *,
              defines: dict[str, str], runtime: bytes,
              warn: Callable[[ScriptWarning | str], None] | None = None,
              optimize: bool = True, skip_badvars: bool = False,
              symbols: Sequence[tuple[str, str]] = (),
              pass2: Sequence[ScriptWarning | str] = (),
              typed: Callable[[ast.Script, Types], None] | None = None) -> Program:
    """`warn` is given each warning once the script is typed: a script in error gets
    its one error only; `optimize` False is -u, where stap's optimisation rounds, which
    give the warnings about unused and never-assigned variables, do not run;
    `skip_badvars` reads target variables that cannot be read where probed as 0;
    `symbols`: (path, ABI) of the objects -d and --ldd name for symbols and unwinding;
    `pass2`: the warnings of the optimisation (elide_probes), given after the types';
    `typed` is given the script as typed (after stap's optimisation) and its Types
    (-p2 prints them)."""
    limits = Limits.from_defines(defines)
    if not optimize:
        check_symbols(script)   # else elide_probes's optimisation checked them first
    types = infer_types(script, resolution, skip_badvars)
    if typed is not None:
        typed(script, types)
    warnings = [*types.warnings, *pass2] if optimize else []
    for w in warnings:
        if warn is not None:
            warn(w)
    plan = analyse(script, types)
    layout = lay_out(types, plan, limits)
    unit = Unit(types, plan, layout, limits)
    unit.entry_keeps = plans.entry_keeps
    handlers = emit(script, unit)
    report = exit_report(unit)
    tables = build_tables(resolution, plans, unit, handlers, report, symbols)

    out = [*prologue(script, defines), *handlers.c_lines]
    if report:
        out.extend(["", "static void probe_exit_report(struct pd_ctx *c)", "{", *report, "}"])
    source = "\n".join([*out, *tables.c_lines]) + "\n"
    digest = hashlib.sha256(source.encode() + runtime).digest()
    trailer = (
        "const struct pd_module_info pd_module = {\n"
        f"    {{{', '.join(str(b) for b in digest)}}},\n"
        f"    {layout.size}, {tables.nprobes}, {tables.nsites}, {tables.nobjects}, 0\n"
        "};\n")
    # Required ABIs: every binary named in a probe point; the -c target adds its own.
    program = Program(source + trailer, digest, unit.formats, tables.required, layout.size,
                      tables.needs_wait, tables.timers, tables.sites, warnings=warnings,
                      plans=tables.plans,
                      scalars={n: (layout.offset(n), v.type, layout.slots[n].size)
                               for n, v in types.globals.items()
                               if v.array is None and v.type in ("long", "string")},
                      report=unit.report, objects=tables.objects)
    program.return_plans = [(f"{s.name}@{s.func_addr:#x}", str(r)) for s, r in tables.return_plans]
    program.build_error = types.too_wide
    return program
