"""aarch64 function probes under qemu-user: entries, `.return`, `$argN`,
`$return`, probefunc(), relocated first instructions, recursion, longjmp, libraries, BTI.

The programs run under `qemu-aarch64` (the `-c` program, or a shell line starting
qemu) as in test_aarch64.py, whose build and run helpers these tests use.  Each
session runs with trampolines (the entry's first instruction becomes `B stub`, the
stub runs it relocated) and with `--probe-mode=trap` (`BRK` at the entry, resumed in
the out-of-line copy of the same relocated code); the program's own output must be
what it is without pydyn, and the probes' counts and values are checked exactly
against what the program printed or what this file computes.
Verified under emulation only (README, "aarch64"): qemu's default cpu emulates
pointer authentication (the `paciasp` entries really sign) and BTI (guarded pages
really fault), `-cpu cortex-a72` has neither.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import test_aarch64
from cbuild import PROGS, run_pydyn
from test_aarch64 import MODES, QEMU, SYSROOT, build_a64, qemu_cmd
from test_aarch64 import pytestmark as pytestmark  # the same skips: no cross compiler, qemu
from test_dwarf import ENTRY, check_entry_session
from test_func_probes import SCRIPT as REC_SCRIPT
from test_func_probes import fib_calls

from pydyn.launcher.elf.functions import get_functions
from pydyn.launcher.plan.aarch64 import plan_function, relocate

OPTS = ("-O0", "-O2")
SOURCES = (PROGS / "a64_func_main.c", PROGS / "a64_func.S")

# what each return probe must see: the functions' results, in call order
RETURNS = {
    "f_adr": [0x1111], "f_adrp": [0x2222], "f_ldrx": [0x3333], "f_ldrw": [0x4444],
    "f_ldrsw": [-5], "f_ldrd": [66], "f_ldrq": [0x7777 + 0x8888], "f_prfm": [8],
    "f_b": [105], "f_target": [105, 111], "call_bl": [1], "f_bcond": [20, 10],
    "f_cbz": [40, 30], "f_tbz": [50, 60], "f_tbnz": [80, 90], "f_pac": [111], "f_bti": [70],
}
# the relocation each entry needs (plan/aarch64.py relocate's name for it)
FORMS = {"f_adr": "adr", "f_adrp": "adrp", "f_ldrx": "ldr literal", "f_ldrw": "ldr literal",
         "f_ldrsw": "ldr literal", "f_ldrd": "ldr literal", "f_ldrq": "ldr literal",
         "f_prfm": "prfm literal, a hint: dropped", "f_b": "b", "f_bl": "bl",
         "f_bcond": "conditional branch", "f_cbz": "conditional branch", "f_tbz": "test and branch",
         "f_tbnz": "test and branch"}
N = 3   # args8 calls

# test_aarch64.py's module fixtures, registered here under their names
a64dir = test_aarch64.a64dir


def expected_args(n: int) -> list[list[int]]:
    return [[i, i + 1, i + 2, -i, 1 << 40, i * i, 7, -8] for i in range(n)]


def lines_with(text: str, prefix: str) -> list[list[str]]:
    return [line.split()[1:] for line in text.splitlines() if line.startswith(prefix)]


def returns_by_function(text: str, tag: str) -> dict[str, list[int]]:
    got: dict[str, list[int]] = {}
    for t, name, value in lines_with(text, "got "):
        if t == tag:
            got.setdefault(name, []).append(int(value))
    return got


@pytest.fixture(scope="module")
def fn_builds(a64dir: Path) -> dict[str, Path]:
    return {opt: build_a64(a64dir, SOURCES, f"fn{opt}", opt=opt) for opt in OPTS}


def relocation_script(builds: dict[str, Path]) -> str:
    out = ["global e"]
    for opt, exe in builds.items():
        p = f'process("{exe}")'
        rets = ", ".join(f'{p}.function("{f}").return' for f in (*RETURNS, "mkpair"))
        out += [f'probe {p}.function("*") {{ e["{opt}", probefunc()]++ }}',
                f'probe {p}.function("args8") {{ printf("args {opt} %d %d %d %d %d %d %d %d\\n",'
                ' $arg1, $arg2, $arg3, $arg4, $arg5, $arg6, $arg7, $arg8) }',
                f'probe {rets} {{ printf("got {opt} %s %d\\n", probefunc(), $return) }}']
    out.append('probe end { foreach ([o, f] in e) printf("entry %s %s %d\\n", o, f, e[o, f]) }')
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("mode", MODES)
def test_relocated_entries_args_and_returns(fn_builds: dict[str, Path], a64dir: Path,
                                            cache: Path, mode: str) -> None:
    """Every PC-relative first instruction runs right from the stub (or the BRK's
    out-of-line copy), $arg1..$arg8 are x0-x7, $return is x0; -O0 and -O2 in one session."""
    script = a64dir / "reloc.stp"
    script.write_text(relocation_script(fn_builds))
    command = "; ".join(qemu_cmd(fn_builds[o], str(N)) for o in OPTS)
    res = run_pydyn(cache, "-v", f"--probe-mode={mode}", str(script), "-c", command)
    assert res.returncode == 0, res.stderr
    assert "WARNING" not in res.stderr and "not armed" not in res.stderr, res.stderr
    plain = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=60)
    assert plain.returncode == 0
    expect = [ln for ln in res.stdout.splitlines() if ln.startswith("expect ")]
    assert expect == plain.stdout.splitlines()
    assert "expect pac_active 1" in plain.stdout   # the cpu signs: f_pac's autiasp checks
    for opt in OPTS:
        assert [v[1:] for v in lines_with(res.stdout, "args ") if v[0] == opt] == \
            [[str(x) for x in row] for row in expected_args(N)]
        assert returns_by_function(res.stdout, opt) == {**RETURNS, "mkpair": [N]}
        entries = {f: int(c) for o, f, c in lines_with(res.stdout, "entry ") if o == opt}
        assert entries["args8"] == N and entries["main"] == 1 and entries["f_bl"] == 1
        assert {f: entries[f] for f in RETURNS} == {f: len(v) for f, v in RETURNS.items()}
    cov = next(ln for ln in res.stderr.splitlines() if ln.startswith("sites:"))
    assert re.fullmatch(r"sites: \d+ total, 0 trap, \d+ displace", cov), cov


def test_plans_name_the_relocation(fn_builds: dict[str, Path]) -> None:
    table = get_functions(str(fn_builds["-O2"]))
    sites = {s.name: s for s in table.sites(table.functions, False)}
    for name, form in FORMS.items():
        plan = plan_function(sites[name])
        assert plan.tactic == "displace" and f"({form})" in plan.reason, (name, str(plan))
    bti = next(f for f in table.functions if f.name == "f_bti")
    assert bti.entry == bti.addr + 4           # after `bti c`, as x86 skips endbr64
    pac = next(f for f in table.functions if f.name == "f_pac")
    assert pac.entry == pac.addr               # paciasp is moved into the stub


@pytest.mark.unit
def test_entries_that_cannot_move_are_refused() -> None:
    for word in (0xD4200000, 0xD4400000, 0x00000000):      # brk #0, hlt #0, udf #0
        with pytest.raises(ValueError):
            relocate(word, 0x1000)
    # a B.cond keeps its condition and reaches its target through the +8 detour
    code, fixups, _ = relocate(0x54000040 | 0xB, 0x1000)   # b.lt 0x1008
    assert code[:4] == (0x5400004B).to_bytes(4, "little")
    assert [(f.at, f.kind, f.target) for f in fixups] == [(8, "b26", 0x1008)]


# --- recursion 10,000 deep, -O0 and -O2 ------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
def test_recursion_counts_and_return_values(a64dir: Path, cache: Path, mode: str) -> None:
    """test_func_probes.py's script: fib's calls and returned sum, depth(10000)'s 10,001
    entries and returns (the return probe sees 10000 at the top), globs, probefunc()."""
    n = 12
    calls, total = fib_calls(n)
    for opt in OPTS:
        exe = build_a64(a64dir, [PROGS / "func_rec.c"], f"rec{opt}", opt=opt)
        res = run_pydyn(cache, f"--probe-mode={mode}", "-e", REC_SCRIPT.format(exe=exe), "-c",
                        f"sh -c '{qemu_cmd(exe, str(n), '10000')}; echo status=$?'")
        assert res.returncode == 0, res.stderr
        out = res.stdout.splitlines()
        assert f"fib({n})=144 s=40 depth=10000" in out and "status=3" in out
        assert f"e={calls} r={calls} rs={total} de=10001 dr=10001" in out, res.stdout
        assert "top depth" in out
        assert [ln for ln in out if ln.startswith("g ")] == ["g read_one 10", "g read_two 10"]
        assert "WARNING" not in res.stderr, res.stderr


# --- longjmp out of probed frames ---------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
def test_longjmp_out_of_probed_frames(a64dir: Path, cache: Path, mode: str) -> None:
    # gcc cannot tell that dive's recursion ends in longjmp
    exe = build_a64(a64dir, [PROGS / "func_jmp.c"], f"jmp-{mode}",
                    extra=("-Wno-infinite-recursion",))
    script = f"""global de, dr, ar, as
