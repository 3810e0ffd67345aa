"""pydyn function-probe cost: `python bench/func_bench.py`.

Builds bench/func_bench.c (m64, m32) and times N calls of its bench_fn: bare,
with an entry probe, and with an entry + return probe pair (each `n++`), under
trampolines: the return probe at the patched `ret` ("pair") and through the
return-address hijack ("hijack", `-D PD_RETURN_HIJACK=1`; launcher/plan/returns.py).
Then N calls of bench_work, a leaf too small for two patches on x86-64 (`lea; ret`):
bare ("bare-work"), an entry `c++` with a return `r += $return` ("args"), that return
probe alone, `c++; r += $return` ("ret": the entry's stub runs no handler, only the
leaf's code, whose `ret` leads to the exit's stub), and a latency statistic in the
return probe, `lat <<< gettimeofday_ns() - @entry(gettimeofday_ns())` printed with
@hist_log at the end ("latency"); those are over bare-work.  The counts (and the sum
of $return) are checked against N.  Prints ns per call and the cost over bare.
`--peers` also runs bpftrace (bench/peers.py) on the args and latency rows, with fewer
calls (its uprobes cost microseconds a hit).
Wall time is noisy on a shared machine, so `--callgrind` also counts the
instructions per call with valgrind (--smc-check=all: the probes patch code),
from the difference of two runs (startup cancels out).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import build  # noqa: E402  (bench/run.py: one way to build a bench program)

SCRIPTS = {
    "entry": ('global n\nprobe process("{bin}").function("bench_fn") {{ n++ }}\n'
              'probe end {{ printf("count=%d %d\\n", n, n) }}\n'),
    "pair": ('global n, r\nprobe process("{bin}").function("bench_fn") {{ n++ }}\n'
             'probe process("{bin}").function("bench_fn").return {{ r++ }}\n'
             'probe end {{ printf("count=%d %d\\n", n, r) }}\n'),
    "args": ('global c, r\nprobe process("{bin}").function("bench_work") {{ c++ }}\n'
             'probe process("{bin}").function("bench_work").return {{ r += $return }}\n'
             'probe end {{ printf("count=%d %d\\nreturns=%d\\n", c, c, r) }}\n'),
    "ret": ('global c, r\nprobe process("{bin}").function("bench_work").return '
            '{{ c++; r += $return }}\n'
            'probe end {{ printf("count=%d %d\\nreturns=%d\\n", c, c, r) }}\n'),
    "latency": ('global lat\nprobe process("{bin}").function("bench_work").return {{\n'
                '  lat <<< gettimeofday_ns() - @entry(gettimeofday_ns()) }}\n'
                'probe end {{ printf("count=%d %d\\n", @count(lat), @count(lat)); '
                'print(@hist_log(lat)) }}\n'),
}
# case: (script, -D flags, the program's mode argument, the bare case it is over)
CASES: dict[str, tuple[str, list[str], str, str]] = {
    "bare": ("", [], "", ""),
    "entry": ("entry", [], "", "bare"),
    "pair": ("pair", [], "", "bare"),
    "hijack": ("pair", ["-D", "PD_RETURN_HIJACK=1"], "", "bare"),
    "bare-work": ("", [], "work", ""),
    "args": ("args", [], "work", "bare-work"),
    "ret": ("ret", [], "work", "bare-work"),
    "latency": ("latency", [], "work", "bare-work"),
}
PEER_CALLS = 200_000
# Under valgrind clock_gettime takes microseconds, longer than runtime/pd_clock.c lets
# the reads that take a clock anchor take: without this every clock read would go to
# clock_gettime, a path a native run never takes, and the count would measure it.
VALGRIND_DEFINES = ("-D", "PD_CLOCK_READ_NS=1000000000")


def work_returns(n: int, abi: str) -> int:
    """The sum of bench_work's return values over `bench N work` (acc = acc + i, a C
    long of the ABI), as the script's `r += $return` adds them (int64)."""
    bits = 64 if abi == "m64" else 32
    acc = r = 0
    for i in range(n):
        acc = (acc + i + (1 << (bits - 1))) % (1 << bits) - (1 << (bits - 1))
        r += acc
    return (r + (1 << 63)) % (1 << 64) - (1 << 63)


def run(cmd: list[str], env: dict[str, str], n: int, counted: bool,
        returns: int | None = None) -> str:
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    if r.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{r.stdout}\n{r.stderr}")
    if counted:
        c = re.search(r"count=(\d+) (\d+)", r.stdout)
        if not c or {int(c.group(1)), int(c.group(2))} != {n}:
            raise SystemExit(f"lost hits (want {n}): {r.stdout.strip()}: {' '.join(cmd)}")
    if returns is not None and f"returns={returns}\n" not in r.stdout:
        raise SystemExit(f"wrong sum of $return (want {returns}): {r.stdout.strip()}")
    return r.stdout + r.stderr


