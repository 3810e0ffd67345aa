"""Target variables of function probes through DWARF types: `$p->a`,
`$p->q->name`, `$arr[3]`, `$p->buf[i]`, `&$p->a`, `$global->x`, `$static_var`.

`access(site, e)` gives the `elf.dwarf_types.Access` of a target symbol at one
site: its root is the parameter of that name (its value at the entry, from the
site's argument slot) or, if the function has none, a static variable its
scope sees (a static local, a file-scope or extern global: in memory at its
link-time address plus the load bias).  `access_c` turns the steps into C: each
`Load` is `pd_user_read` (process_vm_readv on ourselves: a bad pointer is the
handler's error, "user memory read fault at 0x...", never a crash; after a first
fault the later reads of the chain add nothing).  A probe on several functions
gets one expression per distinct access, chosen by the site.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from ..elf import dwarf
from ..elf.argspec import ArgKind, ArgSpec
from ..elf.dwarf_expr import ExprError, narrow, split_part
from ..elf.dwarf_types import (
    Access,
    Bits,
    DwarfAccessError,
    Float32,
    Index,
    Load,
    Offset,
    Root,
    find_global,
    find_type,
    find_variable,
    pretty_plan,
    resolve,
)
from ..elf.functions import FunctionSite
from ..elf.stapsdt import ProbeSite
from ..errors import ScriptError, TargetError
from ..script import ast
from .autocast import DwarfType, literal_suffixes, normal, of_access, suffix_components
from .common import _c_string, _err


def has_suffix(e: ast.TargetSymbol) -> bool:
    """Whether `e` needs the type model: members, subscripts or `&`."""
    return e.addressof or any(isinstance(c, ast.Member | ast.Subscript) for c in e.components)


def _components(e: ast.TargetSymbol) -> tuple[list[tuple[str, object]], list[ast.Expr]]:
    comps: list[tuple[str, object]] = []
    subscripts: list[ast.Expr] = []
    for c in e.components:
        if isinstance(c, ast.Member):
            comps.append(("member", c.name))
        elif isinstance(c, ast.Subscript):
            comps.append(("index", len(subscripts)))
            subscripts.append(c.index)
    return comps, subscripts


def subscripts(e: ast.TargetSymbol) -> list[ast.Expr]:
    return _components(e)[1]


def _site_var(site: FunctionSite, name: str) -> dwarf.DwarfParam | None:
    return next((p for p in dwarf.site_params(site.path, site.func_addr, site.pc)
                 if p.name == name), None)


def is_float32(site: FunctionSite, name: str) -> bool:
    """Whether `$name` at `site` is a 4-byte `float`."""
    try:
        p = _site_var(site, name)
    except TargetError:
        return False
    return p is not None and p.is_float and p.size == 4


def read_c(site: FunctionSite, name: str, fetched: str) -> str:
    """C of `$name` at `site` given `fetched`, its location's value: a `float` becomes a
    double's bits, as stap reads one (fp32_to_fp64)."""
    return f"pd_fp32_to_fp64({fetched})" if is_float32(site, name) else fetched


def _type_of(info: dwarf.DwarfInfo, p: dwarf.DwarfParam) -> object:
    return info.dwarf.get_DIE_from_refaddr(p.type_offset) if p.type_offset >= 0 else None


def _where_at(site: FunctionSite) -> str:
    inside = dwarf.site_params(site.path, site.func_addr, site.pc) is not \
        dwarf.site_function(site.path, site.func_addr).params
    return f"at {site.pc:#x}" if inside else "at the entry"


def site_vars(site: FunctionSite, which: str) -> list[dwarf.DwarfParam]:
    """`$$parms`, `$$locals` or `$$vars` at the site (not the statics of `$$locals`):
    the parameters at an entry; inside the function, those in scope there."""
    func = dwarf.site_function(site.path, site.func_addr)
    params = {p.name for p in func.params}
    return [p for p in dwarf.site_params(site.path, site.func_addr, site.pc)
            if which == "$$vars" or (which == "$$parms") == (p.name in params)]


