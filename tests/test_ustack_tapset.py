"""stap's user-space context tapset on real processes, m64 and m32, -O0 and -O2:
uaddr, umodname, ustack, ucallers, print_usyms/print_ustack, sprint_usyms/sprint_ustack,
ubacktrace/print_ubacktrace/sprint_ubacktrace through a library with no probe (-d,
--ldd), register/u_register, the *_arg family with regparm/asmlinkage/fastcall, and
is_return (tests/progs/ustack_exe.c and ustack_lib.c).

The program prints its functions' addresses and the return addresses each frame noted,
so every backtrace line is checked to the byte: `addr : func+off/size [path]`, with
the sizes from the ELF symbol tables."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest
from cbuild import BUILDS, PROGS, Build, build_c, run_pydyn
from elftools.elf.elffile import ELFFile

SCRIPT = r"""
probe process(@1).function("probed") {
  printf("uaddr=%x name=%s mod=%s libmod=%s\n", uaddr(), usymname(uaddr()),
         umodname(uaddr()), umodname(ustack(2)))
  printf("args %d %d %d %d %x %d %d %d %d %x %x %x %x %d\n", int_arg(1), uint_arg(1),
         long_arg(3), ulong_arg(3), pointer_arg(4), s32_arg(6), u32_arg(6), int_arg(7),
         long_arg(7), longlong_arg(8), ulonglong_arg(8), s64_arg(8), u64_arg(8), u32_arg(2))
  w = uarch_bytes() == 4
  printf("pc=%d sp=%d flags=%x cs=%x ss=%x orig=%d,%d\n",
         u_register(w ? "eip" : "rip") == uaddr() && u_register("rip") == uaddr(),
         (user_long(register(w ? "esp" : "rsp")) & 0xffffffff) == (ustack(1) & 0xffffffff),
         register("eflags") & 0x202, register("xcs"), register("xss"),
         register("orig_eax"), u_register("orig_eax"))
  printf("is_return=%d ustack=%x callers=%s\n", is_return(), ustack(4), ucallers(4))
  printf("bt=%s\n", ubacktrace())
  printf("usyms\n") print_usyms(ucallers(-1))
  printf("sprint\n%s", sprint_ubacktrace())
  printf("print\n") print_ubacktrace()
  printf("sprint_ustack\n%s", sprint_ustack(ucallers(2)))
  printf("sprint_usyms\n%s", sprint_usyms(ucallers(1)))
  printf("print_ustack\n") print_ustack(ucallers(0))
}
probe process(@1).function("probed").return {
  printf("probed.return %d %x %s\n", is_return(), uaddr(), usymname(uaddr()))
}
probe process(@1).function("cb"), process(@1).function("cb").return {
  printf("cb is_return=%d\n", is_return())
}
probe process(@1).function("in_regs") {
  if (uarch_bytes() == 4) fastcall() else asmlinkage()
  printf("in_regs %d %d %d\n", int_arg(1), int_arg(2), int_arg(3))
}
probe process(@1).function("in_regs") {
  if (uarch_bytes() == 4) regparm(3)
  printf("in_regs2 %d %d %d\n", int_arg(1), int_arg(2), int_arg(3))
}
probe end { print_ubacktrace() printf("%s%d\n", sprint_ubacktrace(), uaddr()) }
"""

X86_64_REGS = r"""
probe process(@1).function("probed") {
  printf("regs %d %d %d %d %d %d %d %d %d %d\n", register("edi"), u_register("edi"),
         register("di"), u_register("di"), register("rdx"), register("edx"),
         u_register("edx"), register("dl"), u_register("dl"), u_register("dh"))
}
"""

ERRORS = r"""
probe process(@1).function("probed") { x = register("nosuch") println(x) }
probe process(@1).function("cb") { println(ucallers(40)) }
probe process(@1).function("cb").return { println(umodname(0)) }
probe process(@1).function("in_regs") { regparm(uarch_bytes() == 4 ? 4 : 7) }
probe process(@1).function("in_regs") { println(ustack(-1)) }
probe end { println(register("rax")) println(int_arg(1)) }
"""


@cache
def _built(tmp: Path, b: Build) -> tuple[Path, Path]:
    lib = build_c(PROGS / "ustack_lib.c", tmp / f"libustk-{b.id}.so", m32=b.m32, opt=b.opt,
                  extra=("-shared", "-fPIC"))
    exe = build_c(PROGS / "ustack_exe.c", tmp / f"ustk-{b.id}", m32=b.m32, opt=b.opt,
                  extra=(f"-L{tmp}", f"-lustk-{b.id}", f"-Wl,-rpath,{tmp}"))
    return exe, lib


@pytest.fixture(scope="module")
def progs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ustk")


def _sizes(path: Path) -> dict[str, int]:
    with open(path, "rb") as f:
        symtab = ELFFile(f).get_section_by_name(".symtab")
        return {s.name: s["st_size"] for s in symtab.iter_symbols()
                if s["st_info"]["type"] == "STT_FUNC"}


def _addrs(stdout: str) -> dict[str, int]:
    """The program's `name=0x..` words: functions, data, return addresses."""
    return {k: int(v, 16) for k, v in re.findall(r"(\w+)=0x([0-9a-f]+)", stdout)
            if not k.startswith(("uaddr", "ustack"))}