probe process("{exe}").function("dive") {{ de++ }}
probe process("{exe}").function("dive").return {{ dr++ }}
probe process("{exe}").function("after").return {{ ar++; as += $return }}
probe end {{ printf("de=%d dr=%d ar=%d as=%d\\n", de, dr, ar, as) }}
"""
    res = run_pydyn(cache, f"--probe-mode={mode}", "-e", script, "-c",
                    f"sh -c '{qemu_cmd(exe)}; echo status=$?'")
    assert res.returncode == 0, res.stderr
    out = res.stdout.splitlines()
    assert out[:2] == ["s=6", "status=4"]
    # the 18 frames longjmp skipped never return: dropped and counted, never misrouted
    assert "de=18 dr=0 ar=3 as=6" in out
    assert "skipped probes: 18" in res.stderr


# --- DWARF parameters by name, @entry -------------------------------------------------

@pytest.mark.parametrize("opt", OPTS)
def test_dwarf_parameters_and_entry_values(a64dir: Path, cache: Path, opt: str) -> None:
    """test_dwarf.py's @entry script: `$n`/`$x` by name (at -O2 from DWARF's location
    lists, x0; at -O0 the prologue's stack slot is not written yet: the ABI register,
    which `-L -v` marks), each return with its own entry's value 10,000 deep, and the
    longjmp'ed frames' values never leaking into later returns."""
    rec = build_a64(a64dir, [PROGS / "func_rec.c"], f"recg{opt}", opt=opt, extra=("-g",))
    jmp = build_a64(a64dir, [PROGS / "func_jmp.c"], f"jmpg{opt}", opt=opt,
                    extra=("-g", "-Wno-infinite-recursion"))
    listed = run_pydyn(cache, "-L", "-v", f'process("{rec}").function("fib")')
    abi = "(ABI)" if opt == "-O0" else ""
    # the parameter, then the locals DWARF places at the entry, then the pc
    assert ' $n:long int ' in listed.stdout and ' pc=' in listed.stdout \
        and f'locations="n=x0{abi}"' in listed.stdout, listed.stdout
    check_entry_session(run_pydyn(
        cache, "-e", ENTRY.format(rec=rec, jmp=jmp), "-c",
        f"sh -c '{qemu_cmd(rec, '15', '10000')}; {qemu_cmd(jmp)}; echo status=$?'"))


# --- libraries: one the program dlopens, and libc from the qemu sysroot -------------------

def test_library_functions(a64dir: Path, cache: Path) -> None:
    """`.library(PATH).function` in a library dlopen'ed and dlclose'd 20 times (re-armed
    each time), and libc's malloc: the guest loader names it /lib/libc.so.6, the launcher
    finds it in the sysroot, the runtime matches the two by inode."""
    lib = build_a64(a64dir, [PROGS / "func_dl_lib.c"], "libfuncdl.so",
                    extra=("-shared", "-fPIC"))
    exe = build_a64(a64dir, [PROGS / "func_dl.c"], "dl", extra=("-ldl",))
    p, libp = f'process("{exe}")', f'.library("{lib}")'
    script = f"""global n, s, r, m, me, mr, ms
