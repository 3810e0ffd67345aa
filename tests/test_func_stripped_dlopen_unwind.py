"""Function probes, part 2: stripped binaries (`.dynsym` + `.eh_frame`),
libraries loaded with dlopen and unloaded with dlclose, C++ exceptions and
backtraces through frames whose return address is hooked.

Every count is exact and every program's output is compared with its unprobed
run, on m64 and m32, under trampolines (default) and traps where it matters.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from cbuild import PROGS, build_c, have_cxx, run_pydyn
from elftools.dwarf.callframe import FDE

from pydyn.launcher.elf.ehframe import fde_ranges
from pydyn.launcher.elf.functions import get_functions
from pydyn.launcher.elf.reader import open_elf

TIMEOUT = 120
ABIS = [False, True]
ABI_IDS = ["m64", "m32"]


def bare(cmd: list[str]) -> str:
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT)
    assert res.returncode == 0, res.stderr
    return res.stdout


def skipped(stderr: str) -> int:
    m = re.search(r"skipped probes: (\d+)", stderr)
    return int(m.group(1)) if m else 0


# ---- stripped binaries ---------------------------------------------------------

def strip(path: Path) -> Path:
    if shutil.which("strip") is None:
        pytest.skip("no strip (binutils)")
    subprocess.run(["strip", str(path)], check=True)
    return path


@pytest.mark.parametrize("m32", ABIS, ids=ABI_IDS)
def test_ehframe_ranges_match_pyelftools(tmp_path: Path, m32: bool) -> None:
    exe = strip(build_c(PROGS / "func_rec.c", tmp_path / "rec", m32=m32, opt="-O2"))
    with open_elf(str(exe)) as h:
        mine = fde_ranges(h)
        ref = sorted({(e.header["initial_location"], e.header["address_range"])
                      for e in h.elffile.get_dwarf_info().EH_CFI_entries()
                      if isinstance(e, FDE) and e.header["address_range"] > 0})
    assert mine == ref and len(mine) >= 7


@pytest.mark.parametrize("m32", ABIS, ids=ABI_IDS)
def test_stripped_binary_dynamic_symbols(tmp_path: Path, cache: Path, m32: bool) -> None:
    """A stripped -rdynamic program: `function("*")` is every exported function."""
    exe = strip(build_c(PROGS / "func_rec.c", tmp_path / "rec", m32=m32, opt="-O2",
                        extra=("-rdynamic",)))
    table = get_functions(str(exe))
    names = {f.name for f in table.functions}
    assert {"fib", "read_one", "read_two", "write_one", "depth", "main"} <= names
    script = f"""global e, r
probe process("{exe}").function("*") {{ e[ppfunc()]++ }}
probe process("{exe}").function("*").return {{ r[ppfunc()]++ }}
probe process("{exe}").function("fib") {{ e["fib-by-name"]++ }}
probe end {{ foreach (k in e-) printf("e %s %d\\n", k, e[k])
  foreach (k in r-) printf("r %s %d\\n", k, r[k]) }}
"""
    res = run_pydyn(cache, "-e", script, "-c", f"{exe} 12 50")
    assert res.returncode == 0, res.stderr
    out = res.stdout.splitlines()
    assert "fib(12)=144 s=40 depth=50" in out
    got = {tuple(ln.split()[:2]): int(ln.split()[2]) for ln in out if ln[:2] in ("e ", "r ")}
    calls = 465   # fib(12)'s calls
    expect = {"fib": calls, "read_one": 5, "read_two": 5, "write_one": 5, "depth": 51,
              "main": 1}
    for name, n in expect.items():
        assert got[("e", name)] == n, (name, out)
        assert got[("r", name)] == n, (name, out)
    assert got[("e", "fib-by-name")] == calls
    # nothing but exported functions: their names are all in .dynsym
    assert {k[1] for k in got} - {"fib-by-name"} <= names
    assert skipped(res.stderr) == 0, res.stderr


def test_stripped_without_exports_is_a_clear_error(tmp_path: Path, cache: Path) -> None:
    exe = strip(build_c(PROGS / "func_rec.c", tmp_path / "rec", opt="-O2"))
    assert get_functions(str(exe)).unnamed >= 6   # fib, read_*, depth, main ... in .eh_frame
    res = run_pydyn(cache, "-p2", "-e", f'probe process("{exe}").function("*") {{ }}')
    assert res.returncode == 1
    assert "matches no function" in res.stderr
    assert "is stripped: its .eh_frame lists" in res.stderr
    assert "Traceback" not in res.stderr


def test_size_from_fde_and_no_cold_parts(tmp_path: Path) -> None:
    """A symbol without .size gets its FDE's length; gcc's `.cold` parts are not functions."""
    src = tmp_path / "asm.c"
    src.write_text(
        '__asm__(".globl asmfn\\n.type asmfn,@function\\nasmfn:\\n.cfi_startproc\\n'
        '  lea 1(%rdi),%rax\\n  ret\\n.cfi_endproc\\n");\n'
        "long asmfn(long);\n"
        "__attribute__((noinline, cold)) void die(const char *m) { __builtin_puts(m); "
        "__builtin_abort(); }\n"
        "__attribute__((noipa)) long f(long x) { if (__builtin_expect(x < 0, 0)) "
        '{ die("neg"); } return asmfn(x); }\n'
        "int main(int c, char **v) { (void)v; return (int)f(c) - 2; }\n")
    exe = build_c(src, tmp_path / "asm", opt="-O2")
    nm = subprocess.run(["nm", "-S", str(exe)], capture_output=True, text=True).stdout
    assert re.search(r"^[0-9a-f]+ T asmfn$", nm, re.M)   # no size in the symbol
    assert " t f.cold" in nm
    funcs = {f.name: f for f in get_functions(str(exe)).functions}
    assert funcs["asmfn"].size == 5   # lea (4) + ret (1), as the FDE says
    assert "f" in funcs and not any(".cold" in n for n in funcs)


# ---- dlopen / dlclose ----------------------------------------------------------
# One session per ABI and probe mode probes the -O0, -O2 and -O3 builds at once (one
# module build instead of three).
OPTS = ("-O0", "-O2", "-O3")
MODES = [(m32, mode) for m32 in ABIS for mode in ("auto", "trap")]
MODE_IDS = [f"{ABI_IDS[m32]}-{mode}" for m32, mode in MODES]

DL_PROBES = """probe process("{exe}").library("{lib}").function("lib_f") {{
  n[{k}]++; s[{k}] += $arg1 }}
