"""pydyn startup cost: `python bench/startup.py` (also run by `make bench`).

Side by side in one run, wall time of a whole run, median over N rounds (the cells
take turns in each round, so load drifts hit all of them alike):

  bare            bench/bench.c hitting its USDT mark 1000 times, no tracer
  python          `python -c pass`: the interpreter's own start, a floor for pydyn
  pydyn warm      the same script again: a cache hit (no parse, no compiler)
  pydyn cold      a script never seen (a comment differs), in a cache whose
                  precompiled runtime exists: translate, compile the C, link
  pydyn fresh     an empty --cache-dir: the runtime is compiled too
  bpftrace        `bpftrace -e 'usdt:...{ @n = count(); }' -c ...` (bench/peers.py)

then the cold build alone (-p4) of a 20-probe script, cold and fresh.  `cpu ms` is
the user + sys time of a run's processes (steadier than wall time on a busy machine).  Every traced
run's hit count is checked; a tool that cannot run here prints why, never a number.
pydyn is started as the `pydyn` script beside this interpreter (`make bench` runs
.venv/bin/python: .venv/bin/pydyn, no shim in front), else as `python -m pydyn`.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peers  # noqa: E402

HERE = Path(__file__).resolve().parent
HITS = 1000
SCRIPT = ('global n\nprobe process("{bin}").mark("hit") {{ n++ }}\n'
          'probe end {{ printf("count=%d\\n", n) }}\n# {tag}\n')
# The `pydyn` script of this interpreter's environment, as a user runs it (`make deps`:
# .venv/bin/pydyn), else `python -m pydyn` (runpy costs ~5 ms more).
_SCRIPT = Path(sys.executable).with_name("pydyn")
PYDYN = [str(_SCRIPT)] if _SCRIPT.is_file() else [sys.executable, "-m", "pydyn"]


CPU_MS: list[float] = []   # CPU ms (user + sys) of the last timed() run, all its processes


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (ru.ru_utime + ru.ru_stime) * 1000


def timed(cmd: list[str], env: dict[str, str], expect: str | None = None) -> float:
    """Wall ms of one run; SystemExit if it fails or `expect` is not in its stdout."""
    c0 = _children_cpu()
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    ms = (time.perf_counter() - t0) * 1000
    CPU_MS[:] = [_children_cpu() - c0]
    if r.returncode != 0 or (expect is not None and expect not in r.stdout):
        raise SystemExit(f"failed: {' '.join(cmd)}\n{r.stdout[-500:]}\n{r.stderr[-2000:]}")
    return ms


def script_file(tmp: Path, binary: Path, tag: str, body: str = SCRIPT) -> Path:
    p = tmp / f"s_{tag}.stp"
    p.write_text(body.format(bin=binary, tag=tag))
    return p


def twenty_probes(binary: Path) -> str:
    """20 probes on the one mark, each with its own global and statistic."""
    probes = "".join(f'probe process("{{bin}}").mark("hit") {{{{ c{i}++; s{i} <<< $arg1 }}}}\n'
                     for i in range(20))
    names = ", ".join([f"c{i}" for i in range(20)] + [f"s{i}" for i in range(20)])
    return (f"global {names}\n{probes}"
            'probe end {{ printf("count=%d\\n", c0) }}\n# {tag}\n')


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", "--rounds", type=int, default=11, help="rounds (median is kept)")
    ap.add_argument("--fresh-rounds", type=int, default=3,
                    help="rounds of the empty-cache cells (each compiles the runtime)")
    opts = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="pydyn-startup-") as t:
        tmp = Path(t)
        binary = tmp / "bench"
        subprocess.run(["gcc", "-O2", "-o", str(binary), str(HERE / "bench.c")], check=True)
        cache = tmp / "cache"
        env = dict(os.environ, PYDYN_CACHE_DIR=str(cache))
        expect = f"count={HITS}"
        warm = script_file(tmp, binary, "warm")
        timed([*PYDYN, str(warm), "-c", f"{binary} {HITS}"], env, expect)   # fills the cache
        serial = iter(range(1_000_000))

        def cold(body: str, cache_dir: Path, build_only: bool = False) -> float:
            s = script_file(tmp, binary, f"c{next(serial)}", body)
            run = ["-p4", str(s)] if build_only else [str(s), "-c", f"{binary} {HITS}"]
            return timed([*PYDYN, *run], {**env, "PYDYN_CACHE_DIR": str(cache_dir)},
                         "_m32.so" if build_only else expect)

        def fresh(body: str, build_only: bool = False) -> float:
            return cold(body, tmp / f"fresh{next(serial)}", build_only)

        cells: dict[str, Callable[[], float]] = {
            "bare": lambda: timed([str(binary), str(HITS)], env, f"hits {HITS}"),
            "python -c pass": lambda: timed([sys.executable, "-c", "pass"], env),
            "pydyn warm": lambda: timed([*PYDYN, str(warm), "-c", f"{binary} {HITS}"], env,
                                        expect),
            "pydyn cold": lambda: cold(SCRIPT, cache),
        }
        times: dict[str, list[float]] = {k: [] for k in cells}
        cpu: dict[str, list[float]] = {}

        def sample(name: str, fn: Callable[[], float]) -> None:
            times.setdefault(name, []).append(fn())
            if CPU_MS:   # bpftrace is timed by peers.startup: no CPU figure for it
                cpu.setdefault(name, []).append(CPU_MS.pop())
        unavailable: dict[str, str] = {}

        def bpftrace() -> float:
            r = peers.startup("bpftrace", binary, "hit", HITS)
            if r.hits != HITS:
                raise peers.Unavailable(f"bpftrace counted {r.hits} of {HITS} hits")
            return float(r)

        times["bpftrace"] = []
        for _ in range(opts.rounds):
            for name, fn in cells.items():
                sample(name, fn)
            if "bpftrace" not in unavailable:
                try:
                    sample("bpftrace", bpftrace)
                except peers.Unavailable as exc:
                    unavailable["bpftrace"] = str(exc)
        for _ in range(opts.fresh_rounds):
            sample("pydyn fresh", lambda: fresh(SCRIPT))
        # -p4 of a 20-probe script: the cold build alone (parse .. link), both modules.
        big = twenty_probes(binary)
        for _ in range(opts.rounds):
            sample("20 probes cold -p4", lambda: cold(big, cache, True))
        for _ in range(opts.fresh_rounds):
            sample("20 probes fresh -p4", lambda: fresh(big, True))
    med = {k: statistics.median(v) for k, v in times.items() if v}
    bare = med["bare"]
    print(f"startup, wall ms (median of {opts.rounds}; fresh cells {opts.fresh_rounds}); "
          f"a run = {HITS} hits of one USDT mark")
    print(f"{'':22} {'median':>8} {'min':>8} {'over bare':>10} {'x bpftrace':>11} "
          f"{'cpu ms':>8}")
    for name, v in times.items():
        if not v:
            print(f"{name:22} unavailable: {unavailable.get(name, 'no runs')}")
            continue
        vs = f"{med[name] / med['bpftrace']:.2f}" if "bpftrace" in med else "-"
        c = f"{statistics.median(cpu[name]):8.1f}" if name in cpu else f"{'-':>8}"
        print(f"{name:22} {med[name]:8.1f} {min(v):8.1f} {med[name] - bare:+10.1f} {vs:>11} {c}")
    load = os.getloadavg()[0]
    print(f"load average {load:.1f} on {os.cpu_count()} CPU(s) while measuring")
    return 0


if __name__ == "__main__":
    sys.exit(main())
