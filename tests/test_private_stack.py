"""Trampoline handlers on a private per-thread stack.

tests/progs/pstack_main.c resets SIGSEGV to its default before any hit, which removes
the runtime's fallback for a stub whose store to the target's stack faults: every
garbage-sp hit below fires only because the stub switched to the thread's private
stack first (without the switch the process dies of SIGSEGV).  Also: a handler
needing ~10 KiB while the target's stack has less than 1 KiB left, 1-8 threads, a
forked child, signals whose handler hits a probe while the thread is in a stub or a
handler (hits + skipped = signals, results as unprobed), and glibc's own timer threads
(no private stack: their own, as before), the program's own signal handlers as it
installed them, and every general register and flag across a switching stub (the short
FAST body and the full one).  m64 and m32.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from cbuild import PROGS, build_c, have_sdt_h, run_pydyn


@pytest.fixture(scope="module", params=[False, True], ids=["m64", "m32"])
def prog(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not have_sdt_h():
        pytest.skip("no <sys/sdt.h> (systemtap-sdt-dev)")
    m32 = bool(request.param)
    return build_c([PROGS / "fp_garbage_sp.S", PROGS / "pstack_main.c"],
                   tmp_path_factory.mktemp("ps") / ("ps32" if m32 else "ps64"), m32=m32,
                   extra=("-pthread", "-lrt"))


def run(cache: Path, prog: Path, script: str, args: str, *opts: str) -> str:
    r = run_pydyn(cache, "-v", *opts, "-e", script.replace("P", str(prog)), "-c", f"{prog} {args}")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert "exited with signal" not in r.stderr, r.stderr
    assert re.search(r"sites: \d+ total, 0 trap", r.stderr), r.stderr   # trampolines
    return r.stdout


GARBAGE = ('global h probe process("P").mark("garbage") '
           '{ h++; printf("hit %d %d\\n", $arg1, $arg2) } probe end { printf("hits=%d\\n", h) }')


def hits(out: str) -> list[str]:
    return sorted(ln for ln in out.splitlines() if ln.startswith("hit "))


@pytest.mark.parametrize("threads", [0, 1, 8])
def test_garbage_sp_without_fallback(cache: Path, prog: Path, threads: int) -> None:
    n = 40
    out = run(cache, prog, GARBAGE, f"garbage {threads} {n}")
    bases = [0] if threads == 0 else [1000 * (k + 1) for k in range(threads)]
    assert hits(out) == sorted(f"hit {b + i} {100 * i}" for b in bases for i in range(n))
    s = n * (n - 1) // 2
    assert f"garbage total {sum(n * b + 101 * s for b in bases)}\n" in out, out
    assert f"hits={len(bases) * n}\n" in out


def test_garbage_sp_in_forked_child(cache: Path, prog: Path) -> None:
    n = 30
    out = run(cache, prog, GARBAGE, f"fork {n}")
    s = n * (n - 1) // 2
    assert f"child {1000 * n + 101 * s}\n" in out and f"parent {101 * s} child status 0\n" in out
    assert hits(out) == sorted(f"hit {b + i} {100 * i}" for b in (0, 1000) for i in range(n))


@pytest.mark.parametrize("mode", ["auto", "trap"])
def test_handler_with_target_stack_nearly_exhausted(cache: Path, prog: Path, mode: str) -> None:
    """Less than 1 KiB left above the thread's guard page; the handler's context alone is
    ~9 KiB (traps: the signal stack)."""
    script = ('global h probe process("P").mark("deep") { h++; printf("%s %d\\n", "deep", $arg2) }'
              ' probe end { printf("hits=%d\\n", h) }')
    r = run_pydyn(cache, f"--probe-mode={mode}", "-e", script.replace("P", str(prog)),
                  "-c", f"{prog} deep 5")
    assert r.returncode == 0, r.stderr
    assert "deep done\n" in r.stdout and "hits=5\n" in r.stdout, r.stdout + r.stderr
    assert [ln for ln in r.stdout.splitlines() if re.fullmatch(r"deep \d+", ln)] == \
        [f"deep {i}" for i in range(5)]


def test_signal_handler_hits_during_hits(cache: Path, prog: Path) -> None:
    """SIGALRM every 20 us, its handler a probe site: many arrive while the thread is
    in a stub's first instructions or in a handler on the private stack (pd_sig_wrap)."""
    n = 100000
    bare = subprocess.run([str(prog), "nested", str(n)], capture_output=True, text=True,
                          check=True).stdout
    want_sum = re.search(r"nested sum (-?\d+)", bare)
    assert want_sum
    script = ('global t, s probe process("P").mark("tick") { t++; printf("%s\\n", "t") }'
              ' probe process("P").mark("sig") { s++ }'
              ' probe end { printf("t=%d s=%d\\n", t, s) }')
    r = run_pydyn(cache, "-e", script.replace("P", str(prog)), "-c", f"{prog} nested {n}")
    assert r.returncode == 0, r.stderr[-2000:]
    m = re.search(r"nested sum (-?\d+) signals (\d+)", r.stdout)
    c = re.search(r"t=(\d+) s=(\d+)", r.stdout)
    assert m and c, r.stdout[-500:]
    assert m.group(1) == want_sum.group(1)
    assert int(c.group(1)) == n and r.stdout.count("t\n") == n
    skipped = re.search(r"skipped probes: (\d+)", r.stderr)
    assert int(c.group(2)) + int(skipped.group(1) if skipped else 0) == int(m.group(2)), r.stderr


