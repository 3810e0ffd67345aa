"""SDT argument forms on real processes, m64 and m32: the operands a program's own
assembly writes in its notes (STAP_PROBE_ASM templates: a register narrower than the
argument, `8@%ah` and the size-less `%ax`; index*scale memory, a flat segment, GOT-relative
globals; immediates such as `-4@$-1`), the compiler's forms for sdt.h's C macros at -O0,
-O2 and as C++ at -O3 (12 arguments), the version-2 `.probes` section, optional probe
points that match nothing, and a program named by a bare name found in the current
directory.  Each value is checked exactly."""

from __future__ import annotations

from pathlib import Path

import pytest
from cbuild import BUILDS, Build, build_c, have_cxx, have_sdt_h, run_pydyn, run_pydyn_clean

from pydyn.launcher.elf.argspec import ArgKind, parse_sdt_args

pytestmark = pytest.mark.skipif(not have_sdt_h(), reason="no <sys/sdt.h> (systemtap-sdt-dev)")

# The asm statements set the registers they name through their own operands: %eax is
# 0x1020f081 and %esi 0x14243444; `base` is garr and `idx` 1.
FORMS_C = r"""
#include <sys/sdt.h>

int garr[8] = {10, 11, 12, 13, 14, 15, 16, 17};

static void __attribute__((noinline)) asm_forms(int *base, long idx)
{
#ifndef __cplusplus   /* STAP_PROBE_ASM is C99 only */
    __asm__ __volatile__ (
#if defined __x86_64__
        STAP_PROBE_ASM(forms, narrow, 8@%%ah 8@%%al 8@%%ax 8@%%eax -8@%%ax -8@%%eax %%ah %%ax)
#else
        STAP_PROBE_ASM(forms, narrow, 4@%%ah 4@%%al 4@%%ax -4@%%ax -4@%%al %%ah %%ax %%sil)
#endif
        :: "a" (0x1020f081), "S" (0x14243444));
    __asm__ __volatile__ (
        STAP_PROBE_ASM(forms, scaled, -4@8(%[B],%[I],4) -4@(%[B],%[I],4)
                       -4@-4(%[E],%[I],8) -4@%%ds:12(%[B]))
        :: [B] "r" (base), [I] "r" (idx), [E] "r" (base + 4));
    __asm__ __volatile__ (
        STAP_PROBE_ASM(forms, imm, -4@$-1 4@$-1 8@$-1 -2@$-32768 1@$255 -1@$255
                       -4@$0x7fffffff 2@$42));
    __asm__ __volatile__ (
        STAP_PROBE_ASM(forms, mem, -4@%[G] -4@%[H] -4@%[A])
        :: [G] "m" (garr[3]), [H] "m" (garr[7]), [A] "m" (base[idx]));
#endif
    (void)base;
    (void)idx;
}

int main(int argc, char **argv)
{
    int v = argc + 41;                 /* 42, known only at run time */
    asm_forms(garr, argc);
    STAP_PROBE3(forms, consts, 7, -1, 0x7fffffff);
    STAP_PROBE12(forms, twelve, v, v + 1, v + 2, v + 3, v + 4, v + 5, v + 6, v + 7, v + 8,
                 v + 9, v + 10, v + 11);
    STAP_PROBE12(forms, twelve_const, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12);
    STAP_PROBE3(forms, types, (signed char)-v, (unsigned char)(200 + argc), (short)-v);
    (void)argv;
    return 0;
}
"""

# mark -> (number of arguments, the values printed with %d)
C_MARKS = {
    "consts": (3, "7 -1 2147483647"),
    "twelve": (12, " ".join(str(n) for n in range(42, 54))),
    "twelve_const": (12, " ".join(str(n) for n in range(1, 13))),
    "types": (3, "-42 201 -42"),
}
# ah 0xf0, al 0x81, ax 0xf081 (-3967 signed), eax 0x1020f081, sil 0x44
ASM_MARKS = {
    "m64": {"narrow": (8, "240 129 61569 270594177 -3967 270594177 240 61569")},
    "m32": {"narrow": (8, "240 129 61569 -3967 -127 240 61569 68")},
}
ASM_COMMON = {
    "scaled": (4, "13 11 15 13"),      # garr[3], garr[1], garr[5], garr[3]
    "imm": (8, "-1 4294967295 -1 -32768 255 -1 2147483647 42"),
    "mem": (3, "13 17 11"),             # garr[3], garr[7], garr[idx]
}


