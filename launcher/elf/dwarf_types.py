"""Target expressions over DWARF types: `$p->q->name`, `$arr[3]`, `$p->buf[i]`,
`&$p->a`, bitfields, enums, typedef chains, `@cast(ptr, "struct foo")`.

An expression starts at a *root* -- a parameter's value at the entry (the
site's argument slot), a variable in memory (a global or static: its link-time
address plus the load bias), or a script value cast to a type -- and each
suffix moves through the types as stap's dwflpp does:

- `->m` on a pointer reads the pointer (if it is in memory) and goes to member
  `m` of what it points to; on a struct in memory it goes to the member (stap
  spells both `->`); members of anonymous structs and unions are found through
  them;
- `[i]` on a pointer reads it and indexes what it points to; on an array in
  memory it indexes the array;
- at the end a scalar in memory is loaded (a bitfield is cut out of its
  storage), an array stands for its address (so `user_string($p->name)` reads
  a `char[]` member), `&` asks for the address itself.

The result is an `Access`: the root, a list of steps the translator turns into
fault-safe reads (`Offset`, `Index`, `Load`, `Bits`), and the final type.  The
model reads pyelftools DIEs; errors are DwarfAccessError with stap's wording.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .dwarf import DwarfInfo, die_attr, strip_type, type_die, type_name, type_size

POINTERS = ("DW_TAG_pointer_type", "DW_TAG_reference_type", "DW_TAG_rvalue_reference_type")
RECORDS = ("DW_TAG_structure_type", "DW_TAG_union_type", "DW_TAG_class_type")
_DW_ATE_FLOAT, _DW_ATE_SIGNED, _DW_ATE_SIGNED_CHAR = 4, 5, 6


class DwarfAccessError(Exception):
    """A suffix the types do not allow; `index` is the component it is about
    (-1: the whole expression), for the caret."""

    def __init__(self, message: str, index: int = -1) -> None:
        super().__init__(message)
        self.index = index


# -- steps ------------------------------------------------------------------------

@dataclass(frozen=True)
class Offset:
    """address += offset (a member)."""

    offset: int

    def __str__(self) -> str:
        return f"+{self.offset}"


@dataclass(frozen=True)
class Index:
    """address += index * stride; `which` is the script's subscript, in order."""

    which: int
    stride: int

    def __str__(self) -> str:
        return f"+[i{self.which}]*{self.stride}"


@dataclass(frozen=True)
class Load:
    """value = `size` bytes at the address (fault-safe)."""

    size: int
    signed: bool

    def __str__(self) -> str:
        return f"load{'s' if self.signed else 'u'}{self.size}"


@dataclass(frozen=True)
class Bits:
    """value = `width` bits of the loaded storage from bit `shift` up."""

    shift: int
    width: int
    signed: bool

    def __str__(self) -> str:
        return f"bits{'s' if self.signed else 'u'}[{self.shift}:{self.width}]"


@dataclass(frozen=True)
class Float32:
    """value = the loaded 32-bit float as a double's bits: stap reads a `float` so
    (its fp32_to_fp64), a `double` as its bits; fp_to_string() prints either."""

    def __str__(self) -> str:
        return "fp32"


Step = Offset | Index | Load | Bits | Float32


@dataclass(frozen=True)
class Root:
    """Where an expression starts.  PARAM: the value of parameter `name` (a
    register or stack slot at the entry); ADDRESS: an object in memory at the
    link-time `address` (+ the load bias); VALUE: a script value (`@cast`)
    that is the address of an object of the type."""

    kind: str            # "param", "address", "value"
    name: str = ""
    address: int = 0

    def __str__(self) -> str:
        return {"param": f"${self.name}", "address": f"&{self.name}@{self.address:#x}",
                "value": "(cast)"}[self.kind]


