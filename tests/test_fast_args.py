"""FAST handlers that read arguments, $return, DWARF parameters and @entry values, and
return probes on functions too small for patches at both entry and exit.

translate/fast.py makes counter, sum, statistic and keyed updates of such values FAST
(PD_PROBE_FAST | PD_PROBE_REGS: general-regs-only C, no globals lock, no vector
registers saved); plan/returns.py gives the `ret` that ends a function's entry window
an exit row the entry's stub jumps to.  Checked on real processes, m64 and m32: the
rows are FAST (-p3), the handlers and the runtime functions they reach use no vector
register and call only what may run there (objdump), every count, sum, statistic and
keyed count is exact against the program's own across recursion, frames longjmp
leaves, signal handlers and threads, and the small functions' returns are reached
without the return-address hijack (-v).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from cbuild import PROGS, build_c, have_sdt_h, run_pydyn
from test_dwarf_exprs import ARG, LINES, SRC, own
from test_fast_handlers import FPU_USE, M32_HELPERS, _functions

N, THREADS = 1000, 4

SCRIPT = """global tc, ta, tr, d, ic, isum, ir, wp, kk, st, wr, ma, mk, ms
probe process("{b}").function("tiny") {{ tc++; ta += $arg1 }}
probe process("{b}").function("tiny").return {{ tr += $return; d <<< $return - @entry($arg2) }}
probe process("{b}").function("ident") {{ ic++; isum += $x }}
probe process("{b}").function("ident").return {{ ir += $return }}
probe process("{b}").function("wide") {{ wp += $a + $g; kk[$b & 3]++; st <<< $d }}
probe process("{b}").function("wide").return {{ wr += $return }}
probe process("{b}").mark("hit") {{
  ma += $arg1 + $arg2; mk[$arg1 & 1] += $arg2; ms[$arg2 & 3] <<< $arg1 }}
probe end {{
  printf("tiny %d %d %d %d %d\\n", tc, tr, ta, @count(d), @sum(d))
  printf("ident %d %d %d\\n", ic, isum, ir)
  printf("wide %d %d %d %d %d %d %d\\n", @count(st), wr, wp, @sum(st), @min(st), @max(st),
         @avg(st))
  foreach (k+ in kk) printf("kk %d %d\\n", k, kk[k])
  printf("mark %d\\n", ma)
  foreach (k+ in mk) printf("mk %d %d\\n", k, mk[k])
  foreach (k+ in ms) printf("ms %d %d %d\\n", k, @count(ms[k]), @sum(ms[k]))
}}
"""
# every probe but `end` is FAST; these read the register context
REGS_PROBES = 7
# What those handlers may call (each checked like the handlers where it is a function
# of the module): the FAST path's own functions and pd_xmm_call, which saves the vector
# registers around the rest.
FAST_ARG_FNS = {"pd_fast_arg", "pd_fast_return", "pd_fast_pstat_add_slow",
                "pd_fast_kstat_add", "pd_fast_gettime_slow", "pd_fast_regs",
                "pd_counter_slow", "pd_counter_wide", "pd_count_skipped",
                "pd_slots_rejoin", "pd_quiesce_enter_slow", "pd_quiesce_leave_slow",
                "pd_fast_error", "pd_fast_tls_dynamic", "pd_fast_run", "pd_entry_push",
                "pd_entry_save", "pd_entry_pop", "pd_ent_drop_below"}
# i386: libgcc's 64-bit division (a statistic's average, inline in the handler: pd_fast.h)
LIBGCC_DIV = {"__divdi3", "__moddi3", "__udivdi3", "__umoddi3"}
ALLOWED = FAST_ARG_FNS | M32_HELPERS | LIBGCC_DIV | {"pd_xmm_call", "_dl_tlsdesc_return",
                                                     "__tls_get_addr@plt"}


@pytest.fixture(scope="module")
def progs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    if not have_sdt_h():
        pytest.skip("no <sys/sdt.h> (systemtap-sdt-dev)")
    d = tmp_path_factory.mktemp("fast_args")
    # -O0: parameters at DWARF frame-base locations, read through pd_fast_slow
    return {f"{abi}{opt}": build_c(PROGS / "fast_args.c", d / f"fast_args_{abi}{opt}",
                                   m32=abi == "m32", opt=opt, extra=("-g", "-pthread"))
            for abi in ("m64", "m32") for opt in ("-O2", "-O0")}


def expected(prog: Path) -> tuple[dict[str, list[int]], list[str]]:
    """The program's own counts, and the lines the script must print."""
    own = {ln.split()[0]: [int(x) for x in ln.split()[1:]] for ln in subprocess.run(
        [str(prog), str(N), str(THREADS)], capture_output=True, text=True,
        check=True).stdout.splitlines()}
    tc, tret, tisum = own["tiny"]
    ic, isum = own["ident"]
    wc, wsum = own["wide"]
    mc, msum = own["mark"]
    ds = [i + 3 for i in range(N)]
    kk: dict[int, int] = {}
    mk: dict[int, int] = {}
    ms: dict[int, list[int]] = {}
    for i in range(N):
        kk[-i & 3] = kk.get(-i & 3, 0) + 1
        mk[i & 1] = mk.get(i & 1, 0) + i * 2 + 1
        ms.setdefault((i * 2 + 1) & 3, []).append(i)
    lines = [f"tiny {tc} {tret} {tisum} {tc} {tisum}",   # $return - @entry(s) is i
             f"ident {ic} {isum} {isum}",
             f"wide {wc} {wsum} {sum(range(N)) - 2 * N} {sum(ds)} {min(ds)} {max(ds)} "
             f"{sum(ds) // N}",
             *(f"kk {k} {kk[k]}" for k in sorted(kk)),
             f"mark {msum}",
             *(f"mk {k} {mk[k]}" for k in sorted(mk)),
             *(f"ms {k} {len(ms[k])} {sum(ms[k])}" for k in sorted(ms))]
    assert mc == N
    return own, lines


