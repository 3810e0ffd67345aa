"""FAST handlers and vector registers (marks and function entry + return pairs).

x86-64 trampolines no longer save xmm0-15: the C they call is general-regs-only and
runs handlers the translator did not prove FAST through pd_xmm_call.  Checked here:
which handlers are FAST, that the module's fast path really uses no vector register
(objdump), that xmm0-15 survive a USDT site and double arguments / return values a
probed function, with FAST and with libc-calling handlers, m64 and m32, and that a
FAST handler's MAXACTION error is still reported.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from cbuild import PROGS, build_c, have_sdt_h, run_pydyn

FAST = """global n, c, r
probe process("{b}").mark("hit") {{ n++ }}
probe process("{b}").function("vec_fn") {{ c++ }}
probe process("{b}").function("vec_fn").return {{ r++ }}
probe end {{ printf("n=%d c=%d r=%d\\n", n, c, r) }}
"""
# strings: pd_rec_str reaches libc's vectorised string routines
SLOW = """probe process("{b}").mark("hit") {{ printf("%s %d\\n", "m", $arg1) }}
probe process("{b}").function("vec_fn") {{ printf("%s\\n", "c") }}
probe process("{b}").function("vec_fn").return {{ printf("%s\\n", "r") }}
"""
# What the trampoline path may call without pd_xmm_call (all general-regs-only).
FAST_FNS = {"pd_tramp_entry", "pd_tramp_fire", "pd_func_fire", "pd_ret_handler",
            "pd_run_probe", "pd_run_fast", "pd_fire_probe", "pd_session_running",
            "pd_count_skipped", "pd_func_run", "pd_guard_init", "pd_ret_fast",
            "pd_func_fire_sp", "pd_counter_slow", "pd_counter_wide", "pd_fast_mark",
            "pd_fast_error", "pd_fast_tls_dynamic", "pd_quiesce_enter_slow",
            "pd_quiesce_leave_slow", "pd_set_reg", "pd_count_reentered"}
# m32: __atomic_fetch_add_8 (runtime/arch/i386/pd_fast_i386.S, general registers) is the add of a
# thread without a counter slot, and PIC code calls the get_pc_thunks; both are checked
# like FAST_FNS.
M32_HELPERS = {"__atomic_fetch_add_8", "__x86.get_pc_thunk.ax", "__x86.get_pc_thunk.bx",
               "__x86.get_pc_thunk.cx", "__x86.get_pc_thunk.dx", "__x86.get_pc_thunk.si",
               "__x86.get_pc_thunk.di", "__x86.get_pc_thunk.bp"}
ALLOWED_CALLS = FAST_FNS | M32_HELPERS | {"pd_xmm_call", "abort@plt", "write@plt"}


def _prog(tmp: Path, m32: bool) -> Path:
    if not have_sdt_h():
        pytest.skip("no <sys/sdt.h> (systemtap-sdt-dev)")
    return build_c(PROGS / "fast_vec.c", tmp / ("fv32" if m32 else "fv64"), m32=m32)


def test_which_handlers_are_fast(tmp_path: Path, cache: Path) -> None:
    b = _prog(tmp_path, False)
    # probe_1 reads an argument: FAST and PD_PROBE_REGS (6); a division is not FAST
    script = (f'global n, s probe process("{b}").mark("hit") {{ n++; n += 3 }}\n'
              f'probe process("{b}").mark("hit") {{ s += $arg1 }}\n'
              f'probe process("{b}").mark("hit") {{ printf("%d\\n", n) }}\n'
              f'probe process("{b}").mark("hit") {{ s += $arg1 / 2 }}\n')
    r = run_pydyn(cache, "-p3", "-e", script)
    assert r.returncode == 0, r.stderr
    rows = re.findall(r"\{PD_PROBE_MARK, (\d+), probe_(\d+),", r.stdout)
    assert sorted(rows, key=lambda x: x[1]) == [("2", "0"), ("6", "1"), ("0", "2"), ("0", "3")]
    assert "static PD_FAST_FN void probe_0(" in r.stdout
    assert "static PD_FAST_FN void probe_1(" in r.stdout
    assert "static void probe_2(" in r.stdout and "static void probe_3(" in r.stdout
    body0 = r.stdout.split("probe_0(struct pd_ctx *c)")[1].split("out:")[0]
    assert "PD_ACTION_FAST(c, " in body0 and "PD_ACTION(c, " not in body0


def _functions(objdump: str) -> dict[str, list[str]]:
    fns: dict[str, list[str]] = {}
    cur: list[str] | None = None
    for line in objdump.splitlines():
        m = re.match(r"[0-9a-f]+ <([^>]+)>:$", line)
        if m:
            cur = fns.setdefault(m.group(1), [])
        elif cur is not None and line.strip():
            cur.append(line)
    return fns


# A vector, MMX or x87 register operand, or an x87 instruction (they all start with f).
FPU_USE = re.compile(r"%[xyz]?mm\d|%st\b|^\s*[0-9a-f]+:\s+f[a-z]+")


@pytest.mark.parametrize("m32", [False, True], ids=["m64", "m32"])
def test_fast_path_uses_no_vector_register(tmp_path: Path, cache: Path, m32: bool) -> None:
    if shutil.which("objdump") is None:
        pytest.skip("no objdump (binutils)")
    b = _prog(tmp_path, m32)
    r = run_pydyn(cache, "-p4", "-e", FAST.format(b=b))
    assert r.returncode == 0, r.stderr
    mod = Path(r.stdout.split()[1 if m32 else 0])
    assert mod.name.endswith("_m32.so" if m32 else "_m64.so"), r.stdout
    fns = _functions(subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(mod)],
                                    capture_output=True, text=True, check=True).stdout)
    handlers = {n for n in fns if re.fullmatch(r"probe_[01]", n)}
    assert len(handlers) == 2, sorted(fns)
    checked = FAST_FNS | handlers | (M32_HELPERS & fns.keys())
    if m32:     # the i386 pd_ret_tramp still saves xmm0-7 and x87 around it
        checked.discard("pd_ret_handler")
    for name in checked:
        body = fns.get(name)
        if body is None:
            # pd_ret_fast: x86-64 only; pd_run_fast: pd_fast_mark's wrapper
            assert name in ("pd_fire_probe", "pd_run_fast") or (m32 and name == "pd_ret_fast"), \
                f"{name} missing from {mod}"
            continue        # inlined into its callers, which are checked
        for ins in body:
            assert not FPU_USE.search(ins), f"{name}: {ins}"
            m = re.search(r"\s(?:call|jmp)\s+[0-9a-f]+ <([^>+]+)>", ins)
            if m and m.group(1) != name:
                assert m.group(1) in ALLOWED_CALLS, f"{name} calls {m.group(1)}: {ins}"


@pytest.mark.parametrize("m32", [False, True], ids=["m64", "m32"])
@pytest.mark.parametrize("kind", ["fast", "slow"])
def test_vector_registers_kept(tmp_path: Path, cache: Path, m32: bool, kind: str) -> None:
    b = _prog(tmp_path, m32)
    n = 3000
    out = tmp_path / "out.txt"
    script = (FAST if kind == "fast" else SLOW).format(b=b)
    r = run_pydyn(cache, "-v", "-o", str(out), "-e", script, "-c", f"{b} {n}")
    assert r.returncode == 0, r.stderr
    m = re.search(r"sites: (\d+) total, (\d+) trap", r.stderr)
    # the mark, the function's entry and its one exit (its `.return`: plan/returns.py)
    assert m and m.group(1) == "3", r.stderr
    assert re.search(r"returns of vec_fn@0x[0-9a-f]+: exits patched \(1:", r.stderr), r.stderr
    if not m32:
        assert m.group(2) == "0", r.stderr          # every site is a trampoline
    assert f"bad 0\ndone {n}\n" in r.stdout, r.stdout
    text = out.read_text()
    if kind == "fast":
        assert f"n={n} c={n} r={n}" in text
    else:
        assert text.count("m ") == n and text.count("c\n") == n and text.count("r\n") == n


@pytest.mark.parametrize("mode", ["auto", "trap"])   # pd_run_fast / pd_run
def test_fast_handler_maxaction_is_reported(tmp_path: Path, cache: Path, mode: str) -> None:
    b = _prog(tmp_path, False)
    script = f'global n probe process("{b}").mark("hit") {{ n++; n++ }}'
    r = run_pydyn(cache, f"--probe-mode={mode}", "-D", "MAXACTION=1", "-e", script,
                  "-c", f"{b} 5")
    assert r.returncode == 1, r.stdout + r.stderr
    assert re.search(r"ERROR: MAXACTION exceeded near operator '\+\+' at <input>:1:\d+",
                     r.stderr), r.stderr
    assert "bad 0\ndone 5" in r.stdout


@pytest.mark.parametrize("m32", [False, True], ids=["m64", "m32"])
def test_x87_stack_kept(tmp_path: Path, cache: Path, m32: bool) -> None:
    """i386 gcc keeps doubles on the x87 stack: at x87_live.c's site it is full (eight
    values), and fp_add's own x87 pushes would overwrite them with NaNs unless
    pd_xmm_call saves the x87 state (arch/i386/pd_fast_i386.S)."""
    b = build_c(PROGS / "x87_live.c", tmp_path / "x87", m32=m32)
    n = 2000
    bare = subprocess.run([str(b), str(n)], capture_output=True, text=True, check=True).stdout
    script = (f'global x probe process("{b}").mark("hit") {{ x = fp_add(x, long_to_fp($arg1)) }}'
              ' probe end { printf("x=%s\\n", fp_to_string(x, 1)) }')
    r = run_pydyn(cache, "-e", script, "-c", f"{b} {n}")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(bare), r.stdout
    assert f"x={n * (n - 1) // 2}.0\n" in r.stdout, r.stdout


@pytest.mark.parametrize("m32", [False, True], ids=["m64", "m32"])
def test_fp_control_state_kept(tmp_path: Path, cache: Path, m32: bool) -> None:
    """A handler run through pd_xmm_call (this one is not FAST) leaves the program's
    unmasked exceptions and rounding mode as they were: i386's check of the x87 stack
    stores the environment with fnstenv, which masks every exception, and puts the
    control word back."""
    b = build_c(PROGS / "x87_cw.c", tmp_path / "x87cw", m32=m32, extra=("-lm",))
    script = (f'global s probe process("{b}").mark("hit") {{ s .= sprint($arg1) }}'
              ' probe end { printf("len=%d\\n", strlen(s)) }')
    r = run_pydyn(cache, "-e", script, "-c", f"{b} 100")
    assert r.returncode == 0, r.stderr
    assert re.search(r"^except 0x\w+ changed 0$", r.stdout, re.M), r.stdout
    assert "len=190" in r.stdout, r.stdout
