"""Keyed statistics with per-thread tables (runtime/pd_kstat.c).

`s[k] <<< v` adds to the thread's own table in the segment under that slot's lock
word, not the globals lock; `@count(s[k])` ..., `foreach`, the exit report merge
the slots; `delete` clears them all.  Every expected value is computed here from
the programs' own value sequence (tests/progs/kstat_threads.c, pstat_threads.c):
8 and 70 threads (70 overflow the per-thread slots into the shared locked one),
m64 and m32, a session where an m64 and an m32 process fill the same keys, a
delete between two rounds, sorted and nested foreach, the exit report, a full
table, and a handler that finishes while another thread holds the globals lock.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import pytest
from cbuild import (
    ERRORS_RUN_ON,
    PROGS,
    build_c,
    have_cc,
    have_m32,
    have_sdt_h,
    run_pydyn_clean,
)
from histdraw import draw_linear, draw_log
from test_stats_threads import value

from pydyn.launcher.stats import (
    HIST_LOG_BUCKETS,
    StatValue,
    hist_linear_bucket,
    hist_linear_buckets,
    hist_log_bucket,
    summarize,
)
from pydyn.shmlayout.globals import PD_PSTAT_SLOTS as PSTAT_SLOTS
from pydyn.shmlayout.layout import HEADER

pytestmark = pytest.mark.skipif(not (have_cc() and have_sdt_h()),
                                reason="needs gcc and <sys/sdt.h>")
LINE = ('printf("%s %d: %d %d %d %d %d %d\\n", e, k, @count(s[e, k]), @sum(s[e, k]), '
        '@min(s[e, k]), @max(s[e, k]), @avg(s[e, k]), @variance(s[e, k]))')


@pytest.fixture(scope="module")
def progs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("kstat")
    out = {}
    for abi in ("m64", "m32"):
        if abi == "m32" and not have_m32():
            continue
        for name in ("kstat", "pstat"):
            out[f"{name}{abi[1:]}"] = build_c(PROGS / f"{name}_threads.c", tmp / f"{name}{abi[1:]}",
                                              m32=abi == "m32", extra=("-pthread",))
    return out


def prog(progs: dict[str, Path], name: str) -> Path:
    if name not in progs:
        pytest.skip("no -m32 toolchain (gcc -m32 / gcc-multilib missing)")
    return progs[name]


class Expected:
    """The statistics of each key: one StatValue per writing thread (its slot), merged
    the way _stp_stat_get merges per-CPU copies, plus the log histogram."""

    def __init__(self) -> None:
        self.parts: dict[object, dict[object, StatValue]] = defaultdict(dict)
        self.hist: dict[object, list[int]] = defaultdict(lambda: [0] * HIST_LOG_BUCKETS)

    def add(self, key: object, writer: object, v: int) -> None:
        self.parts[key].setdefault(writer, StatValue()).add(v)
        self.hist[key][hist_log_bucket(v)] += 1

    def line(self, key: tuple[str, int], variance: bool = True) -> str:
        s = summarize(list(self.parts[key].values()))
        var = f" {s.variance}" if variance else ""
        return f"{key[0]} {key[1]}: {s.count} {s.sum} {s.min} {s.max} {s.avg}{var}"


def rounds(nthreads: int, per: int, key: object, expected: Expected, *,
           writer: str = "", keep: object = None) -> None:
    """kstat_threads' hits into `expected` (`keep(t, i)`: the script's condition)."""
    for t in range(nthreads):
        for i in range(2 * per):
            if keep is None or keep(t, i):
                expected.add(key(t, i), (writer, t), value(t, i))


def report(stdout: str) -> list[str]:
    return [ln for ln in stdout.splitlines() if "done" not in ln]


@pytest.mark.parametrize("abi", ["m64", "m32"])
@pytest.mark.parametrize("nthreads,per", [(8, 3000), (70, 300)])
def test_keyed_stats_merge_exactly(progs: dict[str, Path], cache: Path, abi: str,
                                   nthreads: int, per: int) -> None:
    binary = prog(progs, f"kstat{abi[1:]}")
    name = binary.name
    # i % 4 <= key: the keys get different counts, so sorting by @count means something
    # `s[100]`: small tables, so all 64 per-thread slots fit the budget
    stp = (f'global s[100]\nprobe process("{binary}").mark("hit") {{ '
           f'if ($arg2 % 4 <= $arg1 % 4) s[execname(), $arg1 % 4] <<< $arg3 }}\n'
           f'probe end {{ foreach ([e, k+] in s) {LINE}\n'
           f'  foreach ([e, k] in s- limit 3) printf("by count %d\\n", k)\n'
           f'  foreach ([e, k] in s @min+) printf("by min %d\\n", k)\n'
           f'  print(@hist_log(s["{name}", 1])) }}\n')
    r = run_pydyn_clean(cache, "-e", stp, "-c", f"{binary} {nthreads} {per}")
    exp = Expected()
    rounds(nthreads, per, lambda t, i: (name, t % 4), exp, keep=lambda t, i: i % 4 <= t % 4)
    # slot 0 interleaves the threads beyond the slots: @variance is exact only without it
    own_slots = nthreads <= PSTAT_SLOTS
    got = report(r.stdout)
    keys = [(name, k) for k in range(4)]
    assert [re.sub(r" -?\d+$", "", ln) if not own_slots else ln for ln in got[:4]] == \
        [exp.line(k, own_slots) for k in keys]
    counts = {k: sum(p.count for p in exp.parts[k].values()) for k in keys}
    assert got[4:7] == [f"by count {k[1]}" for k in sorted(keys, key=lambda k: -counts[k])[:3]]
    mins = {k: min(p.min for p in exp.parts[k].values()) for k in keys}
    assert got[7:11] == [f"by min {k[1]}" for k in sorted(keys, key=lambda k: mins[k])]
    assert "\n".join(got[11:]) + "\n" == draw_log(exp.hist[(name, 1)])


def test_m64_and_m32_processes_fill_the_same_keys(progs: dict[str, Path], cache: Path) -> None:
    b64, b32 = prog(progs, "kstat64"), prog(progs, "kstat32")
    per = 2000
    lin = "-100000, 100000, 25000"
    stp = (f'global s[100], h\nprobe process("{b64}").mark("hit"), process("{b32}").mark("hit") '
           f'{{ s["k", $arg1 % 4] <<< $arg3; h[$arg1 % 2] <<< $arg3 }}\n'
           f'probe end {{ foreach ([e, k+] in s) {LINE}\n  print(@hist_log(s["k", 3]))\n'
           f'  print(@hist_linear(h[1], {lin})) }}\n')
    r = run_pydyn_clean(cache, "-e", stp, "-c", f"sh -c '{b64} 8 {per} & {b32} 8 {per}; wait'")
    assert r.stdout.count("kstat done") == 2
    exp = Expected()
    for writer in ("m64", "m32"):
        rounds(8, per, lambda t, i: ("k", t % 4), exp, writer=writer)
    got = report(r.stdout)
    # a thread of one process may continue the slot of an exited thread of the other:
    # @variance then depends on that timing, the rest does not
    assert [re.sub(r" -?\d+$", "", ln) for ln in got[:4]] == \
        [exp.line(("k", k), variance=False) for k in range(4)]
    text = "\n".join(got[4:]) + "\n"
    log = draw_log(exp.hist[("k", 3)])
    assert text.startswith(log)
    lo, hi, step = -100000, 100000, 25000
    buckets = [0] * hist_linear_buckets(lo, hi, step)
    for t in range(1, 8, 2):
        for i in range(2 * per):
            buckets[hist_linear_bucket(value(t, i), lo, hi, step)] += 2  # both processes
    assert text[len(log):] == draw_linear(buckets, lo, hi, step)


@pytest.mark.parametrize("abi", ["m64", "m32"])
@pytest.mark.parametrize("delete", ["delete s[2]", "delete s", "delete s[*]"])
def test_delete_between_rounds_clears_every_slot(progs: dict[str, Path], cache: Path, abi: str,
                                                 delete: str) -> None:
    binary = prog(progs, f"kstat{abi[1:]}")
    per = 1000
    stp = (f'global s\nprobe process("{binary}").mark("hit") {{ s[$arg1 % 4] <<< $arg3 }}\n'
           f'probe process("{binary}").mark("phase") {{ printf("before %d\\n", @count(s[2]))\n'
           f'  {delete}\n  printf("in %d %d\\n", [2] in s, [1] in s) }}\n'
           'probe end { foreach ([k+] in s) printf("%d: %d %d %d %d\\n", k, @count(s[k]), '
           '@sum(s[k]), @min(s[k]), @max(s[k])) }\n')
    r = run_pydyn_clean(cache, "-e", stp, "-c", f"{binary} 8 {per}")
    all_keys = delete != "delete s[2]"
    exp = Expected()
    rounds(8, per, lambda t, i: t % 4, exp,
           keep=lambda t, i: i >= per or (t % 4 != 2 and not all_keys))
    got = report(r.stdout)
    assert got[:2] == [f"before {2 * per}", f"in 0 {0 if all_keys else 1}"]
    lines = []
    for k in range(4):
        parts = list(exp.parts[k].values())
        lines.append(f"{k}: {sum(p.count for p in parts)} {sum(p.sum for p in parts)} "
                     f"{min(p.min for p in parts)} {max(p.max for p in parts)}")
    assert got[2:] == lines


# (`++`: a keyed counter, tests/test_counters_keyed.py, whose tables are the same)
@pytest.mark.parametrize("update", ["<<< $arg3", "++"])
def test_full_table_is_an_error_per_hit(progs: dict[str, Path], cache: Path,
                                        update: str) -> None:
    binary = prog(progs, "kstat64")
    per = 100
    # 20 keys a thread into tables of 16: keys 16..19 fail on every hit, in each slot;
    # 8 x 16 keys do not fit the merged map of 16 either (stap: aggregation overflow)
    stp = (f'global s[16]\nprobe process("{binary}").mark("hit") '
           f'{{ s[$arg1, $arg2 % 20] {update} }}\n'
           'probe end { n = 0; foreach ([t, k] in s) n++; printf("merged %d\\n", n) }\n')
    r = run_pydyn_clean(cache, *ERRORS_RUN_ON, "-e", stp, "-c", f"{binary} 8 {per}", rc=1)
    fails = 8 * 2 * per * 4 // 20
    assert r.stderr.count("ERROR: Array overflow, check size limit (16)") == fails
    assert r.stderr.count("ERROR: aggregation overflow in s (16 entries)") == 1
    assert f"WARNING: Number of errors: {fails + 1}" in r.stderr
    assert "merged" not in r.stdout   # the foreach is not run on a partial merge


@pytest.mark.parametrize("abi", ["m64", "m32"])
@pytest.mark.parametrize("update,count", [("<<< $arg2", "@count(s[{}])"),
                                          ("++", "s[{}]")])   # a keyed counter
def test_keyed_stats_handler_takes_no_globals_lock(progs: dict[str, Path], cache: Path,
                                                   abi: str, update: str, count: str) -> None:
    binary = prog(progs, f"pstat{abi[1:]}")
    offs = f'{HEADER.offset("globals_lock")} {HEADER.offset("stat_slot_fallbacks")}'
    nthreads = PSTAT_SLOTS + 2
    stp = (f'global s, hits\nprobe process("{binary}").mark("hit") '
           f'{{ s[$arg1 % 3, "x"] {update}; hits++ }}\n'
           f'probe end {{ foreach ([k+, x] in s) printf("%d %d\\n", k, {count.format("k, x")}); '
           'printf("hits=%d\\n", hits) }\n')
    r = run_pydyn_clean(cache, "-e", stp, "-c", f"{binary} {nthreads} 2000 par {offs}")
    # every worker finished while the main thread held the globals lock; 2 of them
    # shared slot 0 and its lock
    assert f"finished under the globals lock: {nthreads} of {nthreads}" in r.stdout
    assert "slot fallbacks: 2" in r.stdout
    counts = [sum(1 for t in range(nthreads) if t % 3 == k) * 2000 for k in range(3)]
    assert [ln for ln in r.stdout.splitlines() if re.fullmatch(r"\d \d+", ln)] == \
        [f"{k} {n}" for k, n in enumerate(counts)]
    assert f"hits={nthreads * 2000}" in r.stdout
    # the control: reading a keyed statistic in the handler takes the lock, so it waits
    key = '$arg1 % 3, "x"'
    locked = stp.replace("hits++ }", f"hits++; if ({count.format(key)} < 0) hits++ }}", 1)
    r = run_pydyn_clean(cache, "-e", locked, "-c", f"{binary} 4 20 par {offs} 1")
    assert "finished under the globals lock: 0 of 4" in r.stdout
    assert "hits=80" in r.stdout


def test_nested_foreach_and_exit_report(cache: Path) -> None:
    # the inner foreach must not rebuild the merged map the outer one is walking; the
    # exit report (t is never read) merges before it prints
    stp = ('global s, t\nprobe begin { s[1] <<< 1; s[2] <<< 2; s[2] <<< 3; t["a", 7] <<< 5\n'
           '  t["a", 7] <<< -1; t["b", 1] <<< 4\n'
           '  foreach (a+ in s) foreach (b+ in s) printf("%d %d %d\\n", a, b, @sum(s[b])) }\n')
    r = run_pydyn_clean(cache, "-e", stp)
    assert r.stdout.splitlines() == ["1 1 1", "1 2 5", "2 1 1", "2 2 5",
                                     't["a",7] @count=2 @min=-1 @max=5 @sum=4 @avg=2',
                                     't["b",1] @count=1 @min=4 @max=4 @sum=4 @avg=4']
