"""parse_sdt_args on literal argument strings: every operand form, and what it rejects."""

from __future__ import annotations

import pytest

from pydyn.launcher.elf.argspec import ArgKind, ArgSpec, parse_sdt_args, split_sdt_args
from pydyn.launcher.elf.symbols import Symbol, SymbolTable

pytestmark = pytest.mark.unit   # no compiler, no target process: `make check`

GOT = 0x3FF4
TLS = (0x3EF8, 0x14, 8)          # PT_TLS vaddr, memsz, align -> block of 0x18 bytes


def sym(name: str, value: int, type_: str = "OBJECT", bind: str = "GLOBAL",
        section: str = ".data") -> Symbol:
    return Symbol(name, value, 4, type_, bind, section)


SYMS = SymbolTable.from_symbols([
    sym("g", 0x4010), sym("arr", 0x4020), sym("x.0", 0x4040, bind="LOCAL"),
    sym("tv", 0x4, "TLS", section=".tbss"), sym("_GLOBAL_OFFSET_TABLE_", GOT, bind="LOCAL"),
    sym("dup", 0x5000, bind="LOCAL"), sym("dup", 0x5008, bind="LOCAL"),
    sym("same", 0x6000), sym("same", 0x6000, bind="GLOBAL", section=".data"),
    sym("absval", 0x1234, section="ABS"),
])


def one(text: str, machine: str = "x86_64") -> ArgSpec:
    specs = parse_sdt_args(text, machine, SYMS, TLS)
    assert len(specs) == 1, specs
    return specs[0]


# --- splitting -------------------------------------------------------------------------

def test_split_keeps_at_signs_and_bracket_spaces() -> None:
    text = "-4@%edi 8@x@GOTOFF(%ebx) 8@[x0, 152] -4@%gs:tv@ntpoff 4f@-8(%rbp)"
    assert [a for *_, a in split_sdt_args(text)] == [
        "-4@%edi", "8@x@GOTOFF(%ebx)", "8@[x0, 152]", "-4@%gs:tv@ntpoff", "4f@-8(%rbp)"]


def test_split_sizes_and_flags() -> None:
    got = [(size, signed, is_float, op) for size, signed, is_float, op, _ in
           split_sdt_args("1@%al -2@%ax 8f@%rcx -8@$-1 16@(%rax)")]
    assert got == [(1, False, False, "%al"), (2, True, False, "%ax"), (8, False, True, "%rcx"),
                   (8, True, False, "$-1"), (16, False, False, "(%rax)")]


def test_empty_and_blank() -> None:
    assert parse_sdt_args("", "x86_64") == ()
    assert parse_sdt_args("   ", "i386") == ()


def test_legacy_operands_without_size_are_native_unsigned() -> None:
    a, b = parse_sdt_args("%eax 8(%ebp)", "i386")
    assert (a.kind, a.reg, a.size, a.signed) == (ArgKind.REG, 0, 4, False)
    assert (b.kind, b.base, b.disp, b.size) == (ArgKind.MEM, 5, 8, 4)
    (c,) = parse_sdt_args("%rdi", "x86_64")
    assert (c.reg, c.size, c.signed) == (5, 8, False)


# --- constants ---------------------------------------------------------------------------

@pytest.mark.parametrize("text,value", [
    ("1@$-127", 129), ("-1@$-127", -127), ("-1@$129", -127), ("2@$-1", 0xFFFF),
    ("-2@$-32767", -32767), ("2@$32769", 32769), ("-4@$-1", -1), ("4@$-1", 0xFFFFFFFF),
    ("8@$-1", (1 << 64) - 1), ("-8@$-9223372036854775808", -(1 << 63)), ("4@$42", 42),
    ("4@$0x10", 16), ("-4@$-0x10", -16), ("8@$0xffffffffffffffff", (1 << 64) - 1),
    ("-8@$0", 0),
])
def test_constants(text: str, value: int) -> None:
    a = one(text)
    assert a.kind is ArgKind.CONST and a.value == value and a.supported
    assert a.size == int(text.split("@")[0].lstrip("-"))


def test_constant_i386_and_aarch64() -> None:
    assert one("-4@$-5", "i386").value == -5
    assert one("-4@5", "aarch64").value == 5
    assert one("-4@-5", "aarch64").value == -5
    assert one("1@#255", "aarch64").value == 255
    assert one("8@xzr", "aarch64").value == 0


def test_symbol_immediate_is_an_address_constant() -> None:
    a = one("8@$g+8")
    assert (a.kind, a.value, a.disp_is_vaddr) == (ArgKind.CONST, 0x4018, True)


# --- registers ---------------------------------------------------------------------------

