"""Autocast: the DWARF type a value carries through the script, as stap's
`exp_type_dwarf` does, so that suffixes on an ordinary value resolve:
`sun = &@cast(p, "sockaddr_un", "<sys/un.h>"); sun->sun_family`,
`(&@cast(...))->m`, `(arr)[0]` on an array member, `f(x)->m` where `f` returns a
typed value, `q = $p; q->next->v`.

A `DwarfType` is a type DIE in one object's DWARF and whether the value is the
address of an object of that type (`&x`, an array) rather than a value of it (a
pointer read from memory or a parameter).  The typing pass (types.py) gives one
to each `$var`, `@cast`, `@var` and autocast expression it can, copies it through
assignments, `?:` (both arms the same) and function returns, and keeps it per
local; two different types assigned to one local make it a plain long, as in
stap.  An autocast is then an access (`dwarf_types.resolve`) rooted at the
operand's value, emitted as a @cast's is: fault-safe reads, no load bias.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..elf import dwarf
from ..elf.dwarf_types import (
    POINTERS,
    RECORDS,
    Access,
    DwarfAccessError,
    Root,
    pretty_plan,
    resolve,
)
from ..errors import ScriptError, TargetError
from ..script import ast
from .common import _err


@dataclass(frozen=True)
class DwarfType:
    path: str          # the object whose DWARF holds the type (a binary, compiled headers)
    offset: int        # the type's DIE
    in_memory: bool    # the value is the address of an object of the type
    name: str = ""     # as stap prints it, for messages

    def __str__(self) -> str:
        return self.name


# a local or function given values of two different DWARF types: a plain long
MIXED = DwarfType("", -1, False, "mixed")


def of_access(path: str, acc: Access) -> DwarfType | None:
    """The type of the value an access reads (None: the DWARF gave no type DIE)."""
    if acc.type_offset < 0:
        return None
    return normal(DwarfType(path, acc.type_offset, acc.is_address, acc.type_name))


def normal(t: DwarfType) -> DwarfType:
    """One spelling of each type, so that values of one type compare equal however they
    were read, as stap's (a pointer to its pointee, typedefs stripped): a record is
    the address of one in memory, whether it came from `&@cast(p, "T")` or from a
    `T *` read from memory or a parameter."""
    info = dwarf.get_dwarf(t.path)
    s = dwarf.strip_type(info.dwarf.get_DIE_from_refaddr(t.offset))
    if s is None:
        return t
    if not t.in_memory and s.tag in POINTERS:
        target = dwarf.strip_type(dwarf.type_die(s))
        if target is not None and target.tag in RECORDS:
            return DwarfType(t.path, target.offset, True, t.name)
    if t.in_memory and s.tag in RECORDS:
        return DwarfType(t.path, s.offset, True, t.name)
    return t


def merge(cur: DwarfType | None, new: DwarfType | None) -> DwarfType | None:
    """The type of a variable given `cur` so far and a value of type `new`."""
    if new is None or cur == new:
        return cur
    return new if cur is None else MIXED


def usable(t: DwarfType | None) -> DwarfType | None:
    return None if t is MIXED or t == MIXED else t


def suffix_components(e: ast.AutoCast | ast.Cast | ast.AtVar) -> list[tuple[str, object]]:
    """A value's `->member` and `[index]` suffixes as the DWARF access walks them: each
    index by its place among the indexes."""
    comps: list[tuple[str, object]] = []
    n = 0
    for c in e.components:
        if isinstance(c, ast.Member):
            comps.append(("member", c.name))
        elif isinstance(c, ast.Subscript):
            comps.append(("index", n))
            n += 1
    return comps


def pretty_depth(e: ast.AutoCast) -> int:
    """2 for `x->m$$`, 1 for `x->m$`, 0 if `e` is not pretty-printed."""
    last = e.components[-1] if e.components else None
    return len(last.dollars) if isinstance(last, ast.PrettyPrint) else 0


def _resolve(t: DwarfType, e: ast.AutoCast, comps: list[tuple[str, object]],
             addressof: bool = False, whole: bool = False) -> Access:
    try:
        info = dwarf.get_dwarf(t.path)
        die = info.dwarf.get_DIE_from_refaddr(t.offset)
        return resolve(info, Root("value"), die, t.in_memory, comps, addressof, whole)
    except TargetError as exc:
        raise _err(f"autocast: {exc}", e) from exc
    except DwarfAccessError as exc:
        parts = [c for c in e.components if isinstance(c, ast.Member | ast.Subscript)]
        where = parts[exc.index] if 0 <= exc.index < len(parts) else e
        raise ScriptError(f"{exc} (autocast of a '{t}')", where.loc) from None


def access(t: DwarfType, e: ast.AutoCast) -> Access:
    """The access of `e` (its suffixes) on a value of type `t`."""
    if pretty_depth(e):
        return _resolve(t, e, suffix_components(e), whole=True)
    return _resolve(t, e, suffix_components(e), e.addressof)


# one value a pretty print reads: its access, the literal subscripts, whether a string
PrettyRead = tuple[Access, tuple[int, ...], bool]


def literal_suffixes(e: ast.AutoCast | ast.TargetSymbol) -> list[tuple[str, object]]:
    """The suffixes before a pretty print's `$`: members and literal subscripts only
    (each index by its value)."""
    out: list[tuple[str, object]] = []
    for c in e.components:
        if isinstance(c, ast.Member):
            out.append(("member", c.name))
        elif isinstance(c, ast.Subscript):
            if not isinstance(c.index, ast.NumberLiteral):
                raise _err("a pretty-printed value takes literal subscripts only", c)
            out.append(("index", c.index.value))
    return out


def pretty(t: DwarfType, e: ast.AutoCast) -> tuple[str, tuple[PrettyRead, ...]]:
    """`x->m$`, `x$$`: stap's pretty print of the value (dwarf_types.pretty_plan), the
    format and the accesses it reads from the operand's value."""
    if e.addressof:
        raise _err("'&' of a pretty-printed value", e)
    base = literal_suffixes(e)

    def numbered(comps: list[tuple[str, object]]) -> list[tuple[str, object]]:
        # resolve() numbers the subscripts; these are literals, read back by the caller
        return [(k, sum(1 for kk, _ in comps[:i] if kk == "index") if k == "index" else v)
                for i, (k, v) in enumerate(comps)]

    info = dwarf.get_dwarf(t.path)
    end = _resolve(t, e, numbered(base), whole=True).type_offset if base else t.offset
    die = info.dwarf.get_DIE_from_refaddr(end)
    fmt, args = pretty_plan(info, die, pretty_depth(e) > 1)
    reads = []
    for a in args:
        comps = [*base, *a.extra]
        literals = tuple(int(str(v)) for k, v in comps if k == "index")
        reads.append((_resolve(t, e, numbered(comps)), literals, a.string))
    return fmt, tuple(reads)


def untyped_error(e: ast.AutoCast, t: DwarfType | None) -> ScriptError:
    first = next((c for c in e.components if isinstance(c, ast.Member | ast.Subscript)), None)
    what = f"'->{first.name}'" if isinstance(first, ast.Member) else \
        "'[...]'" if first is not None else "'&'"
    if t == MIXED:
        return _err(f"{what}: the value was given different DWARF types, so it is a plain "
                    "long", e, "assign it values of one type")
    return _err(f"{what} on a value that carries no DWARF type", e,
                "a pointer from $var, @cast or @var (kept through locals, ?: and function "
                "returns) has one; or @cast the value")