@pytest.mark.parametrize("opt", ["-O2", "-O0"])
@pytest.mark.parametrize("abi", ["m64", "m32"])
def test_fast_args_exact(progs: dict[str, Path], cache: Path, abi: str, opt: str) -> None:
    b = progs[abi + opt]
    _, lines = expected(b)
    script = SCRIPT.format(b=b)
    c = run_pydyn(cache, "-p3", "-e", script)
    assert c.returncode == 0, c.stderr
    rows = re.findall(r"\{PD_PROBE_MARK, (\d+), probe_\d+(?:_entry)?,", c.stdout)
    # seven probes and tiny.return's hidden @entry handler: all FAST and PD_PROBE_REGS
    assert rows.count("6") == REGS_PROBES + 1 and len(rows) == REGS_PROBES + 1, rows
    r = run_pydyn(cache, "-v", "-e", script, "-c", f"{b} {N} {THREADS}")
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    for ln in lines:
        assert ln in out, (ln, r.stdout)
    assert "skipped" not in r.stderr and "ERROR" not in r.stderr, r.stderr
    # no return of the three functions takes the hijack; at -O2 ident's ret ends its
    # entry's window on both ABIs, tiny's on x86-64
    how = dict(re.findall(r"returns of (\w+)@0x[0-9a-f]+: (.*)", r.stderr))
    assert set(how) == {"tiny", "ident", "wide"}, r.stderr
    assert all(h.startswith("exits patched") for h in how.values()), how
    if opt == "-O2":
        assert "in the entry's window" in how["ident"], how
        assert ("in the entry's window" in how["tiny"]) == (abi == "m64"), how
    assert re.search(r"sites: \d+ total, 0 trap", r.stderr), r.stderr


@pytest.mark.parametrize("abi", ["m64", "m32"])
def test_fast_arg_handlers_use_no_vector_register(progs: dict[str, Path], cache: Path,
                                                  abi: str) -> None:
    if shutil.which("objdump") is None:
        pytest.skip("no objdump (binutils)")
    r = run_pydyn(cache, "-p4", "-e", SCRIPT.format(b=progs[abi + "-O2"]))
    assert r.returncode == 0, r.stderr
    mod = next(Path(p) for p in r.stdout.split() if p.endswith(f"_{abi}.so"))
    fns = _functions(subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(mod)],
                                    capture_output=True, text=True, check=True).stdout)
    handlers = {n for n in fns if re.fullmatch(r"probe_[0-6](_entry)?", n)}
    assert len(handlers) == REGS_PROBES + 1, sorted(fns)
    for name in handlers | ((FAST_ARG_FNS | LIBGCC_DIV) & fns.keys()):
        for ins in fns[name]:
            assert not FPU_USE.search(ins), f"{name}: {ins}"
            m = re.search(r"\s(?:call|jmp)\s+[0-9a-f]+ <([^>+]+)>", ins)
            if m and m.group(1) != name and not m.group(1).startswith(name + "."):
                assert m.group(1) in ALLOWED, f"{name} calls {m.group(1)}: {ins}"


@pytest.mark.parametrize("abi", ["m64", "m32"])
def test_small_function_returns_exact_hijack_forced(progs: dict[str, Path], cache: Path,
                                                    abi: str) -> None:
    """The same session with the hijack forced gives the same figures: the in-window
    exit is the hijack's equal, not an approximation of it."""
    b = progs[abi + "-O2"]
    _, lines = expected(b)
    r = run_pydyn(cache, "-v", "-D", "PD_RETURN_HIJACK=1", "-e", SCRIPT.format(b=b), "-c",
                  f"{b} {N} {THREADS}")
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    for ln in lines:
        assert ln in out, (ln, r.stdout)
    how = dict(re.findall(r"returns of (\w+)@0x[0-9a-f]+: (.*)", r.stderr))
    assert all(h.startswith("hijack") for h in how.values()), how


@pytest.mark.parametrize("abi", ["m64", "m32"])
def test_fast_dwarf_expression_values(tmp_path: Path, cache: Path, abi: str) -> None:
    """A FAST handler's parameter at a DWARF expression location (tests/test_dwarf_exprs.py's
    computed `y`, m32 over a dereferenced frame base) is read by pd_fetch_arg through
    pd_fast_slow, with the vector registers saved: the values are the program's own."""
    exe = build_c(SRC, tmp_path / f"dx_{abi}", m32=abi == "m32", extra=("-g",))
    want = own(exe)
    script = (f'global x, y, n probe process("{exe}").statement("*@dwarf_exprs.c:'
              f'{LINES["COMPUTED"]}") {{ n++; x += $x; y += $y }}\n'
              'probe end { printf("n=%d x=%d y=%d\\n", n, x, y) }')
    c = run_pydyn(cache, "-p3", "-e", script)
    assert c.returncode == 0, c.stderr
    assert re.search(r"\{PD_PROBE_MARK, 6, probe_0,", c.stdout), c.stdout
    assert "PD_ARG_EXPR" in c.stdout, c.stdout
    r = run_pydyn(cache, "-e", script, "-c", f"{exe} {ARG}")
    assert r.returncode == 0, r.stderr
    assert f"n=1 x={want['x']} y={want['y']}" in r.stdout, r.stdout
