"""The FAST path of a latency statistic: statistic adds and clock reads compiled into the
handler (runtime/pd_fast.h) and `@entry` frames pushed and popped by the stack pointer
alone (PD_PROBE_SP: stubs that pass sp, not a whole register context).

Checked on real processes, m64 and m32: a FAST statistic (log and linear histograms,
with and without @variance) gives exactly what the same statistic gives through the
ordinary path and under the globals lock, value for value; return probes whose only
register is sp are PD_PROBE_SP and count every call exactly -- the small functions of
tests/progs/fast_args.c, called from recursion, frames longjmp leaves, signal handlers
and threads -- with their exits patched and through the return-address hijack alike,
and a thread's latencies are never negative.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from cbuild import PROGS, build_c, have_sdt_h, run_pydyn

N, THREADS = 1000, 4

# One value, three statistics of each kind: FAST (f*), the ordinary path (g*: an `if`
# makes the handler ordinary) and under the globals lock (l*: a `delete` somewhere takes
# a statistic out of the per-thread slots).  Negative, zero and 2^51-sized values.
VALUE = "($arg1 - 500) * ($arg2 << ($arg1 & 31))"
LINEAR = "($arg1 - 500) * 3"
STATS = """global fa, fb, fc, ga, gb, gc, la, lb, lc
probe process("{b}").mark("hit") {{ fa <<< {v}; fb <<< {lin}; fc <<< {v} }}
probe process("{b}").mark("hit") {{ if ($arg1 >= 0) {{ ga <<< {v}; gb <<< {lin}; gc <<< {v} }} }}
probe process("{b}").mark("hit") {{ la <<< {v}; lb <<< {lin}; lc <<< {v} }}
probe never {{ delete la; delete lb; delete lc }}
probe end {{
{ends}
}}
"""
FAMILY = """  printf("== {k}\\n%d %d %d %d %d %d\\n", @count({k}a), @sum({k}a), @min({k}a),
         @max({k}a), @avg({k}a), @variance({k}a))
  print(@hist_log({k}a))
  printf("%d %d %d\\n", @count({k}b), @sum({k}b), @avg({k}b))
  print(@hist_linear({k}b, -1000, 1000, 100))
  printf("%d %d %d %d\\n", @count({k}c), @sum({k}c), @min({k}c), @max({k}c))
  print(@hist_log({k}c))"""

# Return probes whose one register is sp: the latency statistics, and @entry values of
# constants whose sums are exact.
LATENCY = """global lt, kt, li, ki
probe process("{b}").function("tiny").return {{
  lt <<< local_clock_ns() - @entry(local_clock_ns()); kt <<< 5 - @entry(2) }}
probe process("{b}").function("ident").return {{
  li <<< gettimeofday_ns() - @entry(gettimeofday_ns()); ki <<< @entry(1 << 40) - 7 }}
probe end {{
  printf("tiny %d %d %d %d\\n", @count(lt), @min(lt) >= 0, @count(kt), @sum(kt))
  printf("ident %d %d %d\\n", @count(li), @count(ki), @sum(ki))
  print(@hist_log(lt))
}}
"""


@pytest.fixture(scope="module")
def progs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    if not have_sdt_h():
        pytest.skip("no <sys/sdt.h> (systemtap-sdt-dev)")
    d = tmp_path_factory.mktemp("fast_latency")
    return {abi: build_c(PROGS / "fast_args.c", d / f"fast_args_{abi}", m32=abi == "m32",
                         extra=("-g", "-pthread"))
            for abi in ("m64", "m32")}


def _rows(p3: str) -> dict[str, int]:
    """pd_probes' locks by handler name, from -p3's table."""
    return {name: int(locks) for locks, name in
            re.findall(r"\{PD_PROBE_MARK, (\d+), (probe_\d+(?:_entry)?),", p3)}


@pytest.mark.parametrize("abi", ["m64", "m32"])
def test_fast_statistics_match_the_ordinary_path(progs: dict[str, Path], cache: Path,
                                                 abi: str) -> None:
    b = progs[abi]
    script = STATS.format(b=b, v=VALUE, lin=LINEAR,
                          ends="\n".join(FAMILY.format(k=k) for k in "fgl"))
    p3 = run_pydyn(cache, "-p3", "-e", script)
    assert p3.returncode == 0, p3.stderr
    # FAST and reading $argN; the others ordinary (the last with one locked statistic)
    rows = _rows(p3.stdout)
    assert rows["probe_0"] == 6 and not rows["probe_1"] & 2 and rows["probe_2"] == 1, rows
    assert "pd_fast_pstat_add(c, " in p3.stdout.split("probe_0(struct pd_ctx *c)")[1], p3.stdout
    r = run_pydyn(cache, "-e", script, "-c", f"{b} {N} {THREADS}")
    assert r.returncode == 0, r.stderr
    blocks = dict(re.findall(r"^== (\w)\n(.*?)(?=^== |\Z)", r.stdout, re.M | re.S))
    assert set(blocks) == {"f", "g", "l"}, r.stdout
    assert blocks["f"] == blocks["g"] == blocks["l"], r.stdout
    count = int(blocks["f"].split()[0])
    assert count == N, r.stdout
    assert blocks["f"].count("@") > 20, r.stdout    # both histograms drawn


def _own(prog: Path) -> dict[str, list[int]]:
    return {ln.split()[0]: [int(x) for x in ln.split()[1:]] for ln in subprocess.run(
        [str(prog), str(N), str(THREADS)], capture_output=True, text=True,
        check=True).stdout.splitlines()}


@pytest.mark.parametrize("how", ["exits", "hijack"])
@pytest.mark.parametrize("abi", ["m64", "m32"])
def test_sp_only_return_probes_exact(progs: dict[str, Path], cache: Path, abi: str,
                                     how: str) -> None:
    b = progs[abi]
    own = _own(b)
    tiny, ident = own["tiny"][0], own["ident"][0]
    script = LATENCY.format(b=b)
    forced = ["-D", "PD_RETURN_HIJACK=1"] if how == "hijack" else []
    p3 = run_pydyn(cache, *forced, "-p3", "-e", script)
    assert p3.returncode == 0, p3.stderr
    # the return probes and their hidden entry handlers: FAST, REGS and SP (2 | 4 | 8)
    assert _rows(p3.stdout) == {"probe_0": 14, "probe_0_entry": 14, "probe_1": 14,
                                "probe_1_entry": 14}, p3.stdout
    r = run_pydyn(cache, *forced, "-v", "-e", script, "-c", f"{b} {N} {THREADS}")
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    assert f"tiny {tiny} 1 {tiny} {3 * tiny}" in out, (own, r.stdout)
    assert f"ident {ident} {ident} {((1 << 40) - 7) * ident}" in out, (own, r.stdout)
    assert "skipped" not in r.stderr and "ERROR" not in r.stderr, r.stderr
    how_ret = dict(re.findall(r"returns of (\w+)@0x[0-9a-f]+: (\w+)", r.stderr))
    assert how_ret == {"tiny": how, "ident": how}, r.stderr