@dataclass(frozen=True)
class Access:
    root: Root
    steps: tuple[Step, ...]
    type_name: str       # the final type as stap prints it
    is_address: bool     # the value is an address (array, `&`), not a loaded scalar
    type_offset: int = field(default=-1, compare=False)   # the final type's DIE, for printing

    def __str__(self) -> str:
        return f"{self.root} {' '.join(map(str, self.steps))} : {self.type_name}".strip()


# -- walking the types ----------------------------------------------------------------

def _component_text(comp: tuple[str, Any]) -> str:
    return f"->{comp[1]}" if comp[0] == "member" else "[...]"


def _base_kind(t: Any, word: int) -> tuple[int, bool]:
    """(size, signed) of a scalar type (base, enum, pointer); ValueError if not one."""
    if t is None:
        raise ValueError("void")
    if t.tag in POINTERS:
        return type_size(t, word), False
    if t.tag == "DW_TAG_base_type":
        enc = die_attr(t, "DW_AT_encoding") or 0
        if enc == _DW_ATE_FLOAT and type_size(t, word) not in (4, 8):
            raise ValueError(f"{type_size(t, word) * 8}-bit floating point")
        return type_size(t, word), enc in (_DW_ATE_SIGNED, _DW_ATE_SIGNED_CHAR)
    if t.tag == "DW_TAG_enumeration_type":
        under = strip_type(type_die(t))
        signed = under is not None and _base_kind(under, word)[1]
        if under is None:   # no DW_AT_type: signed if any enumerator is negative
            signed = any(int(c.attributes["DW_AT_const_value"].value) < 0
                         for c in t.iter_children() if "DW_AT_const_value" in c.attributes)
        return type_size(t, word), signed
    raise ValueError(t.tag)


def _resolve_declaration(info: DwarfInfo, t: Any) -> Any:
    """A record declared here but defined in another CU: its definition, by name."""
    if "DW_AT_declaration" not in t.attributes:
        return t
    name = die_attr(t, "DW_AT_name")
    found = find_type(info, f"{_record_word(t)} {name.decode()}") if name else None
    return strip_type(found) if found is not None else t


def _record_word(t: Any) -> str:
    return {"DW_TAG_structure_type": "struct", "DW_TAG_union_type": "union",
            "DW_TAG_class_type": "class"}.get(t.tag, "")


def _members(t: Any) -> list[str]:
    out = []
    for c in t.iter_children():
        if c.tag != "DW_TAG_member":
            continue
        name = die_attr(c, "DW_AT_name")
        if name is not None:
            out.append(name.decode(errors="replace"))
        else:
            sub = strip_type(type_die(c))
            if sub is not None and sub.tag in RECORDS:
                out.extend(_members(sub))
    return out


def _find_member(t: Any, name: str) -> list[Any] | None:
    """The chain of member DIEs that reaches `name` (through anonymous members)."""
    for c in t.iter_children():
        if c.tag not in ("DW_TAG_member", "DW_TAG_inheritance"):
            continue
        cname = die_attr(c, "DW_AT_name")
        if cname is not None and cname.decode(errors="replace") == name:
            return [c]
        if cname is None:
            sub = strip_type(type_die(c))
            if sub is not None and sub.tag in RECORDS:
                inner = _find_member(sub, name)
                if inner is not None:
                    return [c, *inner]
    return None


def _member_offset(m: Any) -> tuple[int, int | None]:
    """(byte offset, bit offset from the struct's start if a bitfield else None)."""
    if "DW_AT_data_bit_offset" in m.attributes:
        bit = int(m.attributes["DW_AT_data_bit_offset"].value)
        return bit // 8, bit
    loc = m.attributes.get("DW_AT_data_member_location")
    off = 0
    if loc is not None:
        if isinstance(loc.value, int):
            off = loc.value
        elif isinstance(loc.value, list) and len(loc.value) == 2 and loc.value[0] == 0x23:
            off = int(loc.value[1])   # DW_OP_plus_uconst N (DWARF 2)
        else:
            raise DwarfAccessError("member location expression not supported")
    if "DW_AT_bit_size" in m.attributes and "DW_AT_bit_offset" in m.attributes:
        # DWARF 2/3: bit_offset counts from the storage unit's most significant bit
        unit = int(die_attr(m, "DW_AT_byte_size") or 0) or type_size(strip_type(type_die(m)), 8)
        bit = off * 8 + unit * 8 - int(m.attributes["DW_AT_bit_offset"].value) \
            - int(m.attributes["DW_AT_bit_size"].value)
        return bit // 8, bit
    return off, None


