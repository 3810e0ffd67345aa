"""pydyn function-probe cost: `python bench/func_bench.py`.

Builds bench/func_bench.c (m64, m32) and times N calls of its bench_fn: bare,
with an entry probe, and with an entry + return probe pair (each `n++`), under
trampolines: the return probe at the patched `ret` ("pair") and through the
return-address hijack ("hijack", `-D PD_RETURN_HIJACK=1`; launcher/plan/returns.py).
The counts are checked against N.  Prints ns per call and the cost over bare.
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
}


def run(cmd: list[str], env: dict[str, str], n: int, counted: bool) -> str:
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    if r.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{r.stdout}\n{r.stderr}")
    if counted:
        c = re.search(r"count=(\d+) (\d+)", r.stdout)
        if not c or {int(c.group(1)), int(c.group(2))} != {n}:
            raise SystemExit(f"lost hits (want {n}): {r.stdout.strip()}: {' '.join(cmd)}")
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=5_000_000, help="calls per run")
    ap.add_argument("-r", "--reps", type=int, default=3, help="runs per cell (best is kept)")
    ap.add_argument("--callgrind", action="store_true",
                    help="also count instructions per call with valgrind")
    opts = ap.parse_args()
    if opts.callgrind and shutil.which("valgrind") is None:
        raise SystemExit("--callgrind: valgrind is not installed (Debian package valgrind)")
    with tempfile.TemporaryDirectory(prefix="pydyn-fbench-") as t:
        tmp = Path(t)
        env = dict(os.environ, PYDYN_CACHE_DIR=str(tmp / "cache"))
        pydyn = [sys.executable, "-m", "pydyn.launcher.cli"]
        print(f"{'abi':5} {'case':6} {'ns/call':>9} {'over bare':>10} {'instr/call':>11}")
        for abi in ("m64", "m32"):
            binary = build(tmp, abi, "func_bench.c")
            if binary is None:
                print(f"{abi}: cannot build (no -m32 toolchain?) - skipped")
                continue
            cells: dict[str, tuple[float, float | None]] = {}
            for case in ("bare", "entry", "pair", "hijack"):
                if case == "bare":
                    prefix: list[str] = []
                else:
                    script = tmp / f"{case}_{abi}.stp"
                    script.write_text(SCRIPTS["pair" if case == "hijack" else case]
                                      .format(bin=binary))
                    forced = ["-D", "PD_RETURN_HIJACK=1"] if case == "hijack" else []
                    prefix = [*pydyn, *forced, str(script), "-c"]

                def cmd(n: int, tool: str = "", prefix: list[str] = prefix,
                        binary: Path = binary) -> list[str]:
                    line = f"{tool}{binary} {n}"
                    return [*prefix, line] if prefix else line.split()
                best = min(ns(run(cmd(opts.n), env, opts.n, case != "bare"))
                           for _ in range(opts.reps))
                ir = None
                if opts.callgrind:
                    vg = (f"valgrind --tool=callgrind --smc-check=all "
                          f"--callgrind-out-file={tmp}/cg.out ")
                    small, big = 50_000, 100_000
                    a = instructions(run(cmd(small, vg), env, small, case != "bare"))
                    b = instructions(run(cmd(big, vg), env, big, case != "bare"))
                    ir = (b - a) / (big - small)
                cells[case] = (best, ir)
            bare_ns, bare_ir = cells["bare"]
            for case, (v, ir) in cells.items():
                over = "" if case == "bare" else f"+{v - bare_ns:.1f}"
                irs = "" if ir is None else f"{ir:.0f}"
                if ir is not None and bare_ir is not None and case != "bare":
                    irs += f" (+{ir - bare_ir:.0f})"
                print(f"{abi:5} {case:6} {v:9.2f} {over:>10} {irs:>11}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
