"""aarch64 return probes and unwinding under qemu-user: C++ exceptions,
glibc's backtrace() and the script's ubacktrace()/print_ubacktrace() through frames
whose return address is hooked.

An aarch64 function saves x30 -- pd_ret_tramp once its return is probed, signed first
if it was built with -mbranch-protection=pac-ret -- wherever its prologue puts it; the
unwinder interposers (runtime/pd_unwind.c) have libgcc walk the stack and write the real
return addresses into those slots before an exception or backtrace walks it, and put
pd_ret_tramp back when a catch begins or the backtrace returns.  The programs are
cross-compiled with aarch64-linux-gnu-g++ at -O0 and -O2, unsigned, signed with the A
key and with the B key (qemu's default cpu really signs), and run with trampolines and
with --probe-mode=trap; their output must be what it is without pydyn and the probes'
counts, return values and skipped probes are checked exactly.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import test_aarch64
from cbuild import PROGS, run_pydyn
from test_aarch64 import MODES, build_a64_cxx, qemu_cmd
from test_aarch64 import pytestmark as pytestmark  # the same skips: cross gcc, qemu, sysroot
from test_func_stripped_dlopen_unwind import (
    BT_SCRIPT,
    EXC_END,
    EXC_PROBES,
    check_bt_session,
    skipped,
)

# name: compiler flags; "pac" builds sign their return addresses (paciasp / pacibsp)
FLAVOURS = {"O0": ("-O0",), "O2": ("-O2",),
            "pacO0": ("-O0", "-mbranch-protection=pac-ret"),
            "pacO2": ("-O2", "-mbranch-protection=pac-ret"),
            "bkeyO2": ("-O2", "-mbranch-protection=pac-ret+b-key")}
LINK = ("-rdynamic", "-ldl")     # func_exc.cc's backtrace check names frames by dladdr

a64dir = test_aarch64.a64dir


def build(a64dir: Path, src: str, flavour: str) -> Path:
    opt, *flags = FLAVOURS[flavour]
    return build_a64_cxx(a64dir, PROGS / src, f"{Path(src).stem}-{flavour}", opt=opt,
                         extra=(*flags, *LINK))


def bare(command: str) -> str:
    res = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return res.stdout


@pytest.fixture(scope="module")
def exc_builds(a64dir: Path) -> list[Path]:
    return [build(a64dir, "func_exc.cc", f) for f in FLAVOURS]


@pytest.fixture(scope="module")
def rec_builds(a64dir: Path) -> list[Path]:
    return [build(a64dir, "exc_rec.cc", f) for f in ("O0", "pacO2", "bkeyO2")]


def test_builds_sign_their_return_addresses(exc_builds: list[Path]) -> None:
    """The pac builds really sign (paciasp / pacibsp), the others do not."""
    for exe, flavour in zip(exc_builds, FLAVOURS, strict=True):
        text = subprocess.run(["aarch64-linux-gnu-objdump", "-d", str(exe)],
                              capture_output=True, text=True).stdout
        key = "pacibsp" if "bkey" in flavour else "paciasp"
        assert (key in text) == ("pac" in flavour or "bkey" in flavour), flavour


@pytest.mark.parametrize("mode", MODES)
def test_cxx_exception_through_return_probed_frames(exc_builds: list[Path], cache: Path,
                                                    mode: str) -> None:
    """outer -> middle (a cleanup) -> relay (catch, rethrow) -> thrower, which throws every
    third call: caught by outer, the program's results are the unprobed ones, the three
    unwound frames' return probes are skipped, and backtrace() called in bt_leaf, below
    four `.return`-probed bt_mid frames, names bt_leaf, bt_mid and main (bt=7)."""
    n = 30
    want = "total=590 cleanups=30 rethrows=10 bt=7"
    for exe in exc_builds:
        assert bare(qemu_cmd(exe, str(n))) == want + "\n"
    script = "global te, tr, rr, mr, orr, os, br, bs\n" + "".join(
        EXC_PROBES.format(exe=exe, k=k) for k, exe in enumerate(exc_builds))
    script += EXC_END.format(count=len(exc_builds))
    command = "; ".join(qemu_cmd(exe, str(n)) for exe in exc_builds)
    res = run_pydyn(cache, f"--probe-mode={mode}", "-e", script, "-c", command)
    assert res.returncode == 0, res.stderr
    out = res.stdout.splitlines()
    k = len(exc_builds)
    assert out[:k] == [want] * k, out
    throws = n // 3
    ok = n - throws
    # bt_mid(3) -> 4 bt_mid frames + bt_leaf: 5 returns, bt_leaf gives 7 each time
    assert out[k:] == [f"{i} te={n} tr={ok} rr={ok} mr={ok} or={n} os=590 br=5 bs=35"
                       for i in range(k)], out
    assert skipped(res.stderr) == 3 * throws * k, res.stderr


def rec_expect(iters: int, depth: int, at: int, threads: int = 1) -> tuple[int, int, int, int]:
    """exc_rec.cc's rec returns and their sum, the skipped ones, and catcher's sum."""
    if threads > 1:
        returns, rsum, lost, total = rec_expect(iters, depth, at)
        return returns * threads, rsum * threads, lost * threads, total * threads
    returns = rsum = lost = total = 0
    for n in range(iters):
        if n % 2 == 0:                     # no throw: rec(d) returns n + d
            returns += depth + 1
            rsum += sum(n + d for d in range(depth + 1))
            total += n + depth
        elif 0 <= at <= depth:             # rec(at) catches: the frames below it are skipped
            lost += at
            returns += depth - at + 1
            rsum += sum(n + 1000 + d - at for d in range(at, depth + 1))
            total += n + 1000 + depth - at
        else:                              # catcher catches
            lost += depth + 1
            total -= n
    return returns, rsum, lost, total


REC_RUNS = [(20, 12, 5), (4, 300, -1), (6, 40, 40), (40, 20, 8, 4)]   # the last: 4 threads
REC_PROBES = """probe process("{exe}").function("rec").return {{ rc[{k}]++; rs[{k}] += $return }}
probe process("{exe}").function("catcher") {{ ce[{k}]++ }}
probe process("{exe}").function("catcher").return {{ cc[{k}]++; cs[{k}] += $return }}
"""
REC_END = """probe end {{ for (k = 0; k < {count}; k++)
  printf("%d rc=%d rs=%d ce=%d cc=%d cs=%d\\n", k, rc[k], rs[k], ce[k], cc[k], cs[k]) }}