# (DWARF number, [(register, width)...]) from the System V psABI register tables.
X86_64_REGS = {
    0: ["rax", "eax", "ax", "al"], 1: ["rdx", "edx", "dx", "dl"], 2: ["rcx", "ecx", "cx", "cl"],
    3: ["rbx", "ebx", "bx", "bl"], 4: ["rsi", "esi", "si", "sil"], 5: ["rdi", "edi", "di", "dil"],
    6: ["rbp", "ebp", "bp", "bpl"], 7: ["rsp", "esp", "sp", "spl"],
    **{n: [f"r{n}", f"r{n}d", f"r{n}w", f"r{n}b"] for n in range(8, 16)},
}
I386_REGS = {0: ["eax", "ax", "al"], 1: ["ecx", "cx", "cl"], 2: ["edx", "dx", "dl"],
             3: ["ebx", "bx", "bl"], 4: ["esp", "sp"], 5: ["ebp", "bp"], 6: ["esi", "si"],
             7: ["edi", "di"]}


@pytest.mark.parametrize("machine,table", [("x86_64", X86_64_REGS), ("i386", I386_REGS)])
def test_register_dwarf_numbers(machine: str, table: dict[int, list[str]]) -> None:
    for num, names in table.items():
        # Listed widest first, halving: 8 (x86-64) or 4 (i386) bytes down to 1.
        widest = 8 if machine == "x86_64" else 4
        for i, name in enumerate(names):
            size = widest >> i
            a = one(f"-{size}@%{name}", machine)
            assert (a.kind, a.reg, a.reg_shift, a.size, a.signed) == \
                (ArgKind.REG, num, 0, size, True), name
    pc, pc_num = ("rip", 16) if machine == "x86_64" else ("eip", 8)
    assert one(f"{widest}@%{pc}", machine).reg == pc_num


@pytest.mark.parametrize("machine", ["x86_64", "i386"])
def test_high_byte_registers_shift_8(machine: str) -> None:
    want = {"ah": 0, "dh": 1 if machine == "x86_64" else 2, "ch": 2 if machine == "x86_64" else 1,
            "bh": 3}
    for name, num in want.items():
        a = one(f"1@%{name}", machine)
        assert (a.kind, a.reg, a.reg_shift) == (ArgKind.REG, num, 8)
    assert "bits 8-15" in str(one("1@%ah", machine))


def test_narrow_value_in_wide_register() -> None:
    a = one("-1@%ebx", "i386")
    assert (a.kind, a.reg, a.size) == (ArgKind.REG, 3, 1)


def test_register_too_narrow_for_size_is_unsupported() -> None:
    a = one("-8@%eax", "i386")
    assert a.kind is ArgKind.UNSUPPORTED and "8-byte argument in 4-byte register" in a.error
    assert one("8f@%eax").kind is ArgKind.UNSUPPORTED


def test_float_in_integer_register() -> None:
    a = one("8f@%rcx")
    assert (a.kind, a.reg, a.is_float, a.size) == (ArgKind.REG, 2, True, 8)
    assert "8-byte float" in str(a)


# --- memory ------------------------------------------------------------------------------

@pytest.mark.parametrize("text,machine,base,index,scale,disp", [
    ("-4@8(%ebp)", "i386", 5, -1, 1, 8),
    ("-4@-20(%rbp)", "x86_64", 6, -1, 1, -20),
    ("8@(%rax)", "x86_64", 0, -1, 1, 0),
    ("-4@(%rdx,%rdi,4)", "x86_64", 1, 5, 4, 0),
    ("-4@12(%edx,%eax)", "i386", 2, 0, 1, 12),
    ("4@-0x10(%r12,%r13,8)", "x86_64", 12, 13, 8, -16),
    ("4@(,%rax,2)", "x86_64", -1, 0, 2, 0),
    ("4@16(%rsp)", "x86_64", 7, -1, 1, 16),
    ("4@4(%esp)", "i386", 4, -1, 1, 4),
    ("4@8(%rax,%riz,1)", "x86_64", 0, -1, 1, 8),
    ("4@1234", "x86_64", -1, -1, 1, 1234),
])
def test_memory_forms(text: str, machine: str, base: int, index: int, scale: int,
                      disp: int) -> None:
    a = one(text, machine)
    assert (a.kind, a.base, a.index, a.scale, a.disp, a.disp_is_vaddr, a.segment) == \
        (ArgKind.MEM, base, index, scale, disp, False, None)