def resolve(info: DwarfInfo, root: Root, root_type: Any, in_memory: bool,
            components: list[tuple[str, Any]], addressof: bool = False,
            whole: bool = False) -> Access:
    """The access for `root` (of type `root_type`, its value in hand or, if
    `in_memory`, in memory at the root's address) followed by `components`
    (("member", NAME) or ("index", N): the Nth subscript of the expression).
    `whole`: a pretty-printed value, which may end on a struct."""
    word = 4 if info.machine == "i386" else 8
    t_full = root_type
    steps: list[Step] = []
    memory = in_memory
    bitfield: tuple[int, int] | None = None     # (bit offset in the struct, width)
    done = 0
    by_value_bits: Bits | None = None
    if root.kind == "param" and not in_memory:
        root, t_full, done, by_value_bits = _by_value_member(info, root, root_type,
                                                             components, word)
        memory = done > 0 and _is_address_part(root.name)
    for i, comp in enumerate(components):
        if i < done:
            continue
        t = strip_type(t_full)
        if t is None:
            raise DwarfAccessError(f"invalid access '{_component_text(comp)}' vs 'void'", i)
        if comp[0] == "member":
            if t.tag in POINTERS:
                target = strip_type(type_die(t))
                if target is None:
                    raise DwarfAccessError(f"invalid access '->{comp[1]}' vs "
                                           f"'{type_name(t)}'", i)
                if memory:
                    steps.append(Load(word, False))
                memory = True
                t_full, t = type_die(t), target
            if t.tag not in RECORDS:
                raise DwarfAccessError(f"invalid access '->{comp[1]}' vs. {type_name(t)}", i)
            t = _resolve_declaration(info, t)
            chain = _find_member(t, comp[1])
            if chain is None:
                names = _members(t)
                import difflib
                close = difflib.get_close_matches(comp[1], names, n=3)
                alt = f" (alternatives: {', '.join(close)})" if close else ""
                raise DwarfAccessError(f"unable to find member '{comp[1]}' for "
                                       f"{type_name(t)}{alt}", i)
            if not memory:
                raise DwarfAccessError(f"'{type_name(t)}' passed by value: its members are "
                                       "in registers pydyn does not address", i)
            off = 0
            bitfield = None
            for m in chain:
                byte, bit = _member_offset(m)
                if bit is not None and "DW_AT_bit_size" in m.attributes:
                    bitfield = (off * 8 + bit, int(m.attributes["DW_AT_bit_size"].value))
                off += byte
            if bitfield is None and off:
                steps.append(Offset(off))
            t_full = type_die(chain[-1])
            continue
        # an index
        if bitfield is not None:
            raise DwarfAccessError("invalid access '[...]' of a bitfield", i)
        if t.tag in POINTERS:
            target = type_die(t)
            if strip_type(target) is None:
                raise DwarfAccessError(f"invalid access '[...]' vs '{type_name(t)}'", i)
            if memory:
                steps.append(Load(word, False))
            memory = True
            steps.append(Index(comp[1], _object_size(info, target, word, i)))
            t_full = target
        elif memory and i == 0 and root.kind == "value" and t.tag != "DW_TAG_array_type":
            # `@cast(p, "struct T")[n]`: the nth T from p, as stap's (an array of them;
            # its @cast_sizeof is `&@cast(0, T)[1]`)
            steps.append(Index(comp[1], _object_size(info, t_full, word, i)))
        elif t.tag == "DW_TAG_array_type":
            if not memory:
                raise DwarfAccessError("an array passed by value", i)
            dims = [c for c in t.iter_children() if c.tag == "DW_TAG_subrange_type"]
            elem = type_die(t)
            if len(dims) > 1:
                raise DwarfAccessError(f"invalid access '[...]': arrays of {len(dims)} "
                                       "dimensions are not supported", i)
            steps.append(Index(comp[1], _object_size(info, elem, word, i)))
            t_full = elem
        else:
            raise DwarfAccessError(f"invalid access '[...]' vs. {type_name(t)}", i)

    t = strip_type(t_full)
    tname = type_name(t_full)
    offset = t_full.offset if t_full is not None else -1
    if addressof:
        if not memory:
            raise DwarfAccessError("cannot take the address of a value that is not in memory")
        if bitfield is not None:
            raise DwarfAccessError("cannot take the address of a bitfield")
        return Access(root, tuple(steps), f"{tname}*", True, offset)
    if t is not None and t.tag == "DW_TAG_array_type":
        if not memory:
            raise DwarfAccessError("an array passed by value")
        return Access(root, tuple(steps), tname, True, offset)
    if t is not None and t.tag in RECORDS:
        if whole and memory:
            return Access(root, tuple(steps), tname, True, offset)
        t = _resolve_declaration(info, t)
        names = _members(t)
        such = f" such as '->{names[0]}'" if names else ""
        raise DwarfAccessError(f"'{type_name(t)}' is being accessed instead of a member{such}",
                               len(components) - 1)
    try:
        size, signed = _base_kind(t, word)
    except ValueError as exc:
        raise DwarfAccessError(f"'{tname}' cannot be read: {exc} values are not "
                               "supported", len(components) - 1) from None
    if memory:
        if bitfield is not None:
            bit, width = bitfield
            first = bit // 8
            nbytes = _bits_window(bit - first * 8, width, len(components) - 1)
            steps.append(Offset(first) if first else Offset(0))
            steps.append(Load(nbytes, False))
            steps.append(Bits(bit - first * 8, width, signed))
        else:
            steps.append(Load(size, signed))
    if not memory and done and by_value_bits is not None:
        steps.append(by_value_bits)
    if is_float32(t):
        steps.append(Float32())
    return Access(root, tuple(s for s in steps if s != Offset(0)), tname, False, offset)


