"""Per-thread counter slots (runtime/pd_counter.c).

A scalar only ever updated by `x++` / `x += v` statements is a base int64 plus one
slot per thread; a thread adds to its own slot with a plain load and store (i386: of
the low half, or both halves inside the block's sequence word), and every read sums
base and slots.  Checked on real
processes: 8 threads of `n++` (FAST function entry and full mark handler) and
`t += $arg1` exact, m64 and m32; an m64 and an m32 process adding to the same counters
at once, and an m32 reader that sees the m64 threads' slots; a read in a handler while
threads add (monotonic, final exact); more than 64 threads (the rest add to the base);
slots given back and claimed again; a fork (the child must not keep its parent's
slot); pydyn-run NAME=VALUE's initial value plus adds; m64 and m32 threads making
adds that change the high half (an i386 thread's two stores inside its block's sequence
word) while a reader in each process checks they never go backwards; and, with
objdump, that the FAST handler for `n++` holds no lock prefix on x86-64 and i386.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from cbuild import PROGS, abi_binary, build_abis, have_sdt_h, run_module, run_pydyn
from test_fast_handlers import _functions

TIMEOUT = 120
PER = 20000
def script_text(nprogs: int) -> str:
    """The test script for one program (@1) or two (@1, @2: the other ABI)."""
    def points(point: str) -> str:
        return ", ".join(f"process(@{i + 1}).{point}" for i in range(nprogs))
    hit, fn, peek = points('mark("hit")'), points('function("hit_fn")'), points('mark("peek")')
    return ("global n, t, f, last, bad, reads\n"
            f"probe {hit} {{ n++; t += $arg1 }}\n"
            f"probe {fn} {{ f++ }}\n"
            f"probe {peek} {{ v = n; if (v < last) bad++; last = v; reads++ }}\n"
            'probe end { printf("n=%d t=%d f=%d bad=%d last=%d reads=%d\\n", '
            "n, t, f, bad, last, reads) }\n")


@pytest.fixture(scope="module")
def progs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    if not have_sdt_h():
        pytest.skip("no <sys/sdt.h> (systemtap-sdt-dev)")
    return build_abis(PROGS / "counter_threads.c", tmp_path_factory.mktemp("counters") / "ct")


def run(cache: Path, tmp: Path, a: Path, b: Path, cmd: str,
        *opts: str) -> tuple[dict[str, int], str]:
    """The script's values from `pydyn OPTS script @1 [@2] -c CMD`, and its stderr."""
    script = tmp / "counters.stp"
    script.write_text(script_text(1 if a == b else 2))
    paths = [str(a)] if a == b else [str(a), str(b)]
    r = run_pydyn(cache, *opts, str(script), *paths, "-c", cmd, timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr
    assert "-v" in opts or r.stderr == "", r.stderr
    m = re.search(r"^n=(\d+) t=(\d+) f=(\d+) bad=(\d+) last=(\d+) reads=(\d+)$", r.stdout, re.M)
    assert m, r.stdout
    names = ("n", "t", "f", "bad", "last", "reads")
    return dict(zip(names, map(int, m.groups()), strict=True)), r.stderr


def tri(per: int) -> int:
    return per * (per + 1) // 2


@pytest.mark.parametrize("abi", ["m64", "m32"])
@pytest.mark.parametrize("nthreads", [8, 70])
def test_threads_exact(progs: dict[str, Path], cache: Path, tmp_path: Path, abi: str,
                       nthreads: int) -> None:
    """8 threads, and 70 all alive at once: 64 slots, the other 6 add to the base."""
    b = abi_binary(progs, abi)
    per = PER if nthreads == 8 else 2000
    got, stderr = run(cache, tmp_path, b, b, f"{b} {nthreads} {per}", "-v")
    assert (got["n"], got["t"], got["f"]) == (nthreads * per, nthreads * tri(per),
                                             nthreads * per)
    fallbacks = re.search(r"(\d+) thread\(s\) found no free per-thread slot", stderr)
    # every thread claims a slot on its first handler (its busy word, pd_quiesce.c)
    assert (int(fallbacks.group(1)) if fallbacks else 0) == \
        (nthreads - 64 if nthreads > 64 else 0), stderr


def test_slots_given_back_and_reused(progs: dict[str, Path], cache: Path, tmp_path: Path) -> None:
    b = abi_binary(progs, "m64")
    got, stderr = run(cache, tmp_path, b, b, f"{b} 40 2000 waves", "-v")
    assert (got["n"], got["t"]) == (120 * 2000, 120 * tri(2000))
    assert "no free per-thread slot" not in stderr, stderr  # 120 threads, 40 at a time


@pytest.mark.parametrize("abi", ["m64", "m32"])
def test_read_while_adding(progs: dict[str, Path], cache: Path, tmp_path: Path, abi: str) -> None:
    b = abi_binary(progs, abi)
    got, _ = run(cache, tmp_path, b, b, f"{b} 8 {PER} read")
    assert got["n"] == got["last"] == 8 * PER and got["bad"] == 0, got
    assert got["reads"] > 1, got


@pytest.mark.parametrize("order", ["m64-m32", "m32-m64"])
def test_mixed_abis_add_to_the_same_counters(progs: dict[str, Path], cache: Path,
                                             tmp_path: Path, order: str) -> None:
    parent, child = (abi_binary(progs, abi) for abi in order.split("-"))
    got, _ = run(cache, tmp_path, parent, child, f"{parent} 8 {PER} exec {child}")
    assert (got["n"], got["t"], got["f"]) == (16 * PER, 16 * tri(PER), 16 * PER)


def test_m32_reader_sums_m64_slots(progs: dict[str, Path], cache: Path, tmp_path: Path) -> None:
    """The m32 child's last peek, after the m64 parent's threads: every add of both."""
    parent, child = abi_binary(progs, "m64"), abi_binary(progs, "m32")
    got, _ = run(cache, tmp_path, parent, child, f"{parent} 8 {PER} then {child}")
    assert got["last"] == got["n"] == 16 * PER and got["bad"] == 0, got


# Adds that change a value's high half on every hit (w: both halves; d: a borrow at the
# first hit), which an i386 thread writes as two stores inside its block's sequence word
# (pd_counter_wide), read by both ABIs while both add; the mark's handler is FAST, the
# function entry's (t += $arg1) is not.
WIDE = ("global n, w, d, t, bad, reads, ln, lw, ld\n"
        "probe process(@1).mark(\"hit\"), process(@2).mark(\"hit\") "
        "{ n++; w += 4294967297; d -= 3 }\n"
        "probe process(@1).function(\"hit_fn\"), process(@2).function(\"hit_fn\") "
        "{ t += $arg1 }\n"
        "probe process(@1).mark(\"peek\"), process(@2).mark(\"peek\") "
        "{ a = n; b = w; e = d; if (a < ln || b < lw || e > ld || b % 4294967297) bad++; "
        "ln = a; lw = b; ld = e; "
        "reads++ }\n"
        'probe end { printf("n=%d w=%d d=%d t=%d bad=%d reads=%d\\n", n, w, d, t, bad, reads) }\n')


@pytest.mark.parametrize("order", ["m64-m32", "m32-m64"])
def test_mixed_abis_wide_adds_read_monotonic(progs: dict[str, Path], cache: Path,
                                             tmp_path: Path, order: str) -> None:
    """8 m64 and 8 m32 threads add to the same counters while a reader in each process
    reads them in a handler: reads never go backwards, and w (adds of 2^32 + 1: equal
    halves) stays a multiple of 2^32 + 1, which a torn i386 value would not be; the
    totals are exact."""
    parent, child = (abi_binary(progs, abi) for abi in order.split("-"))
    script = tmp_path / "wide.stp"
    script.write_text(WIDE)
    r = run_pydyn(cache, str(script), str(parent), str(child), "-c",
                  f"{parent} 8 {PER} mixread {child}", timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr
    hits = 16 * PER
    m = re.search(r"^n=(-?\d+) w=(-?\d+) d=(-?\d+) t=(-?\d+) bad=(\d+) reads=(\d+)$",
                  r.stdout, re.M)
    assert m, r.stdout
    assert [int(x) for x in m.groups()[:5]] == [hits, hits * 4294967297, -3 * hits,
                                               16 * tri(PER), 0], r.stdout
    assert int(m.group(6)) > 2, r.stdout


def test_fork_child_takes_its_own_slot(progs: dict[str, Path], cache: Path,
                                       tmp_path: Path) -> None:
    """Parent and child main threads add 1,000,000 times each at the same time: with the
    parent's slot kept in the child, plain adds race and lose some (seen here every run)."""
    b = abi_binary(progs, "m64")
    per = 1_000_000
    got, _ = run(cache, tmp_path, b, b, f"{b} 1 {per} fork")
    # parent: per before the fork, then per on its worker and per on main; child: 2 per
    assert (got["n"], got["t"], got["f"]) == (5 * per, 5 * tri(per), 5 * per)


def test_initial_value_from_pydyn_run(progs: dict[str, Path], cache: Path,
                                      tmp_path: Path) -> None:
    b64, b32 = abi_binary(progs, "m64"), abi_binary(progs, "m32")
    script = tmp_path / "init.stp"
    script.write_text(script_text(2))
    r = run_pydyn(cache, "-p4", str(script), str(b64), str(b32), timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr
    m64, m32 = r.stdout.split()
    r = run_module(cache, m64, "--compat", m32, "-c", f"{b64} 8 1000 exec {b32}",
                   "n=1000000000000", "t=-5", timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr
    assert f"n={10**12 + 16000} t={16 * tri(1000) - 5} f=16000 " in r.stdout, r.stdout


@pytest.mark.parametrize("abi", ["m64", "m32"])
def test_fast_counter_has_no_lock_prefix(progs: dict[str, Path], cache: Path, abi: str) -> None:
    if shutil.which("objdump") is None:
        pytest.skip("no objdump (binutils)")
    b = abi_binary(progs, abi)
    r = run_pydyn(cache, "-p4", "-e", f'global n probe process("{b}").mark("hit") {{ n++ }} '
                  'probe end { printf("%d\\n", n) }', timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr
    mod = r.stdout.split()[abi == "m32"]
    fns = _functions(subprocess.run(["objdump", "-d", "--no-show-raw-insn", mod],
                                    capture_output=True, text=True, check=True).stdout)
    body = "\n".join(fns["probe_0"])
    assert "lock" not in body and "__atomic" not in body, body
    # the add itself: a load, an add and a store through the thread's block pointer (i386:
    # of the low half, a carry going to pd_counter_wide)
    r = "r" if abi == "m64" else "e"
    assert re.search(rf"mov\s+0x8\(%{r}\w+\),%{r}\w+\n.*add\s+\$0x1,%{r}\w+\n"
                     rf"(.*jb .*\n)?.*mov\s+%{r}\w+,0x8\(%{r}\w+\)", body), body
    # the claim and the slotless threads' atomic add are out of line
    assert "pd_counter_slow" in body, body
    assert abi == "m64" or "pd_counter_wide" in body, body


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_exit_report_sums_the_slots(progs: dict[str, Path], cache: Path, fmt: str) -> None:
    b = progs["m64"]
    r = run_pydyn(cache, *(["--json"] if fmt == "json" else []), "-e",
                  f'global n probe process("{b}").mark("hit") {{ n++ }}', "-c", f"{b} 8 1000",
                  timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr
    want = '{"type": "map", "data": {"name": "n", "key": [], "value": 8000}}' \
        if fmt == "json" else "n=8000"
    assert r.stdout.splitlines()[-1] == want, r.stdout