def _script(exe: Path, marks: dict[str, tuple[int, str]], optional: str = "") -> str:
    probes = []
    for name, (n, _values) in marks.items():
        args = ", ".join(f"$arg{i}" for i in range(1, n + 1))
        probes.append(f'probe process("{exe}").mark("{name}") {optional}'
                      f'{{ printf("{name} {" ".join(["%d"] * n)}\\n", {args}) }}')
    return "\n".join(probes)


def _expect(marks: dict[str, tuple[int, str]]) -> list[str]:
    return [f"{name} {values}" for name, (_n, values) in marks.items()]


def _run_marks(cache: Path, exe: Path, marks: dict[str, tuple[int, str]],
               absent: dict[str, tuple[int, str]] | None = None) -> None:
    """Each mark's values; the `absent` marks' probes are optional (`?`) and print nothing."""
    script = _script(exe, marks) + "\n" + _script(exe, absent or {}, optional="? ")
    res = run_pydyn_clean(cache, "-e", script, "-c", str(exe), timeout=240)
    assert sorted(res.stdout.splitlines()) == sorted(_expect(marks)), res.stdout


@pytest.mark.parametrize("b", BUILDS, ids=[b.id for b in BUILDS])
def test_operand_forms(tmp_path: Path, b: Build, cache: Path) -> None:
    (tmp_path / "forms.c").write_text(FORMS_C)
    exe = build_c(tmp_path / "forms.c", tmp_path / "forms", m32=b.m32, opt=b.opt,
                  extra=("-std=gnu99",))
    abi = "m32" if b.m32 else "m64"
    _run_marks(cache, exe, {**C_MARKS, **ASM_MARKS[abi], **ASM_COMMON})


@pytest.mark.parametrize("m32", [False, True], ids=["m64", "m32"])
def test_cxx_o3_marks(tmp_path: Path, m32: bool, cache: Path) -> None:
    if not have_cxx(m32):
        pytest.skip("no C++ toolchain for this ABI (g++-multilib)")
    (tmp_path / "forms.cc").write_text(FORMS_C)
    exe = build_c(tmp_path / "forms.cc", tmp_path / "forms", m32=m32, opt="-O3",
                  extra=("-lstdc++",))
    # the asm marks are C only: the same script runs, their optional probes dropped
    _run_marks(cache, exe, C_MARKS, absent={**ASM_MARKS["m32" if m32 else "m64"], **ASM_COMMON})


@pytest.mark.unit
def test_narrow_register_descriptors() -> None:
    """What the forms above decode to: the register's own bits, extended by the sign."""
    ah, ax, neg_al, legacy, pair = parse_sdt_args("8@%ah -8@%ax -4@%al %ax 8@%eax", "x86_64")
    assert (ah.kind, ah.reg, ah.reg_shift, ah.size, ah.signed) == (ArgKind.REG, 0, 8, 1, False)
    assert str(ah) == "8@%ah [unsigned 1-byte register rax bits 8-15, zero-extended to 8 bytes]"
    assert (ax.size, ax.signed, ax.note_size) == (2, True, 8)
    assert (neg_al.size, neg_al.signed, neg_al.note_size) == (1, True, 4)
    assert (legacy.size, legacy.signed, legacy.note_size) == (2, False, 8)
    assert pair.kind is ArgKind.REG and pair.size == 4
    # stap splits at every blank: sized and size-less operands mix in either order
    assert [(a.size, a.signed, a.note_size) for a in
            parse_sdt_args("%ah -2@%ax %al", "x86_64")] == [(1, False, 8), (2, True, 0),
                                                            (1, False, 8)]
    (i386_pair, sil) = parse_sdt_args("-8@%eax %sil", "i386")
    # the low half of an i386 register pair: the high half is not recorded
    assert i386_pair.kind is ArgKind.UNSUPPORTED, i386_pair
    assert (sil.kind, sil.reg, sil.size, sil.note_size) == (ArgKind.REG, 6, 1, 4)