probe process("{exe}").library("{lib}").function("lib_f").return {{
  r[{k}]++; rs[{k}] += $return }}
probe process("{exe}").library("{lib}").mark("libmark") {{ m[{k}]++ }}
"""
DL_END = """probe end {{ for (k = 0; k < {count}; k++)
  printf("%d n=%d s=%d r=%d rs=%d m=%d\\n", k, n[k], s[k], r[k], rs[k], m[k]) }}
"""


@pytest.mark.parametrize("m32, mode", MODES, ids=MODE_IDS)
def test_dlopen_dlclose_loop(tmp_path: Path, cache: Path, sdt_cflags: object, m32: bool,
                             mode: str) -> None:
    """200 loads and unloads: probes are armed at each dlopen (the library lands at a
    new address, fresh code) and forgotten at each dlclose; counts are exact."""
    builds = []
    for k, opt in enumerate(OPTS):
        d = tmp_path / f"o{k}"
        d.mkdir()
        lib = build_c(PROGS / "func_dl_lib.c", d / "libfuncdl.so", m32=m32, opt=opt,
                      extra=("-shared", "-fPIC"))
        # the bare name is found through the program's RUNPATH: glibc searches the
        # caller's, and the caller of the real dlopen is now pydyn's module
        exe = build_c(PROGS / "func_dl.c", d / "dl", m32=m32, opt=opt,
                      extra=(f"-Wl,-rpath,{d}", "-Wl,--enable-new-dtags", "-ldl"))
        builds.append((exe, lib))
    iters = 200
    rets = sum(6 * i + 3002 for i in range(iters))
    args = sum(i + 1000 + i for i in range(iters))
    want = f"sum={rets} unloaded={iters} leaked=no"   # stubs of unloaded copies unmapped
    assert bare([str(builds[0][0]), "libfuncdl.so", str(iters)]) == want + "\n"
    script = "global n, s, r, rs, m\n" + "".join(
        DL_PROBES.format(exe=exe, lib=lib, k=k) for k, (exe, lib) in enumerate(builds))
    script += DL_END.format(count=len(builds))
    for by_path in (False, True):
        cmd = "; ".join(f"{exe} {lib if by_path else 'libfuncdl.so'} {iters}"
                        for exe, lib in builds)
        res = run_pydyn(cache, f"--probe-mode={mode}", "-e", script, "-c", f"sh -c '{cmd}'")
        assert res.returncode == 0, res.stderr
        out = res.stdout.splitlines()
        assert out[:3] == [want] * 3, out
        assert out[3:] == [f"{k} n={2 * iters} s={args} r={2 * iters} rs={rets} m={2 * iters}"
                           for k in range(3)], out
        assert "WARNING" not in res.stderr, res.stderr


# ---- C++ exceptions and backtraces ---------------------------------------------

EXC_PROBES = """probe process("{exe}").function("thrower") {{ te[{k}]++ }}
probe process("{exe}").function("thrower").return {{ tr[{k}]++ }}
probe process("{exe}").function("relay").return {{ rr[{k}]++ }}
probe process("{exe}").function("middle").return {{ mr[{k}]++ }}
probe process("{exe}").function("outer").return {{ orr[{k}]++; os[{k}] += $return }}
probe process("{exe}").function("bt_*").return {{ br[{k}]++; bs[{k}] += $return }}
"""
EXC_END = """probe end {{ for (k = 0; k < {count}; k++)
  printf("%d te=%d tr=%d rr=%d mr=%d or=%d os=%d br=%d bs=%d\\n",
         k, te[k], tr[k], rr[k], mr[k], orr[k], os[k], br[k], bs[k]) }}
