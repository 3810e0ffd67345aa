"""pydyn probe cost side by side with its peers: `python bench/run.py` (or `make bench`).

Builds bench/bench.c for m64 and m32 (`bench N` calls bench_fn N times: one USDT mark
per call, and a function to probe at entry and return) and times, on the same
binaries:

- count: a probe that counts hits of the mark -- bare (no tracer), pydyn with int3
  traps (--probe-mode=trap), pydyn with trampolines (the default), bpftrace, Frida
  and uftrace (bench/peers.py);
- stats and keyed stats: `s <<< $arg1` and `s[tid()] <<< $arg1` -- pydyn (per-thread
  slots) and pydyn-locked (the same statistic under the globals lock), bpftrace's
  `@s[tid] = stats(arg0)` for the keyed one;
- printf: a probe printing $arg1 on every hit -- pydyn into a file (-o), and the peers;
- function: an entry + return probe pair on bench_fn, counting; the same with the
  return probe reading $return; a latency statistic (`s <<< gettimeofday_ns() -
  @entry(gettimeofday_ns())` at the return; bpftrace: nsecs kept per tid).

Every number is the program's own ns per iteration (attach and start-up excluded), the
best of -r runs, and every run's hit count (or output line count) is checked against
N.  Printed: ns per hit, the cost over bare, and each tool's cost over pydyn's.  A peer
that cannot measure here prints why (`not measured (...)`); nothing is made up.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
M32 = ("-m32", "-idirafter", "/usr/include/x86_64-linux-gnu")
MARK = "pydyn_bench:hit"
COUNT = ('global n\nprobe process("{bin}").mark("hit") {{ n++ }}\n'
         'probe end {{ printf("count=%d\\n", n) }}\n')
PRINTF = 'probe process("{bin}").mark("hit") {{ printf("%d\\n", $arg1) }}\n'
STATS = ('global s\nprobe process("{bin}").mark("hit") {{ s <<< $arg1 }}\n'
         'probe end {{ printf("count=%d\\n", @count(s)) }}\n')
# The same statistic in one struct under the globals lock, as before per-thread slots
# (runtime/pd_pstat.c): a `delete` anywhere opts a statistic out of them.
STATS_LOCKED = STATS + 'probe never {{ delete s }}\n'
# A keyed statistic: the thread's own table (runtime/pd_kstat.c); `global s%` (drop the
# oldest entry when full) keeps the one table under the globals lock.
KSTATS = ('global s\nprobe process("{bin}").mark("hit") {{ s[tid()] <<< $arg1 }}\n'
          'probe end {{ foreach (t in s) printf("count=%d\\n", @count(s[t])) }}\n')
KSTATS_LOCKED = KSTATS.replace("global s", "global s%", 1)
PAIR = ('global c, r\nprobe process("{bin}").function("bench_fn").call {{ c++ }}\n'
        'probe process("{bin}").function("bench_fn").return {{ r++ }}\n'
        'probe end {{ printf("count=%d\\n", c == r ? c : -1) }}\n')
# The same pair, the return probe reading the function's value.
PAIR_RET = ('global c, r, t\nprobe process("{bin}").function("bench_fn").call {{ c++ }}\n'
            'probe process("{bin}").function("bench_fn").return {{ r++; t += $return }}\n'
            'probe end {{ printf("count=%d sum=%d\\n", c == r ? c : -1, t) }}\n')
# A latency statistic: each call's duration, taken at the return.
LATENCY = ('global s\nprobe process("{bin}").function("bench_fn").return {{\n'
           '  s <<< gettimeofday_ns() - @entry(gettimeofday_ns()) }}\n'
           'probe end {{ printf("count=%d\\n", @count(s)) }}\n')

try:
    import peers
except ImportError as exc:          # written by another change; until then, say so
    peers = None
    PEERS_MISSING = f"bench/peers.py not importable: {exc}"


class Failed(Exception):
    pass


def build(tmp: Path, abi: str, src: str = "bench.c") -> Path | None:
    """bench/SRC built for abi in tmp (bench/func_bench.py builds func_bench.c)."""
    out = tmp / f"{Path(src).stem}_{abi}"
    flags = M32 if abi == "m32" else ()
    r = subprocess.run(["gcc", *flags, "-O2", "-o", str(out), str(HERE / src)],
                       capture_output=True, text=True)
    return out if r.returncode == 0 else None


def ns_of(cmd: list[str], env: dict[str, str], n: int, out: Path | None = None) -> float:
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    m = re.search(r"ns_per_hit ([0-9.]+)", r.stdout)
    if r.returncode != 0 or not m:
        raise Failed(f"{' '.join(cmd)}: {(r.stderr or r.stdout).strip()[-300:]}")
    c = re.search(r"count=(-?\d+)", r.stdout)
    if c and int(c.group(1)) != n:
        raise Failed(f"counted {c.group(1)} of {n} hits: {' '.join(cmd)}")
    if out is not None:
        with out.open("rb") as f:
            lines = sum(1 for _ in f)
        if lines != n:
            raise Failed(f"{lines} of {n} printf lines in {out}: {' '.join(cmd)}")
    return float(m.group(1))


def best(fn: Callable[[], float], reps: int) -> float:
    return min(fn() for _ in range(reps))


def row(label: str, cells: list[tuple[str, float | str]], bare: float, ref: str) -> None:
    print(f"{label}:")
    ref_ns = next((v for k, v in cells if k == ref and isinstance(v, float)), None)
    for name, v in cells:
        if isinstance(v, str):
            print(f"  {name:12} not measured ({v})")
            continue
        over = v - bare
        ratio = "" if ref_ns is None or name in ("bare", ref) else \
            f"  {over / max(ref_ns - bare, 0.01):8.1f}x pydyn's cost"
        extra = "" if name == "bare" else f"  +{over:9.2f} over bare"
        print(f"  {name:12} {v:10.2f} ns/hit{extra}{ratio}")


def peer_cells(kind: str, binary: Path, what: str, n: int,
               reps: int) -> list[tuple[str, float | str]]:
    cells: list[tuple[str, float | str]] = []
    for tool in ("bpftrace", "frida", "uftrace"):
        if peers is None:
            cells.append((tool, PEERS_MISSING))
            continue
        fn = {"count": peers.usdt_count, "printf": peers.usdt_printf, "kstats": peers.usdt_kstats,
              "function": peers.function_pair, "return": peers.function_args,
              "latency": peers.function_latency}[kind]
        try:
            results = [fn(tool, binary, what, n) for _ in range(reps)]
        except peers.Unavailable as exc:
            cells.append((tool, str(exc)))
            continue
        lost = [r.lost for r in results if r.lost]
        if lost:
            cells.append((tool, f"lost {max(lost)} of {n} events"))
        else:
            cells.append((tool, float(min(results))))
    return cells


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=5_000_000, help="hits per trampoline run")
    ap.add_argument("--trap-n", type=int, default=200_000, help="hits per trap run")
    ap.add_argument("--printf-n", type=int, default=1_000_000, help="events per printf run")
    ap.add_argument("--peer-n", type=int, default=200_000, help="hits per peer run")
    ap.add_argument("-r", "--reps", type=int, default=3, help="runs per cell (best is kept)")
    opts = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="pydyn-bench-") as t:
        tmp = Path(t)
        env = dict(os.environ, PYDYN_CACHE_DIR=str(tmp / "cache"))
        pydyn = [sys.executable, "-m", "pydyn.launcher.cli"]

        def run_pydyn(script: str, binary: Path, n: int, *extra: str,
                      out: Path | None = None) -> float:
            path = tmp / "s.stp"
            path.write_text(script.format(bin=binary))
            o = ["-o", str(out)] if out else []
            return ns_of([*pydyn, *extra, *o, str(path), "-c", f"{binary} {n}"], env, n, out)

        def pydyn_cells(script: str, locked: str, binary: Path) -> list[tuple[str, float | str]]:
            """pydyn with `script`, and with `locked`: the same under the globals lock."""
            cells: list[tuple[str, float | str]] = []
            for name, sc in (("pydyn", script), ("pydyn-locked", locked)):
                try:
                    cells.append((name, best(lambda s=sc, b=binary: run_pydyn(s, b, opts.n),
                                             opts.reps)))
                except Failed as exc:
                    cells.append((name, str(exc)))
            return cells

        for abi in ("m64", "m32"):
            binary = build(tmp, abi)
            if binary is None:
                print(f"{abi}: cannot build bench.c (no -m32 toolchain?) - skipped")
                continue
            plan = subprocess.run([*pydyn, "-p2", "-e", COUNT.format(bin=binary)],
                                  capture_output=True, text=True, env=env).stdout
            tactic = re.search(r"plan: (\S+)", plan)
            print(f"== {abi} (site tactic: {tactic.group(1) if tactic else '?'})")
            bare = best(lambda b=binary: ns_of([str(b), str(opts.n)], env, opts.n), opts.reps)
            cells: list[tuple[str, float | str]] = [("bare", bare)]
            for name, extra, n in (("pydyn-trap", ["--probe-mode=trap"], opts.trap_n),
                                   ("pydyn", [], opts.n)):
                try:
                    cells.append((name, best(lambda e=extra, k=n, b=binary:
                                             run_pydyn(COUNT, b, k, *e), opts.reps)))
                except Failed as exc:
                    cells.append((name, str(exc)))
            cells += peer_cells("count", binary, MARK, opts.peer_n, opts.reps)
            row(f"count ({abi}, probe `n++`)", cells, bare, "pydyn")
            cells = [("bare", bare), *pydyn_cells(STATS, STATS_LOCKED, binary)]
            row(f"stats ({abi}, probe `s <<< $arg1`; locked: one shared struct)", cells, bare,
                "pydyn")
            cells = [("bare", bare), *pydyn_cells(KSTATS, KSTATS_LOCKED, binary)]
            cells += peer_cells("kstats", binary, MARK, opts.peer_n, opts.reps)
            row(f"keyed stats ({abi}, `s[tid()] <<< $arg1`; locked: `global s%`)", cells, bare,
                "pydyn")
            for kind, script, label in (
                    ("function", PAIR, "entry + return of bench_fn, counting"),
                    ("return", PAIR_RET, "entry + return of bench_fn, the return reads $return"),
                    ("latency", LATENCY, "a latency statistic at bench_fn's return")):
                try:
                    fv: float | str = best(lambda b=binary, sc=script: run_pydyn(sc, b, opts.n),
                                           opts.reps)
                except Failed as exc:
                    fv = str(exc)
                cells = [("bare", bare), ("pydyn", fv),
                         *peer_cells(kind, binary, "bench_fn", opts.peer_n, opts.reps)]
                row(f"{kind} ({abi}, {label})", cells, bare, "pydyn")
            if abi != "m64":
                continue
            out = tmp / "printf.out"
            try:
                pf: float | str = best(lambda b=binary, o=out: run_pydyn(
                    PRINTF, b, opts.printf_n, out=o), opts.reps)
            except Failed as exc:
                pf = str(exc)
            cells = [("bare", bare), ("pydyn", pf),
                     *peer_cells("printf", binary, MARK, opts.peer_n, opts.reps)]
            row(f"printf ({abi}, `printf(\"%d\\n\", $arg1)` into a file)", cells, bare, "pydyn")
            if isinstance(pf, float):
                print(f"  pydyn printf: {1e9 / pf / 1e6:.2f} million events/s, "
                      f"{opts.printf_n} of {opts.printf_n} lines in the file")
    return 0


if __name__ == "__main__":
    sys.exit(main())