def _frames(exe: Path, lib: Path, a: dict[str, int], pc: int) -> list[tuple[int, str, int, Path]]:
    """(address, function, offset, object) of the walk's first five frames."""
    return [(pc, "probed", pc - a["probed"], exe),
            (a["ra_probed"], "cb", a["ra_probed"] - a["cb"], exe),
            (a["ra_cb"], "lib_inner", a["ra_cb"] - a["lib_inner"], lib),
            (a["ra_inner"], "lib_outer", a["ra_inner"] - a["lib_outer"], lib),
            (a["ra_outer"], "main", a["ra_outer"] - a["main"], exe)]


def _section(lines: list[str], title: str) -> list[str]:
    start = lines.index(title) + 1
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith(" 0x")
                and " [" not in lines[i]), len(lines))
    return lines[start:end]


@pytest.mark.parametrize("b", BUILDS, ids=[b.id for b in BUILDS])
def test_tapset_with_ldd(progs: Path, cache: Path, b: Build) -> None:
    exe, lib = _built(progs, b)
    res = run_pydyn(cache, "--ldd", "-e", SCRIPT, str(exe), "-c", str(exe), timeout=240)
    assert res.returncode == 0, res.stderr
    out = res.stdout
    lines = out.splitlines()
    a = _addrs(out)
    pc = int(re.search(r"uaddr=([0-9a-f]+) ", out).group(1), 16)
    sizes, lib_sizes = _sizes(exe), _sizes(lib)
    frames = _frames(exe, lib, a, pc)
    assert frames[0][2] in (0, 4), out   # the entry, after an endbr
    size = {exe: sizes, lib: lib_sizes}

    assert f"uaddr={pc:x} name=probed mod={exe} libmod={lib}" in lines, out
    ulong_c = (1 << 32) - 5 if b.m32 else -5
    assert (f"args -1 {(1 << 32) - 1} -5 {ulong_c} {a['data_word']:x} -7 {(1 << 32) - 7} "
            "8 8 100000002 100000002 100000002 100000002 3") in lines, out
    cs = 0x23 if b.m32 else 0x33
    assert f"pc=1 sp=1 flags=202 cs={cs:x} ss=2b orig=-1,{(1 << 32) - 1}" in lines, out
    callers = " ".join(f"{f[0]:#x}" for f in frames)
    assert f"is_return=0 ustack={frames[4][0]:x} callers={callers}" in lines, out

    full = [f" {f[0]:#x} : {f[1]}+{f[2]:#x}/{size[f[3]][f[1]]:#x} [{f[3]}]" for f in frames]
    simple = [f"{f[1]}+{f[2]:#x} [{f[3].name}]" for f in frames]
    usyms = _section(lines, "usyms")
    printed = _section(lines, "print")
    assert usyms[:5] == full and printed[:5] == full, out
    assert usyms == printed, out
    sprint = _section(lines, "sprint")
    assert sprint[:5] == simple, out
    bt = re.search(r"^bt=(.*)$", out, re.M).group(1).split()
    assert bt[:5] == callers.split() and len(bt) == len(printed), out
    # past main: libc's frames, named from its tables (--ldd); on x86-64 the walk
    # reaches _start
    libc = re.compile(r" 0x[0-9a-f]+ : \w+\+0x[0-9a-f]+/0x[0-9a-f]+ \[/\S+/libc\.so\.6\]")
    for line in printed[5:]:
        assert libc.fullmatch(line) or "_start+" in line, out
    if not b.m32:
        assert printed[-1].endswith(f"/{sizes['_start']:#x} [{exe}]"), out
        assert " : _start+" in printed[-1] and len(printed) >= 7, out
    assert _section(lines, "sprint_ustack") == full[:3], out
    assert _section(lines, "sprint_usyms") == full[:2], out
    assert _section(lines, "print_ustack") == full[:1], out

    # a return probe is where the function returns to, as stap's uretprobes have it
    assert f"probed.return 1 {a['ra_probed']:x} cb" in lines, out
    assert lines.count("cb is_return=0") == 1 and lines.count("cb is_return=1") == 1, out
    assert "in_regs -11 12 -13" in lines, out
    assert "in_regs2 -11 12 -13" in lines, out
    assert lines[-3:] == ["<no user backtrace at end>"] * 2 + ["0"], out