"""


@pytest.mark.parametrize("m32, mode", MODES, ids=MODE_IDS)
def test_cxx_exception_through_return_probed_frames(tmp_path: Path, cache: Path, m32: bool,
                                                    mode: str) -> None:
    """throw (through a cleanup and a rethrow) across three `.return`-probed frames:
    the catch works, the result is the unprobed one, the unwound frames' return probes
    are counted as skipped, and backtrace() from a probed frame names its callers."""
    if not have_cxx(m32):
        pytest.skip("no C++ toolchain for this ABI (g++ / g++-multilib)")
    exes = [build_c(PROGS / "func_exc.cc", tmp_path / f"exc{k}", m32=m32, opt=opt,
                    extra=("-rdynamic", "-lstdc++", "-ldl")) for k, opt in enumerate(OPTS)]
    n = 30
    want = "total=590 cleanups=30 rethrows=10 bt=7"   # bt=7: backtrace found all 3 callers
    for exe in exes:
        assert bare([str(exe), str(n)]) == want + "\n"
    script = "global te, tr, rr, mr, orr, os, br, bs\n" + "".join(
        EXC_PROBES.format(exe=exe, k=k) for k, exe in enumerate(exes))
    script += EXC_END.format(count=len(exes))
    cmd = "; ".join(f"{exe} {n}" for exe in exes)
    # the return-address hijack (test_func_exits.py has the patched exits)
    res = run_pydyn(cache, f"--probe-mode={mode}", "-D", "PD_RETURN_HIJACK=1", "-e", script,
                    "-c", f"sh -c '{cmd}'")
    assert res.returncode == 0, res.stderr
    out = res.stdout.splitlines()
    assert out[:3] == [want] * 3, out
    throws = n // 3
    ok = n - throws
    # bt_mid(3) -> 4 bt_mid frames + bt_leaf: 5 returns, bt_leaf gives 7 each time
    assert out[3:] == [f"{k} te={n} tr={ok} rr={ok} mr={ok} or={n} os=590 br=5 bs=35"
                       for k in range(3)], out
    # thrower, relay and middle never return from a throw
    assert skipped(res.stderr) == 3 * 3 * throws, res.stderr


# ---- usymname, ubacktrace, print_ubacktrace ------------------------------------

BT_SCRIPT = """global r
probe process("{exe}").function("bt_leaf") {{
  bt = ubacktrace(); printf("bt=%s\\n", bt)
  printf("sym=%s far=%s\\n", usymname(strtol(tokenize(bt, " "), 16)), usymname(16))
  print_ubacktrace() }}