"""


@pytest.mark.parametrize("mode", MODES)
def test_exceptions_through_recursion(rec_builds: list[Path], cache: Path,
                                      mode: str) -> None:
    """Throws from the bottom of a recursion of `.return`-probed frames, 12 and 300 deep,
    caught in the middle of it (the frames above return through their probes again) or
    above it, also in 4 threads at once: exact return counts and values, the unwound
    frames counted as skipped."""
    runs = []   # (a copy of the program for each run: the probes count per copy, args)
    for exe in rec_builds:
        for i, r in enumerate(REC_RUNS):
            assert bare(qemu_cmd(exe, *map(str, r))) == f"total={rec_expect(*r)[3]}\n"
            copy = exe.with_name(f"{exe.name}-{i}")
            shutil.copy(exe, copy)
            runs.append((copy, r))
    script = "global rc, rs, ce, cc, cs\n" + "".join(
        REC_PROBES.format(exe=exe, k=k) for k, (exe, _) in enumerate(runs))
    script += REC_END.format(count=len(runs))
    command = "; ".join(qemu_cmd(exe, *map(str, r)) for exe, r in runs)
    res = run_pydyn(cache, f"--probe-mode={mode}", "-e", script, "-c", command)
    assert res.returncode == 0, res.stderr
    out = res.stdout.splitlines()
    totals = [f"total={rec_expect(*r)[3]}" for _, r in runs]
    assert out[:len(runs)] == totals, out
    want, lost = [], 0
    for k, (_, r) in enumerate(runs):
        returns, rsum, skip, total = rec_expect(*r)
        calls = r[0] * (r[3] if len(r) > 3 else 1)
        want.append(f"{k} rc={returns} rs={rsum} ce={calls} cc={calls} cs={total}")
        lost += skip
    assert out[len(runs):] == want, out
    assert skipped(res.stderr) == lost, res.stderr


BT_CASES = [("O0", "auto"), ("O2", "auto"), ("pacO2", "auto"), ("bkeyO2", "trap")]


@pytest.mark.parametrize("flavour, mode", BT_CASES, ids=[f"{f}-{m}" for f, m in BT_CASES])
def test_ubacktrace_through_hooked_frames(a64dir: Path, cache: Path, flavour: str,
                                          mode: str) -> None:
    """From bt_leaf's entry, called through four bt_mid frames whose return addresses
    are hooked (bt_mid.return): the walk reads each saved x30 where the CFI says it is,
    strips its signature, substitutes the real return address for pd_ret_tramp and
    names every frame as stap does: ` 0xADDR : NAME+0xOFF/0xSIZE [PATH]`."""
    exe = build(a64dir, "func_exc.cc", flavour)
    res = run_pydyn(cache, f"--probe-mode={mode}", "-e", BT_SCRIPT.format(exe=exe),
                    "-c", qemu_cmd(exe, "3"))
    # libc after main has no tables: printed, and the walk ends there
    assert len(check_bt_session(res, exe)) == 7