def _bits_window(shift: int, width: int, index: int) -> int:
    """The bytes (1, 2, 4 or 8) one load takes for a bitfield `shift` bits into its
    first byte: a packed one across 9 bytes has none."""
    for n in (1, 2, 4, 8):
        if shift + width <= n * 8:
            return n
    raise DwarfAccessError(f"a bitfield of {width} bits across more than 8 bytes is not "
                           "supported", index)


def _by_value_member(info: DwarfInfo, root: Root, root_type: Any,
                     components: list[tuple[str, Any]], word: int
                     ) -> tuple[Root, Any, int, Bits | None]:
    """A struct passed by value (in registers, pieces or memory): its members named first
    in `components` (`$s->a`, `$s->in->b`, as stap spells `.`) are a part of the variable,
    read where its location puts that part (dwarf_expr.narrow through the part's slot);
    an array or struct member is a part of size 0, its address, where the variable is in
    memory.
    Returns the root (the part), its type, how many components it took and, for a
    bitfield, the step taking its bits from the bytes holding them."""
    from .dwarf_expr import part_name

    t_full, off, done = root_type, 0, 0
    bits: Bits | None = None
    size = 0
    for i, comp in enumerate(components):
        t = strip_type(t_full)
        if comp[0] != "member" or t is None or t.tag not in RECORDS or bits is not None:
            break
        t = _resolve_declaration(info, t)
        chain = _find_member(t, comp[1])
        if chain is None:
            break   # resolve() names the alternatives
        for m in chain:
            byte, bit = _member_offset(m)
            if bit is not None and "DW_AT_bit_size" in m.attributes:
                width = int(m.attributes["DW_AT_bit_size"].value)
                at = off * 8 + bit
                first = at // 8
                nbytes = _bits_window(at - first * 8, width, i)
                signed = _base_kind(strip_type(type_die(m)), word)[1]
                bits = Bits(at - first * 8, width, signed)
                off = first
                size = nbytes
            off += byte if bits is None else 0
        t_full, done = type_die(chain[-1]), i + 1
    if not done:
        return root, root_type, 0, None
    t = strip_type(t_full)
    if bits is not None:
        return Root("param", part_name(root.name, off, size, False)), t_full, done, bits
    if t is not None and (t.tag in RECORDS or t.tag == "DW_TAG_array_type"):
        # an array or struct member: addressed, so only where the variable is in memory
        return Root("param", part_name(root.name, off, 0, False)), t_full, done, None
    try:
        size, signed = _base_kind(t, word)
    except ValueError as exc:
        raise DwarfAccessError(f"'{type_name(t_full)}' cannot be read: {exc} values are not "
                               "supported", done - 1) from None
    return Root("param", part_name(root.name, off, size, signed)), t_full, done, None