def access(site: FunctionSite, e: ast.TargetSymbol) -> Access:
    """The access of `e` at `site`; ScriptError (at the component it is about)
    when the DWARF cannot give it."""
    name = e.name[1:]
    try:
        func = dwarf.site_function(site.path, site.func_addr)
        info = dwarf.get_dwarf(site.path)
        comps, _ = _components(e)
        p = _site_var(site, name)
        if p is not None:
            if p.location is None:
                raise _err(f"'{e.name}': '{name}' of {func.where} cannot be read "
                           f"{_where_at(site)}: {p.why}", e)
            place = _place(p.location) if e.addressof and not comps else None
            if place is not None:
                raise _err(f"cannot take address of {place}", e)
            ptype = _type_of(info, p)
            acc = resolve(info, Root("param", name), ptype, False, comps, e.addressof)
            part = split_part(acc.root.name)
            if part is not None:   # a member of a struct passed by value
                try:
                    narrow(p.location, *part[1:])
                except ExprError as exc:
                    raise _err(f"'{e.name}': a member of '{name}' {_where_at(site)}: {exc}",
                               e) from None
            return acc
        var = find_variable(info, func.cu_offset, func.die_offset, name)
        if var is None:
            have = " ".join(f"${q.name}" for q in func.params) or "none"
            raise _err(f"'{e.name}': function {func.where} has no parameter or visible "
                       f"static variable '{name}' (parameters: {have})", e)
        vtype, addr = var
        return resolve(info, Root("address", name, addr), vtype, True, comps, e.addressof)
    except TargetError as exc:
        raise _err(f"'{e.name}': {exc}", e) from exc
    except DwarfAccessError as exc:
        where: object = e
        parts = [c for c in e.components if isinstance(c, ast.Member | ast.Subscript)]
        if 0 <= exc.index < len(parts):
            where = parts[exc.index]
        raise ScriptError(str(exc), getattr(where, "loc", e.loc)) from None


def _place(loc: ArgSpec) -> str | None:
    """What `&$var` cannot take the address of, as stap names it (None: a value
    in memory, which resolve() turns down for a copied parameter)."""
    if loc.kind is ArgKind.REG:
        return "object in register"
    if loc.kind is ArgKind.EXPR and loc.error in ("computed value", "noncontiguous object"):
        return loc.error
    return None


def is_static(site: FunctionSite, e: ast.TargetSymbol) -> bool:
    """Whether `$name` at `site` names a static variable rather than a parameter."""
    func = dwarf.function_at(site.path, site.func_addr)
    if func is None or _site_var(site, e.name[1:]) is not None:
        return False
    info = dwarf.get_dwarf(site.path)
    return find_variable(info, func.cu_offset, func.die_offset, e.name[1:]) is not None


def access_c(acc: Access, root_c: str, index_c: Callable[[int], object], where: str) -> str:
    """C for the access: `root_c` is the root's value (a parameter) or address."""
    v = root_c
    for step in acc.steps:
        if isinstance(step, Offset):
            v = f"(int64_t)((uint64_t)({v}) + {step.offset}u)"
        elif isinstance(step, Index):
            v = f"(int64_t)((uint64_t)({v}) + (uint64_t)({index_c(step.which)}) * {step.stride}u)"
        elif isinstance(step, Load):
            v = f"(c->where = {where}, pd_user_read(c, {v}, {step.size}, {int(step.signed)}))"
        elif isinstance(step, Float32):
            v = f"pd_fp32_to_fp64({v})"
        elif isinstance(step, Bits):
            if step.signed:
                v = (f"((int64_t)((uint64_t)({v}) << {64 - step.shift - step.width}) "
                     f">> {64 - step.width})")
            else:
                v = f"(int64_t)(((uint64_t)({v}) >> {step.shift}) & {(1 << step.width) - 1}ull)"
    return v


# -- guru mode's writes -------------------------------------------------------------------

def unwritable(spec: ArgSpec) -> str | None:
    """What a write to the value at `spec` cannot change, as stap names it; None for a
    register or memory, which pd_store_arg writes."""
    if spec.kind in (ArgKind.REG, ArgKind.MEM):
        return None
    if spec.kind is ArgKind.EXPR:
        return None if spec.ops and spec.ops[-1][0] == "PD_DW_END_MEMORY" else spec.error
    return "constant value" if spec.kind is ArgKind.CONST else "unavailable value"


def check_store(acc: Access, node: ast.TargetSymbol | ast.Cast | ast.AtVar | ast.AutoCast
                ) -> None:
    """ScriptError (stap's wording) where the value `acc` reads is not a scalar a store
    can change."""
    if acc.is_address:
        raise _err("cannot write to member address" if node.addressof else
                   "cannot write to array address", node)
    if any(isinstance(s, Float32) for s in acc.steps):
        raise _err("cannot assign yet to 32-bit float", node)