def test_threads_without_private_stack(cache: Path, prog: Path) -> None:
    """SIGEV_THREAD callbacks run in threads glibc creates itself: TOP is 0 there, and the
    stub uses the thread's own stack."""
    script = ('global h probe process("P").mark("timer") { h++; printf("%s %d\\n", "tm", $arg1) }'
              ' probe end { printf("hits=%d\\n", h) }')
    out = run(cache, prog, script, "timer 20")
    assert "timer done\n" in out and "hits=20\n" in out, out
    assert sorted(ln for ln in out.splitlines() if ln.startswith("tm ")) == \
        sorted(f"tm {i}" for i in range(20))


def test_program_signal_handlers_unchanged(cache: Path, prog: Path) -> None:
    """What the program installs (sigaction with SA_SIGINFO and a mask, signal()) is what
    it reads back and what runs, though the runtime wraps it (pd_pstack.c)."""
    bare = subprocess.run([str(prog), "sigact", "50"], capture_output=True, text=True)
    assert (bare.returncode, bare.stdout) == (0, "sigact ok 50 50\n"), bare.stdout
    out = run(cache, prog, GARBAGE, "sigact 50")
    assert "sigact ok 50 50\n" in out, out


@pytest.mark.parametrize("m32", [False, True], ids=["m64", "m32"])
@pytest.mark.parametrize("kind", ["fast", "slow"])
def test_registers_and_flags_kept(tmp_path: Path, cache: Path, m32: bool, kind: str) -> None:
    """gpr_keep.S: every general register and CF PF AF ZF SF OF survive a site whose
    stub switches stacks -- with a FAST handler (the short body, no pd_regs) and with
    one that reads $arg1 and calls libc (the full body)."""
    if not have_sdt_h():
        pytest.skip("no <sys/sdt.h> (systemtap-sdt-dev)")
    b = build_c([PROGS / "gpr_keep.S", PROGS / "gpr_keep_main.c"], tmp_path / "gk", m32=m32)
    handler = "n++" if kind == "fast" else 'printf("%s %d\\n", "a", $arg1)'
    script = f'global n probe process("P").mark("all") {{ {handler} }}'
    out = run(cache, b, script, "2000")
    assert "gpr bad 0 done 2000\n" in out, out[-300:]
    if kind == "slow":
        assert out.count("a ") == 2000


def test_handler_calls_probed_function(cache: Path, prog: Path) -> None:
    """pid() in the mark's handler calls getpid, whose entry is probed: that nested hit
    runs its stub on the private stack the outer one holds, and is skipped."""
    n = 500
    script = ('global t, g probe process("P").mark("tick") { t += pid() > 0 }'
              ' probe process("P").library("libc.so.6").function("getpid") { g++ }'
              ' probe end { printf("t=%d g=%d\\n", t, g) }')
    r = run_pydyn(cache, "-e", script.replace("P", str(prog)), "-c", f"{prog} getpid {n}")
    assert r.returncode == 0, r.stderr
    m = re.search(r"t=(\d+) g=(\d+)", r.stdout)
    assert f"getpid {n}\n" in r.stdout and m, r.stdout
    assert int(m.group(1)) == n and n <= int(m.group(2)) <= n + 2   # + the runtime's own
    assert f"skipped probes: {n}" in r.stderr, r.stderr
