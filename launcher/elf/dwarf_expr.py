"""DWARF location expressions compiled to the runtime's small stack machine.

A variable's location that is more than one register or one `breg`/`fbreg`
slot (what `dwarf.py` turns into a plain REG or MEM ArgSpec) becomes an EXPR
ArgSpec: a list of `(op, reg, arg)` steps the runtime evaluates against the
probe's saved registers (`pd_eval_dwarf` in runtime/pd_builtins.c), reading
memory with the same fault-safe user read as every other probe read.

What it evaluates, as stap's loc2stap does: registers (`DW_OP_regN` as a
place, `DW_OP_bregN off` as a value), the frame base (`DW_OP_fbreg` over a
`DW_OP_call_frame_cfa`, register or `breg` frame base), `DW_OP_deref[_size]`,
arithmetic, `DW_OP_lit*`/`DW_OP_const*`, `DW_OP_stack_value` (a computed
value, not a place), `DW_OP_piece` (register, memory or value
pieces: a scalar of up to 8 bytes assembled, a struct's members read from the
piece holding each, `narrow`) and `DW_OP_entry_value` of a register: the register itself at the
function's entry; elsewhere in the function its value there, which a hidden
probe on the entry keeps for the call (`needs_entry`; stap sets a global from
an extra entry probe the same way).  Where the CFA is unknown the call's kept
values cannot be found, and the value is "not accessible at this address", as
stap says.  Anything else keeps the "not supported" reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from .argspec import ArgKind, ArgSpec


class ExprError(Exception):
    """The expression cannot be evaluated by a probe; the message says why."""


@dataclass(frozen=True)
class FrameBase:
    """A frame base or the CFA at the pc: the value of register `reg` plus `off`."""

    reg: int
    off: int


@dataclass(frozen=True)
class Frame:
    """What a location at one pc may refer to: the frame base, the CFA (each None
    where unknown) and whether the pc is the function's entry."""

    base: FrameBase | None = None
    cfa: FrameBase | None = None
    entry: bool = False


ENTRY_REG = "PD_DW_ENTRY_REG"   # a register's value at the function's entry

_STACK = 8   # PD_DW_STACK in runtime/pd_builtins.c: the evaluator's stack

_BINARY = {"DW_OP_plus": "PD_DW_PLUS", "DW_OP_minus": "PD_DW_MINUS",
           "DW_OP_and": "PD_DW_AND", "DW_OP_or": "PD_DW_OR", "DW_OP_xor": "PD_DW_XOR",
           "DW_OP_mul": "PD_DW_MUL", "DW_OP_shl": "PD_DW_SHL", "DW_OP_shr": "PD_DW_SHR",
           "DW_OP_shra": "PD_DW_SHRA"}
_UNARY = {"DW_OP_neg": "PD_DW_NEG", "DW_OP_not": "PD_DW_NOT"}
_CONSTS = {"DW_OP_const1u", "DW_OP_const1s", "DW_OP_const2u", "DW_OP_const2s",
           "DW_OP_const4u", "DW_OP_const4s", "DW_OP_const8u", "DW_OP_const8s",
           "DW_OP_constu", "DW_OP_consts"}


def needs_entry(spec: ArgSpec | None) -> bool:
    """Whether reading `spec` needs the registers kept at the function's entry."""
    return spec is not None and spec.kind is ArgKind.EXPR and \
        any(op == ENTRY_REG for op, _, _ in spec.ops)


def part_name(name: str, off: int, size: int, signed: bool) -> str:
    """The parameter slot of `size` bytes at `off` of variable `name` (a member of a
    struct passed by value), as FunctionPlan.param_args derives its location."""
    return f"{name}:{off}:{size}:{int(signed)}"


def split_part(slot: str) -> tuple[str, int, int, bool] | None:
    """part_name's (name, off, size, signed); None for a whole variable's slot."""
    name, sep, rest = slot.partition(":")
    if not sep:
        return None
    off, size, signed = (int(x) for x in rest.split(":"))
    return name, off, size, bool(signed)