def store_access(site: FunctionSite, e: ast.TargetSymbol) -> Access:
    """The access `$var... = v` writes at `site`: a scalar in memory, or a variable (or a
    part of a struct passed by value) in a register or memory; ScriptError otherwise."""
    acc = access(site, e)
    check_store(acc, e)
    if acc.root.kind == "param" and not any(isinstance(s, Load) for s in acc.steps):
        p = _site_var(site, acc.root.name.partition(":")[0])
        assert p is not None and p.location is not None   # access() read it
        part = split_part(acc.root.name)
        spec = p.location if part is None else narrow(p.location, *part[1:])
        why = unwritable(spec)
        if why is not None:
            raise _err(f"'{e.name}': cannot write to {why} {_where_at(site)}", e)
    return acc


def store_c(acc: Access, root_c: str, index_c: Callable[[int], object], where: str,
            value: str, store_root: Callable[[str], str] | None = None) -> str:
    """C writing `value` (a C name) where `acc` reads: a scalar or a bitfield's bits in
    memory (fault-safe: a bad address is the handler's error), or -- nothing loaded --
    the root itself through `store_root` (a variable's slot, pd_store_arg)."""
    steps = list(acc.steps)
    bits = steps[-1] if steps and isinstance(steps[-1], Bits) else None
    if bits is not None:
        steps.pop()
    load = steps[-1] if steps and isinstance(steps[-1], Load) else None
    if load is not None:
        steps.pop()
        addr = access_c(Access(acc.root, tuple(steps), acc.type_name, False), root_c,
                        index_c, where)
        if bits is not None:
            return (f"pd_set_user_bits(c, {addr}, {load.size}, {bits.shift}, {bits.width}, "
                    f"{value})")
        return f"pd_set_user(c, {addr}, {value}, {load.size})"
    assert not steps and store_root is not None
    if bits is not None:   # a bitfield of a struct passed by value: its bytes merged
        value = (f"(int64_t)pd_merge_bits((uint64_t)({root_c}), (uint64_t)({value}), "
                 f"{bits.shift}, {bits.width})")
    return store_root(value)


def by_site(cases: dict[tuple[str, int], str], ctype: str = "int64_t") -> str:
    """One C expression choosing among per-site values (the same text once)."""
    distinct = set(cases.values())
    if len(distinct) == 1:
        return next(iter(distinct))
    out = "0" if ctype == "int64_t" else '""'
    for (path, pc), value in cases.items():
        out = (f"(c->site->pc == {pc:#x} && !strcmp(pd_objects[c->site->object].path, "
               f"{_c_string(path)}) ? ({ctype})({value}) : {out})")
    return out


# -- pretty printing -----------------------------------------------------------------------

PrettyValue = tuple[str, tuple[tuple[str, object], ...], bool]   # ($name, components, string)


def pretty_depth(e: ast.TargetSymbol) -> int:
    """2 for `$var$$`, 1 for `$var$`, 0 if `e` is not pretty-printed."""
    last = e.components[-1] if e.components else None
    return len(last.dollars) if isinstance(last, ast.PrettyPrint) else 0


def _type_at(site: FunctionSite, name: str, comps: list[tuple[str, object]],
             node: ast.TargetSymbol) -> object:
    """The DWARF type DIE at the end of `$name` + comps (literal indexes)."""
    func = dwarf.site_function(site.path, site.func_addr)
    info = dwarf.get_dwarf(site.path)
    p = _site_var(site, name)
    if p is not None:
        if p.location is None:
            raise _err(f"'${name}': not readable at the entry: {p.why}", node)
        root, root_t, memory = Root("param", name), _type_of(info, p), False
    else:
        var = find_variable(info, func.cu_offset, func.die_offset, name)
        if var is None:
            raise _err(f"'${name}': function {func.where} has no parameter or visible "
                       f"static variable '{name}'", node)
        root, root_t, memory = Root("address", name, var[1]), var[0], True
    if not comps:
        return root_t
    # resolve() numbers subscripts; the pretty printer's are literals
    numbered = [(k, sum(1 for kk, _ in comps[:i] if kk == "index") if k == "index" else v)
                for i, (k, v) in enumerate(comps)]
    try:
        acc = resolve(info, root, root_t, memory, numbered, whole=True)
    except DwarfAccessError as exc:
        raise _err(str(exc), node) from None
    return info.dwarf.get_DIE_from_refaddr(acc.type_offset) if acc.type_offset >= 0 else None