def ns(out: str) -> float:
    m = re.search(r"ns_per_hit ([0-9.]+)", out)
    if not m:
        raise SystemExit(f"no ns_per_hit in: {out}")
    return float(m.group(1))


def instructions(out: str) -> int:
    m = re.search(r"I\s+refs:\s+([0-9,]+)", out)
    if not m:
        raise SystemExit(f"no callgrind total in: {out}")
    return int(m.group(1).replace(",", ""))


def peer_rows(binary: Path, abi: str, cells: dict[str, tuple[float, float | None]]) -> None:
    """bpftrace's args and latency rows (bench/peers.py), over the same bare run."""
    import peers
    base = cells.get("bare-work", (None, None))[0]
    for case, fn in (("args", peers.function_args), ("latency", peers.function_latency)):
        try:
            r = fn("bpftrace", binary, "bench_work", PEER_CALLS, ("work",))
        except peers.Unavailable as exc:
            print(f"{abi:5} {'bpftrace ' + case:18} not measured ({exc})")
            continue
        over = "" if base is None else f"+{r - base:.1f}"
        lost = f"  LOST {r.lost} of {PEER_CALLS}" if r.lost else ""
        print(f"{abi:5} {'bpftrace ' + case:18} {float(r):9.2f} {over:>10}  {r.note}{lost}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=5_000_000, help="calls per run")
    ap.add_argument("-r", "--reps", type=int, default=3, help="runs per cell (best is kept)")
    ap.add_argument("--callgrind", action="store_true",
                    help="also count instructions per call with valgrind")
    ap.add_argument("--peers", action="store_true",
                    help=f"also bpftrace on the args and latency rows ({PEER_CALLS:,} calls)")
    ap.add_argument("--cases", default=",".join(CASES),
                    help="the cases to run, comma-separated (default: all)")
    opts = ap.parse_args()
    if opts.callgrind and shutil.which("valgrind") is None:
        raise SystemExit("--callgrind: valgrind is not installed (Debian package valgrind)")
    with tempfile.TemporaryDirectory(prefix="pydyn-fbench-") as t:
        tmp = Path(t)
        env = dict(os.environ, PYDYN_CACHE_DIR=str(tmp / "cache"))
        pydyn = [sys.executable, "-m", "pydyn.launcher.cli"]
        print(f"{'abi':5} {'case':9} {'ns/call':>9} {'over bare':>10} {'instr/call':>11}")
        for abi in ("m64", "m32"):
            binary = build(tmp, abi, "func_bench.c")
            if binary is None:
                print(f"{abi}: cannot build (no -m32 toolchain?) - skipped")
                continue
            cells: dict[str, tuple[float, float | None]] = {}
            for case in [c for c in CASES if c in opts.cases.split(",")]:
                key, forced, mode, _over = CASES[case]
                prefix: list[str] = []
                if key:
                    script = tmp / f"{case}_{abi}.stp"
                    script.write_text(SCRIPTS[key].format(bin=binary))
                    prefix = [*pydyn, *forced, str(script), "-c"]

                def cmd(n: int, tool: str = "", prefix: list[str] = prefix,
                        binary: Path = binary, mode: str = mode) -> list[str]:
                    line = f"{tool}{binary} {n} {mode}".strip()
                    if prefix and tool:     # valgrind: see VALGRIND_DEFINES
                        return [*prefix[:-2], *VALGRIND_DEFINES, *prefix[-2:], line]
                    return [*prefix, line] if prefix else line.split()

                def sums(n: int, key: str = key, abi: str = abi) -> int | None:
                    return work_returns(n, abi) if key in ("args", "ret") else None
                best = min(ns(run(cmd(opts.n), env, opts.n, bool(key), sums(opts.n)))
                           for _ in range(opts.reps))
                ir = None
                if opts.callgrind:
                    vg = (f"valgrind --tool=callgrind --smc-check=all "
                          f"--callgrind-out-file={tmp}/cg.out ")
                    small, big = 50_000, 100_000
                    a = instructions(run(cmd(small, vg), env, small, bool(key), sums(small)))
                    b = instructions(run(cmd(big, vg), env, big, bool(key), sums(big)))
                    ir = (b - a) / (big - small)
                cells[case] = (best, ir)
            for case, (v, ir) in cells.items():
                over_case = CASES[case][3]
                base_ns, base_ir = cells.get(over_case, (None, None))
                over = "" if base_ns is None else f"+{v - base_ns:.1f}"
                irs = "" if ir is None else f"{ir:.0f}"
                if ir is not None and base_ir is not None:
                    irs += f" (+{ir - base_ir:.0f})"
                print(f"{abi:5} {case:9} {v:9.2f} {over:>10} {irs:>11}")
            if opts.peers:
                peer_rows(binary, abi, cells)
    return 0


if __name__ == "__main__":
    sys.exit(main())