def test_str_is_readable() -> None:
    assert str(one("-4@8(%ebp)", "i386")) == "-4@8(%ebp) [signed 4-byte memory at ebp+8]"
    assert str(one("1@$-127")) == "1@$-127 [unsigned 1-byte constant 129]"
    assert str(one("-4@%edi")) == "-4@%edi [signed 4-byte register rdi]"
    assert "unsupported: unknown register %foo" in str(one("4@%foo"))


@pytest.mark.parametrize("text,disp", [
    ("-4@g(%rip)", 0x4010), ("-4@g+4(%rip)", 0x4014), ("-4@4+g(%rip)", 0x4014),
    ("-4@12+arr(%rip)", 0x402C), ("-4@arr-4(%rip)", 0x401C), ("4@x.0(%rip)", 0x4040),
])
def test_rip_relative_symbols(text: str, disp: int) -> None:
    a = one(text)
    assert (a.kind, a.base, a.index, a.disp, a.disp_is_vaddr) == (ArgKind.MEM, -1, -1, disp, True)
    assert "load bias" in str(a)


def test_absolute_symbol_forms() -> None:
    a = one("-4@g", "i386")
    assert (a.kind, a.base, a.disp, a.disp_is_vaddr) == (ArgKind.MEM, -1, 0x4010, True)
    b = one("-4@arr+12", "i386")
    assert (b.disp, b.disp_is_vaddr) == (0x402C, True)
    c = one("-4@arr(,%eax,4)", "i386")
    assert (c.base, c.index, c.scale, c.disp, c.disp_is_vaddr) == (-1, 0, 4, 0x4020, True)
    d = one("4@absval")
    assert (d.disp, d.disp_is_vaddr) == (0x1234, False)


@pytest.mark.parametrize("text,base,index,disp", [
    ("-4@g@GOTOFF(%ebx)", 3, -1, 0x4010 - GOT),
    ("-4@4+g@GOTOFF(%eax)", 0, -1, 0x4014 - GOT),
    ("-4@12+arr@GOTOFF(%edi)", 7, -1, 0x402C - GOT),
    ("-4@arr@GOTOFF(%edx,%ecx,4)", 2, 1, 0x4020 - GOT),
])
def test_gotoff(text: str, base: int, index: int, disp: int) -> None:
    a = one(text, "i386")
    assert (a.kind, a.base, a.index, a.disp, a.disp_is_vaddr) == \
        (ArgKind.MEM, base, index, disp, False)


def test_got_address_falls_back_to_got_plt() -> None:
    table = SymbolTable.from_symbols([sym("g", 0x4010)], got_address=0x4000)
    (a,) = parse_sdt_args("-4@g@GOTOFF(%ebx)", "i386", table)
    assert a.disp == 0x10


def test_tls_forms() -> None:
    block = 0x18                                  # round_up(0x14, 8)
    a = one("-4@%fs:tv@tpoff")
    assert (a.kind, a.segment, a.base, a.disp, a.disp_is_vaddr) == \
        (ArgKind.MEM, "fs", -1, 4 - block, False)
    b = one("-4@%gs:tv@ntpoff", "i386")
    assert (b.segment, b.base, b.disp) == ("gs", -1, 4 - block)
    c = one("-4@%fs:4+tv@tpoff")
    assert c.disp == 8 - block


def test_segment_constant_and_register() -> None:
    a = one("8@%fs:0x28")
    assert (a.kind, a.segment, a.base, a.disp) == (ArgKind.MEM, "fs", -1, 0x28)
    b = one("-4@%gs:40", "i386")
    assert (b.segment, b.disp) == ("gs", 40)
    c = one("-4@%fs:(%rax)")
    assert (c.segment, c.base, c.disp) == ("fs", 0, 0)
    d = one("4@%ds:8(%eax)", "i386")
    assert (d.segment, d.base, d.disp) == (None, 0, 8)


# --- aarch64 -----------------------------------------------------------------------------

@pytest.mark.parametrize("text,kind,reg,base,index,scale,disp", [
    ("8@x0", ArgKind.REG, 0, -1, -1, 1, 0),
    ("-4@w1", ArgKind.REG, 1, -1, -1, 1, 0),
    ("8@x30", ArgKind.REG, 30, -1, -1, 1, 0),
    ("8@sp", ArgKind.REG, 31, -1, -1, 1, 0),
    ("-4@[sp]", ArgKind.MEM, -1, 31, -1, 1, 0),
    ("8@[x0, 152]", ArgKind.MEM, -1, 0, -1, 1, 152),
    ("8@[x29, -8]", ArgKind.MEM, -1, 29, -1, 1, -8),
    ("8@[x29, #16]", ArgKind.MEM, -1, 29, -1, 1, 16),
    ("4@[x1, x2]", ArgKind.MEM, -1, 1, 2, 1, 0),
    ("4@[x1, x2, lsl #2]", ArgKind.MEM, -1, 1, 2, 4, 0),
])
def test_aarch64_forms(text: str, kind: ArgKind, reg: int, base: int, index: int, scale: int,
                       disp: int) -> None:
    a = one(text, "aarch64")
    assert (a.kind, a.reg, a.base, a.index, a.scale, a.disp) == \
        (kind, reg, base, index, scale, disp)


