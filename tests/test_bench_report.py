"""bench/report.py turns the bench scripts' outputs into docs/performance.md's table."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

pytestmark = pytest.mark.unit

BENCH = Path(__file__).resolve().parent.parent / "bench"

RUN_OUT = """\
== m64 (site tactic: displace)
count (m64, probe `n++`):
  bare               1.96 ns/hit
  pydyn-trap      4965.27 ns/hit  +  4963.31 over bare     880.0x pydyn's cost
  pydyn              7.60 ns/hit  +     5.64 over bare
  bpftrace        2751.62 ns/hit  +  2749.66 over bare     487.5x pydyn's cost
  frida           2220.25 ns/hit  +  2218.29 over bare     393.3x pydyn's cost
  uftrace      not measured (lost 49996 of 50000 events)
return (m64, entry + return of bench_fn, the return reads $return):
  bare               1.96 ns/hit
  pydyn             31.59 ns/hit  +    29.63 over bare
  bpftrace      13613.25 ns/hit  +13611.29 over bare     459.4x pydyn's cost
  frida        not measured (frida: not compared for pair_ret)
  uftrace         1080.84 ns/hit  +  1078.88 over bare      36.4x pydyn's cost
printf (m64, `printf("%d\\n", $arg1)` into a file):
  bare               1.96 ns/hit
  pydyn            101.73 ns/hit  +    99.77 over bare
  bpftrace       11513.04 ns/hit  + 11511.08 over bare     115.4x pydyn's cost
  pydyn printf: 9.83 million events/s, 100000 of 100000 lines in the file
== m32 (site tactic: displace)
count (m32, probe `n++`):
  bare               2.11 ns/hit
  pydyn             11.10 ns/hit  +     8.99 over bare
  bpftrace        4014.53 ns/hit  +  4012.42 over bare     446.3x pydyn's cost
"""

FUNC_OUT = """\
abi   case     ns/call  over bare  instr/call
m64   bare        1.50
m64   entry      12.00      +10.5
m64   pair       20.00      +18.5
m32   pair       25.00      +23.0
"""

STARTUP_OUT = """\
startup, wall ms (median of 3; fresh cells 1); a run = 1000 hits of one USDT mark
                         median      min  over bare  x bpftrace   cpu ms
bare                        2.8      2.5       +0.0        0.01      1.0
python -c pass             22.5     21.0      +19.7        0.06     20.0
pydyn warm                 93.1     90.0      +90.3        0.23     80.0
pydyn cold                489.0    480.0     +486.2        1.21    400.0
bpftrace                  404.0    400.0     +401.2        1.00        -
pydyn fresh              4300.0   4300.0    +4297.2       10.64   4000.0
load average 5.0 on 2 CPU(s) while measuring
"""

COLD_OUT = """\
new script, -p4: wall s, CPU s (pydyn and its compilers) and peak RSS MB (median of 1)
                   first s   cpu   MB after s   cpu   MB bpftrace s  goals (wall)