def narrow(spec: ArgSpec, off: int, size: int, signed: bool) -> ArgSpec:
    """Where the `size` bytes at `off` of the object at `spec` are: a struct passed by
    value may be in memory, in one register, or in pieces (registers, memory, values),
    as stap's translate_location reads a member of one.  ExprError if they are not in
    one piece.  `size` 0: the address of byte `off` (of an object in memory)."""
    if size == 0:
        return _address(spec, off)
    if spec.kind is ArgKind.MEM:
        return replace(spec, text=f"{spec.text}+{off}", size=size, signed=signed,
                       disp=spec.disp + off)
    if spec.kind is ArgKind.REG:
        if off + size > spec.size:
            raise ExprError(f"bytes {off}-{off + size - 1} are beyond its register")
        return replace(spec, text=f"{spec.text}+{off}", size=size, signed=signed,
                       reg_shift=spec.reg_shift + 8 * off)
    if spec.kind is not ArgKind.EXPR:
        raise ExprError(f"a part of a {spec.kind.value} location")
    if spec.ops[-1][0] == "PD_DW_END_MEMORY":
        ops = (*spec.ops[:-1], ("PD_DW_PLUS_CONST", 0, off), spec.ops[-1])
        return replace(spec, size=size, signed=signed, ops=ops)
    if spec.ops[-1][0] != "PD_DW_END_PIECES":
        raise ExprError(f"a part of a {spec.error}")
    start, since = 0, 0
    for i, (op, reg, arg) in enumerate(spec.ops):
        if not op.startswith("PD_DW_PIECE_"):
            continue
        if start <= off and off + size <= start + arg:
            inner = off - start
            if op == "PD_DW_PIECE_REG":
                return ArgSpec(f"{spec.text}+{off}", size, signed, False, ArgKind.REG, reg=reg,
                               reg_shift=8 * inner, machine=spec.machine)
            head = spec.ops[since:i]
            if op == "PD_DW_PIECE_MEM":
                ops = (*head, ("PD_DW_PLUS_CONST", 0, inner), ("PD_DW_END_MEMORY", 0, 0))
                what = "memory"
            else:
                ops = (*head, ("PD_DW_CONST", 0, 8 * inner), ("PD_DW_SHR", 0, 0),
                       ("PD_DW_END_VALUE", 0, 0))
                what = "computed value"
            return replace(spec, text=f"{spec.text}+{off}", size=size, signed=signed,
                           ops=ops, error=what)
        start += arg
        since = i + 1
    raise ExprError(f"bytes {off}-{off + size - 1} are not in one piece of its location")


def _address(spec: ArgSpec, off: int) -> ArgSpec:
    """The address of byte `off` of the object at `spec`, as a value."""
    word = 4 if spec.machine == "i386" else 8
    if spec.kind is ArgKind.MEM and spec.index < 0 and not spec.segment and \
            not spec.disp_is_vaddr and spec.base >= 0:
        ops: tuple[tuple[str, int, int], ...] = (
            ("PD_DW_REG", spec.base, 0), ("PD_DW_PLUS_CONST", 0, spec.disp + off))
    elif spec.kind is ArgKind.EXPR and spec.ops[-1][0] == "PD_DW_END_MEMORY":
        ops = (*spec.ops[:-1], ("PD_DW_PLUS_CONST", 0, off))
    else:
        raise ExprError("not in memory: its arrays and structs have no address")
    return ArgSpec(f"&{spec.text}+{off}", word, False, False, ArgKind.EXPR,
                   ops=(*ops, ("PD_DW_END_VALUE", 0, 0)), machine=spec.machine,
                   error="computed value")


def _regnum(name: str, prefix: str) -> int | None:
    rest = name[len(prefix):]
    return int(rest) if name.startswith(prefix) and rest.isdigit() else None