# A probe laid out as sdt.h's version 2 puts it in a `.probes` section, written out here:
# the UPB2 magic, then 8-byte slots holding the addresses of the name, the provider, the
# argument count, the argument string (the asm operands, without sizes), the pc and, when
# the program has semaphores, the semaphore; then the strings, the name last.
V2_C = r"""
#include <stddef.h>
#if defined __x86_64__
#define SLOT ".balign 8\n.quad "
#else
#define SLOT ".balign 8\n.long "
#endif
#define V2_HEAD(name) ".pushsection .probes,\"aw\"\n.balign 8\n.int 0x32425055\n" \
    SLOT "3f\n" SLOT "2f\n"
#define V2_TAIL(name, fmt) ".balign 8\n1: .asciz \"" fmt "\"\n" \
    ".balign 8\n2: .asciz \"v2\"\n.balign 8\n3: .asciz \"" name "\"\n.popsection\n4: nop\n"

unsigned short v2_gated_semaphore;

int main(int argc, char **argv)
{
    size_t a = (size_t)argc + 41, b = (size_t)-5;
    __asm__ __volatile__ (V2_HEAD("two") SLOT "2\n" SLOT "1f\n" SLOT "4f\n"
                          V2_TAIL("two", "%0 %1") :: "r" (a), "g" (b));
    __asm__ __volatile__ (V2_HEAD("none") SLOT "0\n" SLOT "1f\n" SLOT "4f\n"
                          V2_TAIL("none", "") :: "i" (0));
    if (v2_gated_semaphore)   /* set only while a tracer has the probe armed */
        __asm__ __volatile__ (V2_HEAD("gated") SLOT "1\n" SLOT "1f\n" SLOT "4f\n"
                              SLOT "v2_gated_semaphore\n" V2_TAIL("gated", "%0")
                              :: "r" (a + 1));
    (void)argv;
    return 0;
}
"""


@pytest.mark.parametrize("m32", [False, True], ids=["m64", "m32"])
def test_probes_section_v2(tmp_path: Path, m32: bool, cache: Path) -> None:
    (tmp_path / "v2.c").write_text(V2_C)
    exe = build_c(tmp_path / "v2.c", tmp_path / "v2", m32=m32, opt="-O2")
    script = (f'probe process("{exe}").mark("two") {{ printf("two %d %d\\n", $arg1, $arg2) }}'
              f' probe process("{exe}").provider("v2").mark("none") {{ println($$name) }}'
              f' probe process("{exe}").mark("gated") {{ printf("gated %d\\n", $arg1) }}')
    res = run_pydyn_clean(cache, "-e", script, "-c", str(exe), timeout=240)
    # v2 arguments are native unsigned words: -5 as a size_t
    minus5 = (1 << (32 if m32 else 64)) - 5
    want = ["two 42 " + str(minus5 if m32 else -5), "none", "gated 43"]
    assert res.stdout.splitlines() == want, res.stdout


@pytest.mark.parametrize("m32", [False, True], ids=["m64", "m32"])
def test_optional_point_matching_nothing_is_dropped(tmp_path: Path, m32: bool,
                                                    cache: Path) -> None:
    (tmp_path / "forms.c").write_text(FORMS_C)
    exe = build_c(tmp_path / "forms.c", tmp_path / "forms", m32=m32, extra=("-std=gnu99",))
    # the dropped probe's body names $arg1 and $$name, which only a mark has: stap drops
    # the probe before its body is checked
    script = (f'probe process("{exe}").mark("nosuch") ? {{ printf("%s %d\\n", $$name, $arg1) }}\n'
              f'probe process("{exe}").mark("nosuch") ?, process("{exe}").mark("consts") ? '
              '{ printf("%s %d\\n", $$name, $arg3) }\n'
              'probe begin { println("begin") }')
    res = run_pydyn_clean(cache, "-e", script, "-c", str(exe), timeout=240)
    assert res.stdout.splitlines() == ["begin", "consts 2147483647"], res.stdout
    res = run_pydyn(cache, "-v", "-p2", "-e", script)
    assert res.returncode == 0, res.stderr
    assert "<input>:1: probe dropped, its optional probe points match nothing" in res.stderr
    # without `?` the same point is an error
    res = run_pydyn(cache, "-p2", "-e", f'probe process("{exe}").mark("nosuch") {{ }}')
    assert res.returncode == 1 and "matches no mark" in res.stderr, res.stderr


def test_bare_program_name_from_current_directory(tmp_path: Path, cache: Path) -> None:
    """process("NAME") and -c NAME with no NAME on PATH: the file in the current directory,
    as stap (find_executable) and stapdyn do."""
    (tmp_path / "forms.c").write_text(FORMS_C)
    build_c(tmp_path / "forms.c", tmp_path / "forms.x", extra=("-std=gnu99",))
    script = 'probe process("forms.x").mark("consts") { printf("%d\\n", $arg3) }'
    res = run_pydyn_clean(cache, "-e", script, "-c", "forms.x", cwd=tmp_path, timeout=240)
    assert res.stdout == "2147483647\n"