postgres mark         1.92  0.49   43    1.42  0.39   43     0.52  NOT met (first <= 1.0 s, \
<= 150 MB; after <= 0.5 s)
libjvm mark        unavailable: /usr/lib/jvm/libjvm.so is not installed
5000 probe points -p3: resolve+translate 2.92 s, whole run 4.97 s (cpu 1.57 s)  goal: met
one probe of 2,048 statements -p4: 31.10 s (cpu 9.32 s, m64 and m32 compiled in parallel)
"""

PGBENCH_OUT = """\
pgbench ratio pydyn: 0.962 (median of 5; rounds 0.95 0.96 0.962 0.97 0.98); tps x
pgbench CPU per transaction pydyn: 1.020 (median of 5; quartiles 1.01-1.03; rounds x) of y
pgbench ratio bpftrace: unavailable: bpftrace did not attach: ERROR: no BTF
pgbench side-by-side ratio pydyn: 0.975 (median of 5; rounds 0.97 0.98 0.975 0.96 0.99)
pgbench profile pydyn: pydyn 1.74% of the server's CPU samples (module 1.07%, trampolines 0.67%)
load average 3.0 at the start, 4.0 at the end, 2 CPU(s)
"""

DWARF_OUT = """\
debug file /usr/lib/debug/.build-id/ab/cdef.debug: found in 0.004 s
open (sections decompressed, DWARF set up): 0.470 s
fopen: 0.090 s  (filename:const char * mode:const char *)
total from the start: 0.320 s
"""


@pytest.fixture(scope="module")
def report() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_report", BENCH / "report.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_report"] = mod      # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def _page(report: ModuleType, failed: str = "") -> str:
    outs = {"run": RUN_OUT, "func_bench": FUNC_OUT, "startup": STARTUP_OUT,
            "coldstart": COLD_OUT, "pgbench": PGBENCH_OUT, "dwarf_read": DWARF_OUT}
    steps = report.steps()
    for s in steps:
        s.out = outs[s.name]
        s.load = (4.5, 5.5)
        if s.name == "startup":
            s.failed = failed
    return str(report.render(steps, False, "python bench/report.py", "2026-12-02 16:00 UTC",
                             "Some CPU, 2 CPU(s)", (4.5, 5.5)))


def _rows(page: str) -> dict[str, list[str]]:
    rows = [[c.strip() for c in ln[1:-1].split(" | ")] for ln in page.splitlines()
            if ln.startswith("| ")]
    assert rows[0] == ["what", "pydyn", "bpftrace", "Frida", "uftrace", "script, load"]
    assert all(len(r) == 6 for r in rows), [r for r in rows if len(r) != 6]
    return {r[0]: r[1:] for r in rows[1:]}


def test_one_table_with_command_machine_load_and_date(report: ModuleType) -> None:
    page = _page(report)
    assert "- command: `python bench/report.py`" in page
    assert "- machine: Some CPU, 2 CPU(s)" in page
    assert "2026-12-02 16:00 UTC; load average 4.5 at the start, 5.5 at the end" in page
    assert sum(1 for ln in page.splitlines() if ln.startswith("|---")) == 1
    assert "`bench/run.py -r 3`, `bench/func_bench.py -r 5`" in page


def test_probe_costs_with_peers_beside_them(report: ModuleType) -> None:
    rows = _rows(_page(report))
    count64 = rows["counting a USDT mark, `n++` (x86-64), over bare 2.0 ns"]
    assert count64[:3] == ["+5.6 ns", "+2,749.7 ns (488x)", "+2,218.3 ns (393x)"]
    assert count64[3] == "not measured: lost 49996 of 50000 events"
    assert count64[4] == "run.py, load 4.5-5.5"
    count32 = rows["counting a USDT mark, `n++` (i386), over bare 2.1 ns"]
    assert count32[:2] == ["+9.0 ns", "+4,012.4 ns (446x)"]
    ret = rows["entry + return pair, the return reading `$return` (x86-64), over bare 2.0 ns"]
    assert ret[0] == "+29.6 ns" and ret[3] == "+1,078.9 ns (36x)"
    assert rows["the same through an int3 trap (`--probe-mode=trap`, x86-64)"][0] == \
        "+4,963.3 ns"
    printf = next(v for k, v in rows.items() if k.startswith("`printf("))
    assert printf[:2] == ["9.83 M/s", "0.09 M/s"]


def test_func_bench_startup_coldstart_and_pgbench_rows(report: ModuleType) -> None:
    rows = _rows(_page(report))
    assert rows["func_bench: entry + return pair, `n++` each (i386)"][0] == "+23.0 ns"
    warm = rows["start-up, the script seen before (module cache hit); wall, median"]
    assert warm[:2] == ["93 ms (80 ms CPU)", "404 ms"]
    first = rows['a new script on postgres `mark("transaction__start")`, `-p4`, first time '
                 'the binary is seen']
    assert first[:2] == ["1.92 s (0.49 s CPU, 43 MB)", "0.52 s to attach"]
    assert rows['a new script on libjvm `mark("thread__start")`'][0].startswith(
        "not measured: /usr/lib/jvm/libjvm.so is not installed")
    assert rows["5,000 probe points on postgres: resolve + translate"][0] == \
        "2.92 s (whole run 4.97 s, 1.57 s CPU)"
    assert next(v for k, v in rows.items() if k.startswith("map_hash"))[0] == \
        "9.32 s CPU".join(["31.10 s (", ")"])
    pg = next(v for k, v in rows.items() if k.startswith("PostgreSQL 15 pgbench"))
    assert pg[0] == ("0.962 (server CPU per transaction x1.020); side by side with an "
                     "untraced copy: 0.975; pydyn's code 1.74% of the server's CPU (perf)")
    assert pg[1] == "not measured: bpftrace did not attach: ERROR: no BTF"
    assert rows["DWARF of libc's debug file: then the parameters of `fopen` (its unit only)"][0] \
        == "0.090 s"


def test_a_failed_script_leaves_its_row_saying_so(report: ModuleType) -> None:
    rows = _rows(_page(report, failed="no result within 1800 s"))
    assert rows["start-up (bench/startup.py)"][0] == "not measured: no result within 1800 s"
    assert not any(k.startswith("start-up, ") for k in rows)