probe {p}{libp}.function("lib_f") {{ n++; s += $arg1 }}
probe {p}{libp}.function("lib_f").return {{ r += $return }}
probe {p}{libp}.mark("libmark") {{ m++ }}
probe {p}.library("libc.so.6").function("malloc") {{ me++ }}
probe {p}.library("libc.so.6").function("malloc").return {{ mr++; ms += $return != 0 }}
probe end {{ printf("n=%d s=%d r=%d m=%d malloc=%d\\n", n, s, r, m,
  me > 0 && me == mr && mr == ms) }}
"""
    iters = 20
    res = run_pydyn(cache, "-e", script, "-c", f"{exe} {lib} {iters}")
    assert res.returncode == 0, res.stderr
    args = [x for i in range(iters) for x in (i, 1000 + i)]
    rets = sum(3 * x + 1 for x in args)
    assert f"sum={rets} unloaded={iters} leaked=no" in res.stdout
    assert f"n={2 * iters} s={sum(args)} r={rets} m={2 * iters} malloc=1" in res.stdout, \
        res.stdout
    listed = run_pydyn(cache, "-p2", "-e", script)
    assert f'process("{SYSROOT}/lib/libc.so.6").function("malloc")' in listed.stdout


# --- BTI: guarded pages stay guarded, landing pads are never patched ----------------------

@pytest.fixture(scope="module")
def bti_prog(a64dir: Path) -> Path:
    """The relocation program marked for BTI (-z force-bti; its own _start: Debian's crt
    files have no landing pads).  qemu's default cpu enforces BTI on its pages."""
    exe = build_a64(a64dir, [*SOURCES, PROGS / "a64_bti_start.S"], "fn-bti",
                    extra=("-mbranch-protection=standard", "-nostartfiles",
                           "-Wl,-z,force-bti"))
    res = subprocess.run([str(QEMU), "-L", SYSROOT, str(exe), str(N)], capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0 and "expect f_bti 70" in res.stdout, res
    return exe


def test_bti_object_probes_after_the_landing_pad(bti_prog: Path, a64dir: Path,
                                                 cache: Path) -> None:
    """main (paciasp, called by libc with blr) and args8 (bti c, called through a
    pointer) keep their landing pads: the probe is the next instruction, the page keeps
    PROT_BTI (patching it in place would raise SIGILL here, as it did before
    pd_segment_prot kept the flag); a .return after paciasp is refused by name."""
    table = get_functions(str(bti_prog))
    by_name = {f.name: f for f in table.functions}
    assert by_name["main"].entry == by_name["main"].addr + 4
    assert by_name["args8"].entry == by_name["args8"].addr + 4
    p = f'process("{bti_prog}")'
    # f_pac begins with paciasp: its probe follows it, and it has no return probe
    returns = {f: v for f, v in RETURNS.items() if f != "f_pac"}
    rets = ", ".join(f'{p}.function("{f}").return' for f in returns)
    script = f"""global e
probe {p}.function("main"), {p}.function("args8") {{ e[probefunc()]++ }}
probe {p}.function("args8") {{ printf("args %d %d %d %d %d %d %d %d\\n", $arg1, $arg2,
  $arg3, $arg4, $arg5, $arg6, $arg7, $arg8) }}
probe {rets} {{ printf("got bti %s %d\\n", probefunc(), $return) }}
probe end {{ printf("main=%d args8=%d\\n", e["main"], e["args8"]) }}
"""
    for mode in MODES:
        res = run_pydyn(cache, f"--probe-mode={mode}", "-e", script, "-c", f"{bti_prog} {N}")
        assert res.returncode == 0, res.stderr
        assert f"main=1 args8={N}" in res.stdout, res.stdout
        assert [v for v in lines_with(res.stdout, "args ")] == \
            [[str(x) for x in row] for row in expected_args(N)]
        assert returns_by_function(res.stdout, "bti") == returns
    refused = run_pydyn(cache, "-p2", "-e", f'probe {p}.function("main").return {{ }}')
    assert refused.returncode == 1
    assert "main signs its return address (paciasp)" in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr


# --- no pointer authentication: paciasp/autiasp are nops ----------------------------------

def test_without_pointer_authentication(fn_builds: dict[str, Path], a64dir: Path,
                                        cache: Path) -> None:
    exe = fn_builds["-O2"]
    script = (f'probe process("{exe}").function("f_pac").return, '
              f'process("{exe}").function("pac_active").return '
              f'{{ printf("got %s %d\\n", probefunc(), $return) }}')
    res = run_pydyn(cache, "-e", script, "-c", qemu_cmd(exe, "1", cpu="cortex-a72"))
    assert res.returncode == 0, res.stderr
    assert "got f_pac 111" in res.stdout and "got pac_active 0" in res.stdout, res.stdout