def pretty(site: FunctionSite, e: ast.TargetSymbol) -> tuple[str, tuple[PrettyValue, ...]]:
    """`$var$`, `$var->m$$`, `$$parms$`, `$$vars$`, `$$locals$` at `site`: the format
    string and the values it reads, as stap's pretty printer spells them."""
    full = pretty_depth(e) > 1
    info = dwarf.get_dwarf(site.path)
    if e.name.startswith("$$"):
        names = [p.name for p in site_vars(site, e.name)]
        fmt_parts: list[str] = []
        values: list[PrettyValue] = []
        for name in names:
            try:
                t = _type_at(site, name, [], e)
            except ScriptError:
                fmt_parts.append(f"{name}=?")
                continue
            f, args = pretty_plan(info, t, full)
            fmt_parts.append(f"{name}={f}")
            values.extend((f"${name}", a.extra, a.string) for a in args)
        return " ".join(fmt_parts), tuple(values)
    base = literal_suffixes(e)
    t = _type_at(site, e.name[1:], base, e)
    f, args = pretty_plan(info, t, full)
    return f, tuple((e.name, (*base, *a.extra), a.string) for a in args)


# -- @cast and @var ------------------------------------------------------------------------

_HEADER_OBJECTS: dict[tuple[str, str], str] = {}


def _header_types(headers: str, sites: tuple[ProbeSite, ...], node: ast.Expr) -> str:
    """`@cast(p, "struct stat", "<sys/stat.h>")`: as stap, the headers are compiled with
    -g for the probed processes' ABI, every type kept, and the object's DWARF read.
    Returns the object's path (in a directory removed at exit)."""
    import atexit
    import re
    import shutil
    import subprocess
    import tempfile

    from ..build import get_toolchain
    from ..elf.reader import abi_of_machine

    names = re.findall(r"<([^<>]+)>", headers)
    if not names or "".join(f"<{n}>" for n in names) != headers.replace(" ", ""):
        raise _err(f"'{headers}': name headers as \"<a.h>\" or \"<a.h><b.h>\"", node)
    abis = {abi_of_machine(s.machine) or "m64" for s in sites} or {"m64"}
    if len(abis) != 1:
        raise _err(f"@cast with headers in a probe of several ABIs ({', '.join(sorted(abis))}):"
                   " their types differ", node, "write one probe for each")
    abi = abis.pop()
    key = (headers, abi)
    if key in _HEADER_OBJECTS:
        return _HEADER_OBJECTS[key]
    tc = get_toolchain(abi)
    if tc is None:
        raise _err(f"@cast(..., \"{headers}\"): no {abi} compiler to read the headers with",
                   node)
    tmp = tempfile.mkdtemp(prefix="pydyn-hdr-")
    atexit.register(shutil.rmtree, tmp, True)
    obj = f"{tmp}/types_{abi}.o"
    src = "".join(f"#include <{n}>\n" for n in names)
    proc = subprocess.run([tc.cc, *tc.flags, "-g", "-fno-eliminate-unused-debug-types",
                           "-c", "-x", "c", "-", "-o", obj], input=src.encode(),
                          capture_output=True)
    if proc.returncode != 0:
        first = (proc.stderr.decode(errors="replace").strip().splitlines() or ["?"])[0]
        raise _err(f"@cast(..., \"{headers}\"): the headers do not compile: {first}", node)
    _HEADER_OBJECTS[key] = obj
    return obj


def _module(sites: tuple[ProbeSite, ...], module: str | None, node: ast.Expr) -> str:
    """The binary whose DWARF a @cast/@var reads: its module argument (headers compiled
    for the purpose: `<sys/stat.h>`), else the one binary the probe's sites are in."""
    if module is not None:
        if module.startswith("<"):
            return _header_types(module, sites, node)
        if module.startswith("kernel"):
            raise _err(f"'{module}': pydyn reads types from the DWARF of a binary, not "
                       "from the kernel", node)
        return module
    paths = {s.path for s in sites}
    if len(paths) != 1:
        raise _err("name the binary: this probe is not in exactly one", node,
                   'e.g. @cast(p, "struct foo", "/path/to/prog")')
    return paths.pop()