probe process("{exe}").function("bt_mid").return {{ r++ }}
probe end {{ printf("r=%d\\n", r) }}
"""
BT_CASES = [(False, "-O2", "auto"), (False, "-O0", "auto"), (True, "-O2", "auto"),
            (False, "-O2", "trap")]


@pytest.mark.parametrize("m32, opt, mode", BT_CASES,
                         ids=[f"{ABI_IDS[m]}{o}-{mode}" for m, o, mode in BT_CASES])
def test_ubacktrace_through_hooked_frames(tmp_path: Path, cache: Path, m32: bool, opt: str,
                                          mode: str) -> None:
    """From bt_leaf's entry, called through four bt_mid frames whose return addresses
    are hooked (bt_mid.return): the walk substitutes the real return addresses and
    names every frame as stap does: ` 0xADDR : NAME+0xOFF/0xSIZE [PATH]`."""
    if not have_cxx(m32):
        pytest.skip("no C++ toolchain for this ABI (g++ / g++-multilib)")
    exe = build_c(PROGS / "func_exc.cc", tmp_path / "exc", m32=m32, opt=opt,
                  extra=("-rdynamic", "-lstdc++", "-ldl"))
    res = run_pydyn(cache, f"--probe-mode={mode}", "-e", BT_SCRIPT.format(exe=exe),
                    "-c", f"{exe} 3")
    check_bt_session(res, exe)


def check_bt_session(res: subprocess.CompletedProcess[str], exe: Path) -> list[str]:
    """What BT_SCRIPT must print for func_exc.cc run with 3; returns the frame lines."""
    assert res.returncode == 0, res.stderr
    out = res.stdout.splitlines()
    assert "total=5 cleanups=3 rethrows=1 bt=7" in out   # the program's own backtrace()
    assert "r=4" in out
    addrs = next(ln for ln in out if ln.startswith("bt=")).removeprefix("bt=").split()
    assert "sym=bt_leaf far=0x10" in out
    frames = [ln for ln in out if ln.startswith(" 0x")]
    esc = re.escape(str(exe))
    some = r"0x[0-9a-f]+"
    want = [rf"bt_leaf\+0x0/{some} \[{esc}\]", *[rf"bt_mid\+{some}/{some} \[{esc}\]"] * 4,
            rf"main\+{some}/{some} \[{esc}\]"]
    for line, addr, pattern in zip(frames, addrs, want, strict=False):
        assert re.fullmatch(rf" {addr} : {pattern}", line), (line, pattern, out)
    assert len(frames) >= len(want) and len(addrs) == len(frames)
    # past main is libc, which has no tables: its address and module (stap's form for
    # a mapped object it has no symbols of), then the walk ends
    assert all(re.fullmatch(rf" 0x[0-9a-f]+ \[/\S*/libc\.so\.6\+{some}/{some}\]", ln)
               for ln in frames[len(want):]), frames
    assert len(frames) <= len(want) + 1
    return frames


@pytest.mark.parametrize("m32", ABIS, ids=ABI_IDS)
def test_return_values_in_fp_registers_and_by_pointer(tmp_path: Path, cache: Path,
                                                      m32: bool) -> None:
    """x87/SSE return values survive the return trampoline, and a struct returned by
    hidden pointer (i386: `ret $4` pops it, so the return lands 4 bytes above the
    slot) is found on the shadow stack."""
    exe = build_c(PROGS / "func_fp.c", tmp_path / "fp", m32=m32, opt="-O2")
    want = bare([str(exe)])
    script = f"""global n
probe process("{exe}").function("*").return {{ n[ppfunc()]++ }}
probe end {{ foreach (f in n+) printf("%s %d\\n", f, n[f]) }}
"""
    res = run_pydyn(cache, "-e", script, "-c", str(exe))
    assert res.returncode == 0, res.stderr
    out = res.stdout.splitlines()
    assert out[0] == want.strip()
    counts = dict(ln.split() for ln in out[1:])
    assert {f: counts.get(f) for f in ("half", "third", "twice", "cplx", "mkbig", "main")} \
        == {"half": "1000", "third": "1000", "twice": "1000", "cplx": "1000",
            "mkbig": "1000", "main": "1"}, out
    assert "WARNING" not in res.stderr, res.stderr


@pytest.mark.parametrize("name", ["_setjmp", "__sigsetjmp", "getcontext", "vfork"])
def test_functions_keeping_their_return_address_get_no_return_probe(
        tmp_path: Path, cache: Path, name: str) -> None:
    """setjmp/getcontext save the return address for a later longjmp/setcontext (which
    would land in pd_ret_tramp with no frame left: an abort), vfork returns twice on one
    stack: `.return` on them is a clear error, and a glob leaves them out."""
    exe = build_c(PROGS / "func_jmp.c", tmp_path / "jmp", opt="-O2")
    lib = f'process("{exe}").library("libc.so.6")'
    res = run_pydyn(cache, "-p2", "-e", f'probe {lib}.function("{name}").return {{ }}')
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert f"{name} reads its own return address (or returns twice)" in res.stderr
    # the program itself calls _setjmp: a glob over libc probes the rest, and runs
    res = run_pydyn(cache, "-e", f'global n probe {lib}.function("*jmp*").return {{ n++ }}',
                    "-c", f"sh -c '{exe}; echo status=$?'")
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[:2] == ["s=6", "status=4"], res.stdout


@pytest.mark.parametrize("m32", ABIS, ids=ABI_IDS)
def test_return_probes_in_a_handler_on_a_sigaltstack(tmp_path: Path, cache: Path,
                                                     m32: bool) -> None:
    """A handler on a sigaltstack above the thread's stack calls a `.return`-probed
    function while the interrupted frame is hooked: both returns fire every time."""
    exe = build_c(PROGS / "func_alt.c", tmp_path / "alt", m32=m32, opt="-O2",
                  extra=("-pthread",))
    want = bare([str(exe)])
    script = f"""global fr, gr
probe process("{exe}").function("f").return {{ fr++ }}
probe process("{exe}").function("g").return {{ gr++ }}
probe end {{ printf("fr=%d gr=%d\\n", fr, gr) }}
"""
    res = run_pydyn(cache, "-e", script, "-c", str(exe))
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == [want.strip(), "fr=100 gr=100"], res.stdout
    assert skipped(res.stderr) == 0, res.stderr