def test_aarch64_several_args() -> None:
    specs = parse_sdt_args("-4@w0 8@[x0, 152] 8@x1 -4@5", "aarch64")
    assert [s.kind for s in specs] == [ArgKind.REG, ArgKind.MEM, ArgKind.REG, ArgKind.CONST]
    assert specs[1].disp == 152


# --- rejected forms ----------------------------------------------------------------------

@pytest.mark.parametrize("text,machine,error", [
    ("4@%foo", "x86_64", "unknown register %foo"),
    ("4@%r8", "i386", "unknown register %r8"),
    ("8@%xmm0", "x86_64", "floating-point/vector register %xmm0"),
    ("4@missing(%rip)", "x86_64", "symbol missing not found"),
    ("4@dup(%rip)", "x86_64", "symbol dup is ambiguous"),
    ("4@8(%rip)", "x86_64", "rip-relative operand without a symbol"),
    ("4@g@GOT(%ebx)", "i386", "relocation @GOT"),
    ("4@g@GOTPCREL(%rip)", "x86_64", "relocation @GOTPCREL"),
    ("-4@%fs:tv@ntpoff", "x86_64", "relocation @ntpoff"),
    ("-4@tv@tpoff", "x86_64", "outside %fs"),
    ("-4@%fs:g@tpoff", "x86_64", "not a thread-local symbol"),
    ("-4@tv(%rip)", "x86_64", "thread-local symbol tv used without @tpoff"),
    ("-4@g@GOTOFF", "i386", "needs a GOT base register"),
    ("16@(%rax)", "x86_64", "unsupported argument size 16"),
    ("3@%eax", "x86_64", "unsupported argument size 3"),
    ("2f@%ax", "x86_64", "2-byte floating-point"),
    ("4@(%rax,%rbx,3)", "x86_64", "bad scale 3"),
    ("4@%es:(%eax", "i386", "cannot parse"),
    ("4@$g@GOTOFF", "i386", "immediate with relocation"),
    ("4@g+arr(%rip)", "x86_64", "more than one symbol"),
    ("4@-g(%rip)", "x86_64", "negated symbol"),
    ("4@%fs:(%rax", "x86_64", "cannot parse"),
    ("4@%fq:8", "x86_64", "unknown segment register %fq"),
    ("4@8(%eax)", "x86_64", "32-bit address register %eax"),
    ("4@(%rax,%ecx,2)", "x86_64", "32-bit address register %ecx"),
    ("4@(%bx)", "i386", "16-bit address register %bx"),
    ("4@8(%rax)", "i386", "unknown register %rax"),
    ("8@$99999999999999999999", "x86_64", "does not fit in 64 bits"),
    ("4@[w0, 8]", "aarch64", "bad base register"),
    ("4@[x0, w1]", "aarch64", "unsupported index register"),
    ("8@d0", "aarch64", "floating-point/vector register d0"),
    ("8@:lo12:g", "aarch64", "cannot parse operand"),
    ("4@%eax", "riscv", "machine riscv"),
])
def test_unsupported_forms(text: str, machine: str, error: str) -> None:
    a = one(text, machine)
    assert a.kind is ArgKind.UNSUPPORTED and not a.supported
    assert error in a.error, a.error
    assert a.text == text


def test_tpoff_needs_executable_tls() -> None:
    (a,) = parse_sdt_args("-4@%fs:tv@tpoff", "x86_64", SYMS, None)
    assert a.kind is ArgKind.UNSUPPORTED and "PT_TLS" in a.error


def test_symbolic_forms_without_symbol_table() -> None:
    (a,) = parse_sdt_args("-4@g(%rip)", "x86_64")
    assert a.kind is ArgKind.UNSUPPORTED and "without a symbol table" in a.error


def test_identical_duplicate_symbols_are_not_ambiguous() -> None:
    assert one("4@same(%rip)").disp == 0x6000


def test_unsupported_arg_does_not_shift_the_others() -> None:
    specs = parse_sdt_args("-4@%edi 4@%foo 8@%rsi", "x86_64")
    assert [s.kind for s in specs] == [ArgKind.REG, ArgKind.UNSUPPORTED, ArgKind.REG]
    assert specs[2].reg == 4