@pytest.mark.parametrize("b", [b for b in BUILDS if not b.m32], ids=lambda b: b.id)
def test_x86_64_register_widths(progs: Path, cache: Path, b: Build) -> None:
    exe, _lib = _built(progs, b)
    res = run_pydyn(cache, "-e", X86_64_REGS, str(exe), "-c", str(exe), timeout=240)
    assert res.returncode == 0, res.stderr
    # edi = -1 (int a), rdx = -5 (long c)
    assert (f"regs -1 {(1 << 32) - 1} -1 65535 -5 -5 {(1 << 32) - 5} -5 251 255"
            in res.stdout.splitlines()), res.stdout


@pytest.mark.parametrize("b", [BUILDS[1], BUILDS[3]], ids=lambda b: b.id)
def test_frames_in_a_library_without_tables(progs: Path, cache: Path, b: Build) -> None:
    """Without -d or --ldd the library has no tables: its frame is its module and
    offset (stap's form), and the walk ends there; -d adds it (and not libc)."""
    exe, lib = _built(progs, b)
    script = 'probe process(@1).function("probed") { print_ubacktrace() }'
    res = run_pydyn(cache, "-e", script, str(exe), "-c", str(exe), timeout=240)
    assert res.returncode == 0, res.stderr
    out = res.stdout
    a = _addrs(out)
    frames = _frames(exe, lib, a, a["probed"])
    printed = [ln for ln in out.splitlines() if ln.startswith(" 0x")]
    sizes = _sizes(exe)
    assert printed[:2] == [f" {f[0]:#x} : {f[1]}+{f[2]:#x}/{sizes[f[1]]:#x} [{f[3]}]"
                           for f in frames[:2]], out
    m = re.fullmatch(rf" {frames[2][0]:#x} \[{re.escape(str(lib))}\+0x([0-9a-f]+)/0x"
                     r"([0-9a-f]+)\]", printed[2])
    assert m and len(printed) == 3, out
    # the offset in the segment that maps it, from its page-aligned start
    with open(lib, "rb") as f:
        elf = ELFFile(f)
        inner = next(s for s in elf.get_section_by_name(".symtab").iter_symbols()
                     if s.name == "lib_inner")["st_value"]
        seg = next(s for s in elf.iter_segments() if s["p_type"] == "PT_LOAD"
                   and s["p_vaddr"] <= inner < s["p_vaddr"] + s["p_memsz"])
    bias = a["lib_inner"] - inner
    lo = (bias + seg["p_vaddr"]) & ~0xfff
    hi = (bias + seg["p_vaddr"] + seg["p_memsz"] + 0xfff) & ~0xfff
    assert (int(m.group(1), 16), int(m.group(2), 16)) == (frames[2][0] - lo, hi - lo), out

    res = run_pydyn(cache, "-d", str(lib), "-e", script, str(exe), "-c", str(exe),
                    timeout=240)
    assert res.returncode == 0, res.stderr
    a = _addrs(res.stdout)
    frames = _frames(exe, lib, a, a["probed"])
    printed = [ln for ln in res.stdout.splitlines() if ln.startswith(" 0x")]
    size = {exe: sizes, lib: _sizes(lib)}
    assert printed[:5] == [f" {f[0]:#x} : {f[1]}+{f[2]:#x}/{size[f[3]][f[1]]:#x} [{f[3]}]"
                           for f in frames], res.stdout
    # then libc, with no tables: its module, and the walk ends (i386 main realigns its
    # stack with a CFA expression, where the walk ends before libc)
    assert len(printed) == (5 if b.m32 else 6), printed
    assert all(re.fullmatch(r" 0x[0-9a-f]+ \[/\S+/libc\.so\.6\+0x[0-9a-f]+/0x[0-9a-f]+\]",
                            ln) for ln in printed[5:]), printed


@pytest.mark.parametrize("b", [BUILDS[1], BUILDS[3]], ids=lambda b: b.id)
def test_errors_are_stap_s(progs: Path, cache: Path, b: Build) -> None:
    exe, _lib = _built(progs, b)
    res = run_pydyn(cache, "--suppress-handler-errors", "-e", ERRORS, str(exe),
                    "-c", str(exe), timeout=240)
    err = res.stderr
    regparm = ("For -m32 programs, regparm value must be in the range 0-3." if b.m32
               else "For x86_64, regparm value must be in the range 0-6.")
    for msg in ("Unknown register: nosuch", "reached end of stack before unwinding to level 40",
                "module cannot be found", regparm,
                "reached end of stack before unwinding to level -1",
                "cannot access CPU registers in this context"):
        assert f"ERROR: {msg} near" in err, err


def test_d_names_a_missing_file(progs: Path, cache: Path) -> None:
    """As stap, which takes any -d path (its transok/eleven runs -d of a missing one)."""
    exe, _lib = _built(progs, BUILDS[1])
    res = run_pydyn(cache, "-d", "/nonexistent/libx.so", "-p4", "-e",
                    'probe process(@1).function("probed") { print_ubacktrace() }', str(exe),
                    timeout=120)
    assert res.returncode == 0, res.stderr
    assert "pydyn: warning: -d /nonexistent/libx.so: no such file (named by -d): its symbols are " \
        "unknown" in res.stderr, res.stderr