def _is_address_part(slot: str) -> bool:
    from .dwarf_expr import split_part

    part = split_part(slot)
    return part is not None and part[2] == 0


def is_float32(t: Any) -> bool:
    """Whether `t` (typedefs and qualifiers stripped) is a 4-byte `float`."""
    return t is not None and t.tag == "DW_TAG_base_type" and \
        die_attr(t, "DW_AT_encoding") == _DW_ATE_FLOAT and type_size(t, 8) == 4


def _object_size(info: DwarfInfo, t: Any, word: int, i: int) -> int:
    s = strip_type(t)
    if s is not None and s.tag in RECORDS:
        s = _resolve_declaration(info, s)
    if s is not None and s.tag == "DW_TAG_array_type":
        n = 1
        for c in s.iter_children():
            if c.tag == "DW_TAG_subrange_type":
                count = die_attr(c, "DW_AT_count")
                upper = die_attr(c, "DW_AT_upper_bound")
                n *= int(count) if count is not None else int(upper) + 1 if upper is not None \
                    else 0
        return n * _object_size(info, type_die(s), word, i)
    size = type_size(s, word)
    if size <= 0:
        raise DwarfAccessError(f"cannot index '{type_name(t)}': its size is unknown", i)
    return size


# -- finding roots ----------------------------------------------------------------------

def function_die(info: DwarfInfo, cu_offset: int, die_offset: int) -> Any:
    cu = info.dwarf.get_CU_at(cu_offset)
    return info.dwarf.get_DIE_from_refaddr(die_offset, cu)


def _static_address(die: Any) -> int | None:
    """The link-time address of a variable whose location is `DW_OP_addr A`."""
    loc = die.attributes.get("DW_AT_location")
    if loc is None or loc.form != "DW_FORM_exprloc" or not loc.value or loc.value[0] != 0x03:
        return None
    raw = bytes(loc.value[1:])
    return int.from_bytes(raw, "little") if len(raw) in (4, 8) else None


def find_variable(info: DwarfInfo, cu_offset: int, die_offset: int | None,
                  name: str) -> tuple[Any, int] | None:
    """(type DIE, link-time address) of a static variable `name` visible in the
    function (its static locals) or its CU (file-scope globals); None if none.
    A declaration (`extern`) is completed from the symbol table."""
    cu = info.dwarf.get_CU_at(cu_offset)
    scopes = []
    if die_offset is not None:
        scopes.append(info.dwarf.get_DIE_from_refaddr(die_offset, cu))
    scopes.append(cu.get_top_DIE())
    for scope in scopes:
        for c in scope.iter_children():
            if c.tag != "DW_TAG_variable" or die_attr(c, "DW_AT_name") != name.encode():
                continue
            addr = _static_address(c)
            if addr is None:
                addr = _symbol_address(info, name)
            if addr is not None:
                return type_die(c), addr
    return None


