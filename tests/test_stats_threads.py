"""Per-thread statistic slots (runtime/pd_pstat.c).

`s <<< v` on a scalar statistic writes the thread's own slot in the segment,
without the globals lock; reads merge the slots.  Merged results must equal a
single-threaded run exactly (8 threads; 70 threads, which overflow the 64
slots into the shared locked one), under trampolines and traps, m64 and m32;
and a handler doing only `<<<` and atomic counters must run while another
thread holds the globals lock.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cbuild import PROGS, abi_binary, build_abis, run_pydyn_clean

from pydyn.shmlayout.globals import PD_PSTAT_SLOTS as PSTAT_SLOTS
from pydyn.shmlayout.layout import HEADER

PER = 5000


def value(tid: int, i: int) -> int:
    """The C program's value(): C's % truncates toward zero, like math.fmod."""
    v = (i * 7919 + tid * 104729) % 200003 - 100000  # operands >= 0: same in C
    return v * 4000 if i % 97 == 0 else v


def c_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def script(binary: Path) -> str:
    return (f'global s, r, hits\n'
            f'probe process("{binary}").mark("hit") {{ s <<< $arg2; r <<< $arg1; hits++ }}\n'
            'probe end { printf("count=%d sum=%d min=%d max=%d avg=%d\\n", @count(s), '
            '@sum(s), @min(s), @max(s), @avg(s)); printf("hits=%d\\n", hits); '
            'print(@hist_log(s)) }\n')


@pytest.fixture(scope="module")
def binaries(tmp_path_factory: pytest.TempPathFactory, sdt_cflags: object) -> dict[str, Path]:
    return build_abis(PROGS / "pstat_threads.c", tmp_path_factory.mktemp("pstat") / "pstat")


def report(stdout: str) -> list[str]:
    """pydyn's own lines: everything but the program's."""
    return [ln for ln in stdout.splitlines() if "done" not in ln and "lock" not in ln
            and "fallbacks" not in ln]


@pytest.mark.parametrize("abi", ["m64", "m32"])
@pytest.mark.parametrize("nthreads", [8, 70])
def test_merged_stats_equal_a_single_thread(binaries: dict[str, Path], cache: Path,
                                            abi: str, nthreads: int) -> None:
    binary = abi_binary(binaries, abi)
    stp = script(binary)
    seq = report(run_pydyn_clean(cache, "-e", stp, "-c", f"{binary} {nthreads} {PER} seq").stdout)
    vals = [value(t, i) for t in range(nthreads) for i in range(PER)]
    n, total = len(vals), sum(vals)
    assert seq[0] == (f"count={n} sum={total} min={min(vals)} max={max(vals)} "
                      f"avg={c_div(total, n)}")
    assert seq[1] == f"hits={n}"
    ids = [t for t in range(nthreads) for _ in range(PER)]
    assert seq[-1] == (f"r @count={n} @min=0 @max={nthreads - 1} @sum={sum(ids)} "
                       f"@avg={sum(ids) // n}")
    # the @hist_log drawing: 0 and its log2 buckets up to the largest value
    assert any(ln.lstrip().startswith("0 |") for ln in seq)
    assert len(seq) > 10
    for mode in ("auto", "trap"):
        par = run_pydyn_clean(cache, f"--probe-mode={mode}", "-e", stp, "-c",
                              f"{binary} {nthreads} {PER} par")
        assert "par done" in par.stdout
        assert report(par.stdout) == seq, mode


@pytest.mark.parametrize("abi", ["m64", "m32"])
def test_stats_handler_takes_no_globals_lock(binaries: dict[str, Path], cache: Path,
                                             abi: str) -> None:
    binary = abi_binary(binaries, abi)
    offs = f'{HEADER.offset("globals_lock")} {HEADER.offset("stat_slot_fallbacks")}'
    nthreads = PSTAT_SLOTS + 2
    stp = script(binary)
    r = run_pydyn_clean(cache, "-v", "-e", stp, "-c", f"{binary} {nthreads} 2000 par {offs}")
    # every worker finished its hits while the main thread held the globals lock
    assert f"finished under the globals lock: {nthreads} of {nthreads}" in r.stdout
    # the main thread fired no probe, so 64 workers got slots and 2 used the shared one
    assert "slot fallbacks: 2" in r.stdout
    assert "2 thread(s) found no free per-thread slot (statistics shared the locked one" \
        in r.stderr
    assert f"hits={nthreads * 2000}" in r.stdout
    # the control: a handler that reads a statistic takes the lock, so it waits
    locked = stp.replace("hits++ }", "hits++; if (@count(s) < 0) hits++ }", 1)
    r = run_pydyn_clean(cache, "-e", locked, "-c", f"{binary} 4 20 par {offs} 1")
    assert "finished under the globals lock: 0 of 4" in r.stdout
    assert "hits=80" in r.stdout