def cast_access(sites: tuple[ProbeSite, ...], e: ast.Cast) -> Access:
    """`@cast(ptr, "struct foo"[, "PATH"])->m...`: the type from PATH's DWARF (or
    the probe's binary), its object in memory at `ptr`."""
    path = _module(sites, e.module, e)
    try:
        info = dwarf.get_dwarf(path)
        t = find_type(info, e.type_name)
        if t is None:
            raise _err(f"type '{e.type_name}' not found in the DWARF of {path}", e)
        return resolve(info, Root("value"), t, True, _components_of(e), e.addressof)
    except TargetError as exc:
        raise _err(f"@cast: {exc}", e) from exc
    except DwarfAccessError as exc:
        raise _err(str(exc), _component_node(e, exc.index)) from None


def atvar_path(sites: tuple[ProbeSite, ...], e: ast.AtVar) -> str:
    """The binary whose global `@var` names: the probe's own (PATH must be that binary),
    or, where no probe site says (a script function), PATH, as its realpath."""
    if not sites and e.module is not None:
        return os.path.realpath(e.module)
    path = _module(sites, None, e)
    if e.module is not None and os.path.realpath(e.module) != os.path.realpath(path):
        raise _err(f"@var of another binary ({e.module}) than the probe's ({path}) is "
                   "not supported: its load address is not known here", e)
    return path


def atvar_access(sites: tuple[ProbeSite, ...], e: ast.AtVar) -> Access:
    """`@var("name[@file.c]"[, "PATH"])->m...`: a global in memory at its address plus
    the load bias of its binary (atvar_path)."""
    path = atvar_path(sites, e)
    name, _, cu = e.name.partition("@")
    try:
        info = dwarf.get_dwarf(path)
        var = find_global(info, name, cu or None)
        if var is None:
            where = f" in a compilation unit matching '{cu}'" if cu else ""
            raise _err(f"@var: no global '{name}'{where} in the DWARF of {path}", e)
        return resolve(info, Root("address", name, var[1]), var[0], True, _components_of(e),
                       e.addressof)
    except TargetError as exc:
        raise _err(f"@var: {exc}", e) from exc
    except DwarfAccessError as exc:
        raise _err(str(exc), _component_node(e, exc.index)) from None


def _components_of(e: ast.Cast | ast.AtVar) -> list[tuple[str, object]]:
    if any(isinstance(c, ast.PrettyPrint) for c in e.components):
        raise _err("pretty printing a @cast or @var value is not supported yet", e)
    return suffix_components(e)


def _component_node(e: ast.Cast | ast.AtVar, index: int) -> object:
    parts = [c for c in e.components if isinstance(c, ast.Member | ast.Subscript)]
    return parts[index] if 0 <= index < len(parts) else e


def cast_subscripts(e: ast.Cast | ast.AtVar | ast.AutoCast) -> list[ast.Expr]:
    return [c.index for c in e.components if isinstance(c, ast.Subscript)]


# -- the DWARF type of a value, for autocast (autocast.py) ------------------------------

def header_abi(path: str) -> str | None:
    """The ABI headers compiled at `path` are for (None: `path` is no such object)."""
    return next((abi for (_, abi), obj in _HEADER_OBJECTS.items() if obj == path), None)


def cast_dtype(sites: tuple[ProbeSite, ...], e: ast.Cast | ast.AtVar) -> DwarfType | None:
    """The type of the value `@cast(...)...` or `@var(...)...` reads."""
    try:
        if isinstance(e, ast.Cast):
            return of_access(_module(sites, e.module, e), cast_access(sites, e))
        return of_access(atvar_path(sites, e), atvar_access(sites, e))
    except ScriptError:
        return None


def target_dtype(sites: tuple[ProbeSite, ...], e: ast.TargetSymbol) -> DwarfType | None:
    """The type of `$var...` in a function probe, if every site gives the same one."""
    if pretty_depth(e) or not sites or not all(isinstance(s, FunctionSite) for s in sites):
        return None
    found: set[DwarfType | None] = set()
    try:
        for site in sites:
            assert isinstance(site, FunctionSite)
            if has_suffix(e) or is_static(site, e):
                found.add(of_access(site.path, access(site, e)))
                continue
            p = _site_var(site, e.name[1:])
            if p is None or p.type_offset < 0:
                return None
            info = dwarf.get_dwarf(site.path)
            t = info.dwarf.get_DIE_from_refaddr(p.type_offset)
            found.add(normal(DwarfType(site.path, p.type_offset, False, dwarf.type_name(t))))
    except (ScriptError, TargetError):
        return None
    return found.pop() if len(found) == 1 else None