def _symbol_address(info: DwarfInfo, name: str) -> int | None:
    from .symbols import get_symbol_table

    sym = get_symbol_table(info.path).get_symbol(name)
    return sym.value if sym is not None and getattr(sym, "value", None) else None


def find_type(info: DwarfInfo, spelled: str) -> Any:
    """The DIE of a named type (`struct foo`, `union u`, `enum e`, `foo_t`) among the
    CUs' top-level DIEs, a complete definition preferred; None if none."""
    words = spelled.split()
    tags = {"struct": "DW_TAG_structure_type", "union": "DW_TAG_union_type",
            "class": "DW_TAG_class_type", "enum": "DW_TAG_enumeration_type"}
    if len(words) == 2 and words[0] in tags:
        tag, name = tags[words[0]], words[1]
    elif len(words) == 1:
        tag, name = "", words[0]
    else:
        return None
    fallback = None
    for cu in info.dwarf.iter_CUs():
        for c in cu.get_top_DIE().iter_children():
            if tag and c.tag != tag or not tag and c.tag not in (
                    "DW_TAG_typedef", "DW_TAG_base_type", *tags.values()):
                continue
            if die_attr(c, "DW_AT_name") != name.encode():
                continue
            if "DW_AT_declaration" in c.attributes:
                fallback = fallback or c
                continue
            return c
    return fallback



# -- pretty printing ($var$, $var$$) -------------------------------------------------------

PrettyComp = tuple[str, object]     # ("member", NAME) or ("index", N): a literal index


@dataclass(frozen=True)
class PrettyArg:
    """One value a pretty-printed string reads: the expression's components plus
    `extra`, as a number or (`string`) through user_string_quoted."""

    extra: tuple[PrettyComp, ...]
    string: bool = False