def compile_expr(ops: Sequence[Any], *, machine: str, nregs: int, word: int, size: int,
                 signed: bool, frame_base: FrameBase | None, cfa: FrameBase | None,
                 at_entry: bool, pc: int
                 ) -> ArgSpec:
    """The EXPR ArgSpec of `ops` (pyelftools DWARFExprOps) for a `size`-byte value;
    ExprError if a probe cannot evaluate it at `pc` (`at_entry`: pc is the
    function's entry, where an entry value is the register itself)."""
    out: list[tuple[str, int, int]] = []
    depth = 0            # values on the evaluation stack
    place: int | None = None   # the current piece is in this register (DW_OP_regN)
    value = False        # the current piece is a computed value (DW_OP_stack_value)
    pieces = 0           # bytes assembled so far
    has_pieces = False

    def need(n: int, what: str) -> None:
        if depth < n:
            raise ExprError(f"stack underflow at '{what}'")

    def reg_ok(r: int) -> int:
        if r >= nregs:
            raise ExprError(f"in DWARF register {r}, which probes do not save")
        return r

    for op in ops:
        n = op.op_name
        if place is not None and n != "DW_OP_piece":
            raise ExprError(f"location '{n}' after a register is not supported")
        r = _regnum(n, "DW_OP_reg")
        b = _regnum(n, "DW_OP_breg")
        lit = _regnum(n, "DW_OP_lit")
        if r is not None or n == "DW_OP_regx":
            place = reg_ok(r if r is not None else int(op.args[0]))
        elif b is not None or n == "DW_OP_bregx":
            reg, off = (b, int(op.args[0])) if b is not None else \
                (int(op.args[0]), int(op.args[1]))
            out += [("PD_DW_REG", reg_ok(reg), 0), ("PD_DW_PLUS_CONST", 0, off)]
            depth += 1
        elif n == "DW_OP_fbreg":
            if frame_base is None:
                raise ExprError("DW_AT_frame_base not accessible at this address")
            out += [("PD_DW_REG", reg_ok(frame_base.reg), 0),
                    ("PD_DW_PLUS_CONST", 0, frame_base.off + int(op.args[0]))]
            depth += 1
        elif n == "DW_OP_call_frame_cfa":
            if cfa is None:
                raise ExprError("DW_OP_call_frame_cfa not accessible at this address")
            out += [("PD_DW_REG", reg_ok(cfa.reg), 0), ("PD_DW_PLUS_CONST", 0, cfa.off)]
            depth += 1
        elif lit is not None:
            out.append(("PD_DW_CONST", 0, lit))
            depth += 1
        elif n in _CONSTS:
            out.append(("PD_DW_CONST", 0, int(op.args[0])))
            depth += 1
        elif n == "DW_OP_addr":
            out.append(("PD_DW_ADDR", 0, int(op.args[0])))
            depth += 1
        elif n in ("DW_OP_entry_value", "DW_OP_GNU_entry_value"):
            inner = op.args[0] if op.args else []
            ir = _regnum(inner[0].op_name, "DW_OP_reg") if len(inner) == 1 else None
            if ir is None:
                raise ExprError(f"location '{n}' of a non-register not supported")
            if at_entry:
                out.append(("PD_DW_REG", reg_ok(ir), 0))
            elif cfa is not None:
                # kept by a hidden probe on the function's entry, found again here by
                # the return-address slot the CFA names (launcher/entry.py)
                out.append((ENTRY_REG, reg_ok(ir), 0))
            else:
                raise ExprError(f"not accessible at this address: {pc:#x} "
                                "(its value at the function's entry is gone here, and "
                                "the frame that would find it again is unknown)")
            depth += 1
        elif n == "DW_OP_deref" or n == "DW_OP_deref_size":
            need(1, n)
            dsize = word if n == "DW_OP_deref" else int(op.args[0])
            out.append(("PD_DW_DEREF", 0, dsize))
        elif n == "DW_OP_plus_uconst":
            need(1, n)
            out.append(("PD_DW_PLUS_CONST", 0, int(op.args[0])))
        elif n in _BINARY:
            need(2, n)
            out.append((_BINARY[n], 0, 0))
            depth -= 1
        elif n in _UNARY:
            need(1, n)
            out.append((_UNARY[n], 0, 0))
        elif n == "DW_OP_dup":
            need(1, n)
            out.append(("PD_DW_DUP", 0, 0))
            depth += 1
        elif n == "DW_OP_stack_value":
            need(1, n)
            value = True
        elif n == "DW_OP_piece":
            psize = int(op.args[0])
            has_pieces = True
            if pieces + psize > max(size, 8):
                raise ExprError(f"location with pieces beyond the {size} bytes of its "
                                "object not supported")
            if place is not None:
                out.append(("PD_DW_PIECE_REG", place, psize))
            elif depth == 0:
                # an empty piece: that part of the value is optimized out
                raise ExprError(f"part of the value (bytes {pieces}-{pieces + psize - 1}) "
                                "is optimized out")
            else:
                out.append(("PD_DW_PIECE_VAL" if value else "PD_DW_PIECE_MEM", 0, psize))
                depth -= 1
            pieces += psize
            place, value = None, False
        else:
            raise ExprError(f"location '{n}' not supported")
        if depth > _STACK:
            raise ExprError(f"location deeper than {_STACK} values not supported")
    if has_pieces:
        if place is not None or depth:
            raise ExprError("DW_OP_piece left multiple values on stack")
        if pieces < size:
            raise ExprError(f"location gives {pieces} of its {size} bytes")
        out.append(("PD_DW_END_PIECES", 0, 0))
        what = "noncontiguous object"
    elif place is not None:
        return ArgSpec(f"dwarf{place}", size, signed, False, ArgKind.REG, reg=place,
                       machine=machine)
    elif depth != 1:
        raise ExprError("stack underflow" if not depth else "multiple values left on stack")
    elif value:
        out.append(("PD_DW_END_VALUE", 0, 0))
        what = "computed value"
    else:
        out.append(("PD_DW_END_MEMORY", 0, 0))
        what = "memory"
    text = " ".join(o.op_name for o in ops)
    return ArgSpec(text, size, signed, False, ArgKind.EXPR, ops=tuple(out), machine=machine,
                   error=what)
