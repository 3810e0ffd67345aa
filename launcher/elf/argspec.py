"""USDT argument descriptors: `-4@8(%ebp)` → where and how to read the value.

A `.note.stapsdt` argument string holds one `[-]SIZE[f]@OPERAND` per argument,
where OPERAND is whatever the compiler printed for the asm operand: a constant,
a register or a memory reference in the target's assembler syntax.  This module
turns each into an `ArgSpec` the C runtime can evaluate against a saved
register context.  Registers become DWARF numbers; symbolic displacements are
resolved here, offline, against the file's symbol table.  Whatever cannot be
decoded exactly becomes an UNSUPPORTED spec that says why: a wrong value
reported as right is worse than no value.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from .symbols import Symbol, SymbolTable


class ArgKind(Enum):
    CONST = "const"
    REG = "reg"
    MEM = "mem"
    EXPR = "expr"
    UNSUPPORTED = "unsupported"


@dataclass(frozen=True)
class ArgSpec:
    """One probe argument: its size and type, and how to fetch it.

    CONST: `value` (already masked to `size` and sign/zero-extended).
    REG:   register `reg` (DWARF number) shifted right by `reg_shift`.
    MEM:   `size` bytes at [segment base] + base + index*scale + disp
           (+ the load bias when `disp_is_vaddr`).
    A CONST with `disp_is_vaddr` is a symbol address (`$sym`): add the load bias.
    EXPR:  a DWARF location compiled to the runtime's stack machine (elf/dwarf_expr.py):
           `ops` its (op, register, argument) steps, `error` what it gives ("memory",
           "computed value", "noncontiguous object").
    """

    text: str
    size: int
    signed: bool
    is_float: bool
    kind: ArgKind
    value: int = 0
    reg: int = -1
    reg_shift: int = 0
    base: int = -1
    index: int = -1
    scale: int = 1
    disp: int = 0
    disp_is_vaddr: bool = False
    segment: str | None = None
    error: str = ""
    machine: str = ""
    ops: tuple[tuple[str, int, int], ...] = ()
    note_size: int = 0      # REG narrower than the note's size: that size (`size` is the width)

    @property
    def supported(self) -> bool:
        return self.kind is not ArgKind.UNSUPPORTED

    def describe(self) -> str:
        """Plain-words description, e.g. 'signed 4-byte memory at ebp+8'."""
        if self.kind is ArgKind.UNSUPPORTED:
            return f"unsupported: {self.error}"
        if self.is_float:
            what = f"{self.size}-byte float"
        else:
            what = f"{'signed' if self.signed else 'unsigned'} {self.size}-byte"
        names = _REG_NAMES.get(self.machine, ())

        def rname(n: int) -> str:
            return names[n] if 0 <= n < len(names) else f"dwarf{n}"

        if self.kind is ArgKind.CONST:
            if self.disp_is_vaddr:
                return f"{what} address {self.value:#x} + load bias"
            return f"{what} constant {self.value}"
        if self.kind is ArgKind.REG:
            shift = f" bits {self.reg_shift}-{self.reg_shift + 7}" if self.reg_shift else ""
            widened = (f", {'sign' if self.signed else 'zero'}-extended to {self.note_size} "
                       "bytes" if self.note_size else "")
            return f"{what} register {rname(self.reg)}{shift}{widened}"
        if self.kind is ArgKind.EXPR:
            return f"{what} {self.error} from DWARF location '{self.text}'"
        terms = []
        if self.base >= 0:
            terms.append(rname(self.base))
        if self.index >= 0:
            terms.append(f"{rname(self.index)}*{self.scale}")
        if self.disp_is_vaddr:
            terms.append(f"{self.disp:#x}+load bias")
        elif self.disp or not terms:
            terms.append(str(self.disp))
        addr = "+".join(terms).replace("+-", "-")
        if self.segment:
            addr = f"{self.segment}:{addr}"
        return f"{what} memory at {addr}"

    def __str__(self) -> str:
        return f"{self.text} [{self.describe()}]"


# DWARF register numbers (System V psABI tables).  Sub-registers map to their parent.
_X86_64_REGS: dict[str, tuple[int, int, int]] = {}   # name -> (dwarf, width, shift)
_I386_REGS: dict[str, tuple[int, int, int]] = {}
_AARCH64_REGS: dict[str, tuple[int, int, int]] = {}


def _init_tables() -> None:
    for num, (q, d, w, b, h) in enumerate([
            ("rax", "eax", "ax", "al", "ah"), ("rdx", "edx", "dx", "dl", "dh"),
            ("rcx", "ecx", "cx", "cl", "ch"), ("rbx", "ebx", "bx", "bl", "bh"),
            ("rsi", "esi", "si", "sil", ""), ("rdi", "edi", "di", "dil", ""),
            ("rbp", "ebp", "bp", "bpl", ""), ("rsp", "esp", "sp", "spl", "")]):
        _X86_64_REGS.update({q: (num, 8, 0), d: (num, 4, 0), w: (num, 2, 0), b: (num, 1, 0)})
        if h:
            _X86_64_REGS[h] = (num, 1, 8)
    for num in range(8, 16):
        r = f"r{num}"
        _X86_64_REGS.update({r: (num, 8, 0), r + "d": (num, 4, 0), r + "w": (num, 2, 0),
                             r + "b": (num, 1, 0), r + "l": (num, 1, 0)})
    _X86_64_REGS["rip"] = (16, 8, 0)
    # %sil/%dil exist only in 64-bit mode, but an i386 note written in assembly can name
    # them (gas copies the text); stap reads them as the low byte of %esi/%edi.
    for num, (d, w, b, h) in enumerate([
            ("eax", "ax", "al", "ah"), ("ecx", "cx", "cl", "ch"), ("edx", "dx", "dl", "dh"),
            ("ebx", "bx", "bl", "bh"), ("esp", "sp", "", ""), ("ebp", "bp", "", ""),
            ("esi", "si", "sil", ""), ("edi", "di", "dil", "")]):
        _I386_REGS.update({d: (num, 4, 0), w: (num, 2, 0)})
        if b:
            _I386_REGS[b] = (num, 1, 0)
        if h:
            _I386_REGS[h] = (num, 1, 8)
    _I386_REGS["eip"] = (8, 4, 0)
    for num in range(31):
        _AARCH64_REGS.update({f"x{num}": (num, 8, 0), f"w{num}": (num, 4, 0)})
    _AARCH64_REGS.update({"fp": (29, 8, 0), "lr": (30, 8, 0), "sp": (31, 8, 0),
                          "wsp": (31, 4, 0)})


_init_tables()

_REG_NAMES: dict[str, tuple[str, ...]] = {
    "x86_64": ("rax", "rdx", "rcx", "rbx", "rsi", "rdi", "rbp", "rsp",
               *(f"r{n}" for n in range(8, 16)), "rip"),
    "i386": ("eax", "ecx", "edx", "ebx", "esp", "ebp", "esi", "edi", "eip"),
    "aarch64": (*(f"x{n}" for n in range(31)), "sp"),
}
_X86_TABLES = {"x86_64": _X86_64_REGS, "i386": _I386_REGS}
_RIP = {"x86_64": 16, "i386": 8}
_NATIVE_SIZE = {"x86_64": 8, "i386": 4, "aarch64": 8}
# Segments whose base is 0 in Linux user space: an override is a no-op.
_FLAT_SEGMENTS = ("cs", "ds", "es", "ss")
# The thread-pointer segment, and the relocation giving a variable's offset from it
# (x86-64 @tpoff and i386 @ntpoff are both "variable minus thread pointer").
_TLS_SEGMENT = {"x86_64": "fs", "i386": "gs"}
_TLS_RELOC = {"x86_64": "tpoff", "i386": "ntpoff"}

# An argument starts at the beginning or after a space with `[-]SIZE[f]@`.  Splitting on
# every space or `@` would break `sym@GOTOFF(%ebx)` and aarch64's `[x0, 152]`.
_ARG_START = re.compile(r"(?:^| )(-?)(\d+)(f?)@")
_SIZED_WORD = re.compile(r"(-?)(\d+)(f?)@(\S+)")
_INT = r"(?:0[xX][0-9a-fA-F]+|\d+)"
_INT_RE = re.compile(r"[+-]?" + _INT)
_TERM_RE = re.compile(r"\s*([+-]?)\s*(" + _INT + r"|[A-Za-z_.$][\w.$]*(?:@[A-Za-z]+)?)\s*")
_X86_SIMPLE_MEM_RE = re.compile(r"(-?\d*)\(%([a-z0-9]+)\)")
_X86_MEM_RE = re.compile(r"(?:%([a-z]{2}):)?([^()]*)(?:\(([^()]*)\))?")
_AARCH64_MEM_RE = re.compile(r"\[\s*([a-z0-9]+)\s*(?:,\s*(#?[^,\]]+?)\s*"
                             r"(?:,\s*lsl\s+#?(\d+)\s*)?)?\]")


class _Unsupported(Exception):
    """Raised inside the parser; becomes an UNSUPPORTED ArgSpec."""


def _mask(value: int, size: int, signed: bool) -> int:
    bits = size * 8
    value &= (1 << bits) - 1
    if signed and value >> (bits - 1):
        value -= 1 << bits
    return value


def _parse_int(text: str) -> int:
    if not _INT_RE.fullmatch(text):
        raise _Unsupported(f"bad number {text!r}")
    # int(x, 0) rejects "010"; gas never prints octal, so digits are decimal.
    return int(text, 16) if "x" in text or "X" in text else int(text, 10)


def split_sdt_args(text: str) -> list[tuple[int, bool, bool, str, str]]:
    """Split an argument string into (size, signed, is_float, operand, arg_text) tuples.

    size 0 marks a legacy operand without a `SIZE@` prefix (sdt.h v1/v2).
    """
    text = text.strip()
    if not text:
        return []
    starts = list(_ARG_START.finditer(text))
    head = text[:starts[0].start()] if starts else text
    out = [(0, False, False, op, op) for op in _top_level_words(head) if op]
    for i, m in enumerate(starts):
        end = starts[i + 1].start() if i + 1 < len(starts) else len(text)
        # Only aarch64's `[x0, 152]` has blanks, inside its brackets: a word after the
        # operand is a size-less one (a hand-written note may mix the two forms, as
        # stap, which splits at every blank, reads it).
        operand, *legacy = _top_level_words(text[m.end():end])
        arg = f"{text[m.start():m.end()].lstrip()}{operand}"
        out.append((int(m.group(2)), m.group(1) == "-", m.group(3) == "f", operand, arg))
        out += [(0, False, False, op, op) for op in legacy]
    return out


def _top_level_words(text: str) -> list[str]:
    """`text` split at the blanks outside brackets and parentheses."""
    words, cur, depth = [], "", 0
    for ch in text.strip():
        depth += (ch in "[(") - (ch in "])")
        if ch == " " and depth <= 0:
            if cur:
                words.append(cur)
            cur = ""
        else:
            cur += ch
    return [*words, cur] if cur or not words else words


class ArgParser:
    """Parses argument strings of one file, caching each distinct argument.

    A binary with thousands of probes repeats the same few operands
    (`-4@%edi`, `8@%rsi`, ...), so get_probe_sites keeps one parser per file.
    """

    def __init__(self, machine: str, symbols: SymbolTable | None = None,
                 tls: tuple[int, int, int] | None = None) -> None:
        self.machine = machine
        self.symbols = symbols
        self.tls = tls
        self._cache: dict[str, ArgSpec] = {}

    def parse(self, text: str) -> tuple[ArgSpec, ...]:
        specs = self._fast_parse(text)
        if specs is not None:
            return specs
        out = []
        for size, signed, is_float, operand, arg in split_sdt_args(text):
            spec = self._cache.get(arg) if size else None
            if spec is None:
                spec = self._parse_one(size, signed, is_float, operand, arg)
                if size:
                    self._cache[arg] = spec
            out.append(spec)
        return tuple(out)

    def _fast_parse(self, text: str) -> tuple[ArgSpec, ...] | None:
        """The common case, x86 operands without spaces: one `SIZE@op` per word."""
        out = []
        for word in text.split():
            spec = self._cache.get(word)
            if spec is None:
                m = _SIZED_WORD.fullmatch(word)
                if m is None:
                    return None      # aarch64 `[x0, 8]` or legacy operands: split properly
                spec = self._parse_one(int(m[2]), m[1] == "-", m[3] == "f", m[4], word)
                self._cache[word] = spec
            out.append(spec)
        return tuple(out)

    def _parse_one(self, size: int, signed: bool, is_float: bool, operand: str,
                   arg: str) -> ArgSpec:
        machine = self.machine
        if size == 0:
            # Legacy operand without a size: the old convention was an unsigned native long.
            size = _NATIVE_SIZE.get(machine, 8)
        a = _Arg(arg, size, signed, is_float, machine)
        try:
            if size not in (1, 2, 4, 8):
                raise _Unsupported(f"unsupported argument size {size}")
            if is_float and size not in (4, 8):
                raise _Unsupported(f"unsupported {size}-byte floating-point argument")
            if machine in _X86_TABLES:
                return _parse_x86(a, operand, self.symbols, self.tls)
            if machine == "aarch64":
                return _parse_aarch64(a, operand)
            raise _Unsupported(f"arguments on machine {machine} are not supported")
        except _Unsupported as exc:
            return ArgSpec(arg, size, signed, is_float, ArgKind.UNSUPPORTED, error=str(exc),
                           machine=machine)


def parse_sdt_args(text: str, machine: str, symbols: SymbolTable | None = None,
                   tls: tuple[int, int, int] | None = None) -> tuple[ArgSpec, ...]:
    """Decode a `.note.stapsdt` argument string for `machine` ('x86_64', 'i386', 'aarch64').

    `symbols` resolves symbolic operands; `tls` is the executable's PT_TLS
    (vaddr, memsz, align), needed for `%fs:sym@tpoff` (pass None for a library,
    whose static-TLS offset is only known at run time).
    """
    return ArgParser(machine, symbols, tls).parse(text)


class _Arg:
    """The parts of an argument known before its operand is decoded."""

    __slots__ = ("text", "size", "signed", "is_float", "machine")

    def __init__(self, text: str, size: int, signed: bool, is_float: bool,
                 machine: str) -> None:
        self.text = text
        self.size = size
        self.signed = signed
        self.is_float = is_float
        self.machine = machine

    def const(self, value: int, *, vaddr: bool = False) -> ArgSpec:
        if not vaddr and not -(1 << 64) < value < (1 << 64):
            raise _Unsupported(f"constant {value} does not fit in 64 bits")
        return ArgSpec(self.text, self.size, self.signed, self.is_float, ArgKind.CONST,
                       value=_mask(value, self.size, self.signed), disp_is_vaddr=vaddr,
                       machine=self.machine)

    def reg(self, reg: tuple[int, int, int], name: str) -> ArgSpec:
        num, width, shift = reg
        if width >= self.size:
            return ArgSpec(self.text, self.size, self.signed, self.is_float, ArgKind.REG,
                           reg=num, reg_shift=shift, machine=self.machine)
        if self.size > _NATIVE_SIZE[self.machine] or self.is_float:
            # e.g. i386 `-8@%eax`: the compiler printed only the low register of a pair,
            # and the note does not say where the high half is.
            raise _Unsupported(f"{self.size}-byte argument in {width}-byte register {name} "
                               "(the rest of the value is not recorded)")
        # A register narrower than the argument, `8@%ah`: written by hand in assembly
        # (sdt.h's assembler macros give every operand the native size, and the legacy
        # forms none).  The value is the register's bits, extended to the argument's
        # size by its sign, as stap reads it; the table reads `width` bytes.
        return ArgSpec(self.text, width, self.signed, self.is_float, ArgKind.REG,
                       reg=num, reg_shift=shift, machine=self.machine, note_size=self.size)

    def mem(self, base: int = -1, index: int = -1, scale: int = 1, disp: int = 0,
            disp_is_vaddr: bool = False, segment: str | None = None) -> ArgSpec:
        return ArgSpec(self.text, self.size, self.signed, self.is_float, ArgKind.MEM,
                       base=base, index=index, scale=scale, disp=disp,
                       disp_is_vaddr=disp_is_vaddr, segment=segment, machine=self.machine)


def _x86_reg(name: str, machine: str) -> tuple[int, int, int]:
    reg = _X86_TABLES[machine].get(name[1:].lower()) if name.startswith("%") else None
    if reg is None:
        if not name.startswith("%"):
            raise _Unsupported(f"expected a register, got {name!r}")
        if re.fullmatch(r"[xyz]mm\d+|st(\(\d\))?|mm\d", name[1:].lower()):
            raise _Unsupported(f"floating-point/vector register {name} is not supported")
        raise _Unsupported(f"unknown register {name}")
    return reg


def _x86_address_reg(name: str, machine: str) -> int:
    num, width, _shift = _x86_reg(name, machine)
    if width != _NATIVE_SIZE[machine]:
        # `(%eax)` on x86-64 truncates the address to 32 bits (an address-size
        # override); `(%bx)` on i386 is 16-bit addressing.  Compilers do not emit
        # either for sdt.h operands, and reading the full register would be wrong.
        raise _Unsupported(f"{width * 8}-bit address register {name} is not supported")
    return num


def _parse_x86(a: _Arg, op: str, symbols: SymbolTable | None,
               tls: tuple[int, int, int] | None) -> ArgSpec:
    machine = a.machine
    if not op:
        raise _Unsupported("empty operand")
    if op[0] == "$":
        const, sym, reloc = _parse_disp(op[1:])
        if sym is None:
            return a.const(const)
        if reloc is not None:
            raise _Unsupported(f"immediate with relocation @{reloc} is not supported")
        s = _lookup(sym, symbols)
        return a.const(s.value + const, vaddr=s.section != "ABS")
    if op[0] == "%" and ":" not in op and "(" not in op:
        return a.reg(_x86_reg(op, machine), op)
    m = _X86_SIMPLE_MEM_RE.fullmatch(op)
    if m is not None:
        # Fast path for the most common form, `-20(%rbp)`.
        reg = _X86_TABLES[machine].get(m[2])
        if reg is not None and reg[0] != _RIP[machine] and reg[1] == _NATIVE_SIZE[machine]:
            return a.mem(reg[0], disp=int(m[1]) if m[1] else 0)
    m = _X86_MEM_RE.fullmatch(op)
    if m is None:
        raise _Unsupported(f"cannot parse operand {op!r}")
    seg, disp_text, inner = m.group(1), m.group(2).strip(), m.group(3)
    if seg is not None and seg in _FLAT_SEGMENTS:
        seg = None
    elif seg is not None and seg not in ("fs", "gs"):
        raise _Unsupported(f"unknown segment register %{seg}")
    base = index = -1
    scale = 1
    if inner is not None:
        parts = [p.strip() for p in inner.split(",")]
        if len(parts) > 3 or (len(parts) == 1 and not parts[0]):
            raise _Unsupported(f"cannot parse memory operand {op!r}")
        if parts[0]:
            base = _x86_address_reg(parts[0], machine)
        if len(parts) >= 2 and parts[1] and parts[1].lower() not in ("%riz", "%eiz"):
            # (%riz/%eiz is the assembler's "no index" pseudo-register.)
            index = _x86_address_reg(parts[1], machine)
            if index == _RIP[machine]:
                raise _Unsupported(f"bad index register in {op!r}")
        if len(parts) == 3:
            scale = _parse_int(parts[2]) if parts[2] else 1
            if scale not in (1, 2, 4, 8):
                raise _Unsupported(f"bad scale {parts[2]} in {op!r}")
    elif not disp_text:
        raise _Unsupported(f"cannot parse operand {op!r}")
    if not disp_text:
        const, sym, reloc = 0, None, None
    elif _INT_RE.fullmatch(disp_text):
        const, sym, reloc = _parse_int(disp_text), None, None
    else:
        const, sym, reloc = _parse_disp(disp_text)
    rip = _RIP[machine]
    if sym is None:
        if base == rip:
            # Only the assembler knows the address of the next instruction.
            raise _Unsupported(f"rip-relative operand without a symbol {op!r}")
        return a.mem(base, index, scale, const, segment=seg)
    s = _lookup(sym, symbols)
    if reloc is None:
        if s.type == "TLS":
            raise _Unsupported(f"thread-local symbol {sym} used without @{_TLS_RELOC[machine]}")
        if base == rip:
            if index >= 0:
                raise _Unsupported(f"bad rip-relative operand {op!r}")
            base = -1     # sym(%rip) is the symbol's own address
        return a.mem(base, index, scale, s.value + const, s.section != "ABS", seg)
    reloc_l = reloc.lower()
    if reloc_l == "gotoff":
        got = symbols.get_got_address() if symbols is not None else None
        if got is None:
            raise _Unsupported(f"{sym}@GOTOFF: the file has no GOT address")
        if base < 0 or base == rip:
            raise _Unsupported(f"{sym}@GOTOFF needs a GOT base register in {op!r}")
        return a.mem(base, index, scale, s.value + const - got, segment=seg)
    if reloc_l == _TLS_RELOC[machine]:
        if seg != _TLS_SEGMENT[machine]:
            raise _Unsupported(f"{sym}@{reloc} outside %{_TLS_SEGMENT[machine]}: in {op!r}")
        if s.type != "TLS":
            raise _Unsupported(f"{sym}@{reloc}: {sym} is not a thread-local symbol")
        if tls is None:
            raise _Unsupported(f"{sym}@{reloc} needs the executable's PT_TLS segment")
        if base == rip:
            raise _Unsupported(f"bad TLS operand {op!r}")
        _vaddr, memsz, align = tls
        align = max(align, 1)
        # TLS variant II: the executable's block ends at the thread pointer, and a
        # TLS symbol's st_value is its offset in the block.
        block = (memsz + align - 1) // align * align
        return a.mem(base, index, scale, s.value - block + const, segment=seg)
    raise _Unsupported(f"relocation @{reloc} in {op!r} is not supported")


def _parse_disp(text: str) -> tuple[int, str | None, str | None]:
    """`12+arr`, `arr-4`, `-8`, `sym@GOTOFF` → (constant sum, symbol, relocation)."""
    pos = 0
    const = 0
    sym: str | None = None
    reloc: str | None = None
    while pos < len(text):
        m = _TERM_RE.match(text, pos)
        if m is None or m.end() == pos:
            raise _Unsupported(f"cannot parse displacement {text!r}")
        sign, term = m.group(1), m.group(2)
        if not sign and pos:
            raise _Unsupported(f"cannot parse displacement {text!r}")
        pos = m.end()
        if term[0].isdigit():
            value = _parse_int(term)
            const += -value if sign == "-" else value
            continue
        if sym is not None:
            raise _Unsupported(f"more than one symbol in {text!r}")
        if sign == "-":
            raise _Unsupported(f"negated symbol in {text!r}")
        sym, _, r = term.partition("@")
        reloc = r or None
    return const, sym, reloc


def _lookup(name: str, symbols: SymbolTable | None) -> Symbol:
    if symbols is None:
        raise _Unsupported(f"symbol {name} cannot be resolved without a symbol table")
    sym = symbols.get_symbol(name)
    if sym is None:
        if symbols.get_symbols(name):
            raise _Unsupported(f"symbol {name} is ambiguous (defined more than once)")
        raise _Unsupported(f"symbol {name} not found")
    return sym


def _parse_aarch64(a: _Arg, op: str) -> ArgSpec:
    if not op:
        raise _Unsupported("empty operand")
    lower = op.lower()
    if lower.startswith("#"):
        return a.const(_parse_int(lower[1:]))
    if _INT_RE.fullmatch(lower):
        return a.const(_parse_int(lower))
    if lower in ("xzr", "wzr"):
        return a.const(0)
    if lower in _AARCH64_REGS:
        return a.reg(_AARCH64_REGS[lower], op)
    m = _AARCH64_MEM_RE.fullmatch(lower)
    if m is None:
        if re.fullmatch(r"[bhsdqv]\d+(\.\w+)?", lower):
            raise _Unsupported(f"floating-point/vector register {op} is not supported")
        raise _Unsupported(f"cannot parse operand {op!r}")
    base_name, second, shift = m.groups()
    if base_name not in _AARCH64_REGS or base_name.startswith("w") and base_name != "wsp":
        raise _Unsupported(f"bad base register in {op!r}")
    base = _AARCH64_REGS[base_name][0]
    if second is None:
        return a.mem(base)
    if second in _AARCH64_REGS:
        if second[0] == "w" or second in ("sp", "wsp"):
            # A w index needs an extend (sxtw/uxtw) we do not decode; sp cannot index.
            raise _Unsupported(f"unsupported index register in {op!r}")
        scale = 1 << int(shift) if shift is not None else 1
        if scale > 8:
            raise _Unsupported(f"bad shift in {op!r}")
        return a.mem(base, _AARCH64_REGS[second][0], scale)
    if shift is not None:
        raise _Unsupported(f"cannot parse operand {op!r}")
    return a.mem(base, disp=_parse_int(second.removeprefix("#")))