def pretty_plan(info: DwarfInfo, root_type: Any, full: bool
                ) -> tuple[str, tuple[PrettyArg, ...]]:
    """stap's `$var$` (`full`: `$var$$`) of a value of `root_type`: a format string
    and its arguments, as tapsets.cxx's dwarf_pretty_print builds them (structs
    as `{.a=1, .b=...}`, nested aggregates `{...}`/`[...]` unless full, char
    arrays and pointers as quoted strings, other pointers `%p`, an array its
    first element then `, ...`, floats `?`)."""
    fmt: list[str] = []
    args: list[PrettyArg] = []
    word = 4 if info.machine == "i386" else 8

    def push(f: str, extra: tuple[PrettyComp, ...], string: bool = False) -> None:
        if len(args) >= 32:   # stap's limit on one sprintf's arguments
            fmt.append("?")
            return
        fmt.append(f)
        args.append(PrettyArg(extra, string))

    def is_chars(t: Any) -> bool:
        s = strip_type(t)
        return s is not None and s.tag == "DW_TAG_base_type" and \
            die_attr(s, "DW_AT_encoding") in (6, 8, 0x10) and type_size(s, word) == 1

    def base(t: Any, extra: tuple[PrettyComp, ...], bitfield: bool = False) -> None:
        enc = die_attr(t, "DW_AT_encoding") if t.tag == "DW_TAG_base_type" else None
        if enc in (_DW_ATE_FLOAT, 3):   # float, complex float
            fmt.append("?")
        elif enc in (6, 8, 0x10) and not bitfield:   # chars
            push("'%#c'", extra)
        elif enc in (7, 8):   # unsigned, unsigned char
            push("%u", extra)
        else:
            push("%d", extra)

    def recurse(t_full: Any, extra: tuple[PrettyComp, ...], top: bool) -> None:
        t = strip_type(t_full)
        if t is None:
            push("%p", extra)
        elif t.tag in ("DW_TAG_base_type", "DW_TAG_enumeration_type"):
            base(t, extra)
        elif t.tag == "DW_TAG_array_type":
            if not top and not full:
                fmt.append("[...]")
                return
            elem = type_die(t)
            if is_chars(elem):
                push("%s", extra, True)
                return
            fmt.append("[")
            recurse(elem, (*extra, ("index", 0)), False)
            fmt.append(", ...]")
        elif t.tag in POINTERS:
            pointee = type_die(t)
            if strip_type(pointee) is not None:
                if is_chars(pointee):
                    push("%s", extra, True)
                    return
                if top:
                    recurse(pointee, extra, top)
                    return
            push("%p", extra)
        elif t.tag == "DW_TAG_subroutine_type":
            push("<function>:%p", extra)
        elif t.tag in RECORDS:
            t = _resolve_declaration(info, t)
            if "DW_AT_declaration" in t.attributes:
                fmt.append("{...}")
                return
            fmt.append("{")
            if top or full:
                members(t, extra)
            else:
                fmt.append("...")
            fmt.append("}")
        else:
            fmt.append("?")

    def members(t: Any, extra: tuple[PrettyComp, ...]) -> None:
        count = 0
        seen: set[str] = set()
        queue = [t]
        while queue:
            rec = queue.pop(0)
            for child in rec.iter_children():
                if "DW_AT_declaration" in child.attributes:
                    continue
                if child.tag == "DW_TAG_inheritance":
                    queue.append(strip_type(type_die(child)))
                    continue
                if child.tag != "DW_TAG_member":
                    continue
                raw = die_attr(child, "DW_AT_name")
                name = raw.decode(errors="replace") if raw is not None else None
                if name is not None and (name.startswith("_vptr.") or name in seen):
                    continue
                if name is not None:
                    seen.add(name)
                count += 1
                if count > 1:
                    fmt.append(", ")
                if len(args) >= 32:
                    fmt.append("...")
                    return
                ctype = type_die(child)
                sub = extra
                if name is not None:
                    fmt.append(f".{name}")
                    sub = (*extra, ("member", name))
                else:
                    # stap's own labels here, swapped as it has them
                    ctag = strip_type(ctype).tag if strip_type(ctype) is not None else ""
                    fmt.append({"DW_TAG_union_type": "<union>",
                                "DW_TAG_structure_type": "<class>",
                                "DW_TAG_class_type": "<struct>"}.get(ctag, ""))
                fmt.append("=")
                if "DW_AT_bit_size" in child.attributes:
                    s = strip_type(ctype)
                    if s is None or s.tag not in ("DW_TAG_base_type",
                                                  "DW_TAG_enumeration_type"):
                        fmt.append("?")
                    else:
                        base(s, sub, bitfield=True)
                else:
                    recurse(ctype, sub, False)

    recurse(root_type, (), True)
    return "".join(fmt), tuple(args)


def find_global(info: DwarfInfo, name: str, cu_pattern: str | None) -> tuple[Any, int] | None:
    """(type DIE, link-time address) of the file-scope variable `name` defined with a
    static address in a CU whose name matches `cu_pattern` (its whole path, its end
    after a '/', or a glob of its base name; None: any CU)."""
    import fnmatch
    import os

    for cu in info.dwarf.iter_CUs():
        top = cu.get_top_DIE()
        if cu_pattern is not None:
            raw = die_attr(top, "DW_AT_name")
            cu_name = raw.decode(errors="replace") if raw is not None else ""
            if not (cu_name == cu_pattern or cu_name.endswith("/" + cu_pattern)
                    or fnmatch.fnmatchcase(os.path.basename(cu_name), cu_pattern)
                    or fnmatch.fnmatchcase(cu_name, cu_pattern)):
                continue
        for c in top.iter_children():
            if c.tag == "DW_TAG_variable" and die_attr(c, "DW_AT_name") == name.encode():
                addr = _static_address(c)
                if addr is not None:
                    return type_die(c), addr
    return None
