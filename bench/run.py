"""pydyn probe cost: `python bench/run.py` (or `make bench`).

Builds bench/bench.c for m64 and m32 and times N hits of one USDT mark:
bare (no tracer), pydyn with int3 traps (--probe-mode=trap), pydyn with
trampolines (default), and trampolines without the xmm save
(-D PD_TRAMP_SAVE_XMM=0).  The probe counts hits in a global (`n++`), and the
count is checked against N.  Prints ns per hit, the cost over bare, and ratios.
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

HERE = Path(__file__).resolve().parent
M32 = ("-m32", "-idirafter", "/usr/include/x86_64-linux-gnu")
SCRIPT = ('global n\nprobe process("{bin}").mark("hit") {{ n++ }}\n'
          'probe end {{ printf("count=%d\\n", n) }}\n')


def build(tmp: Path, abi: str) -> Path | None:
    out = tmp / f"bench_{abi}"
    flags = M32 if abi == "m32" else ()
    r = subprocess.run(["gcc", *flags, "-O2", "-o", str(out), str(HERE / "bench.c")],
                       capture_output=True, text=True)
    return out if r.returncode == 0 else None


def run(cmd: list[str], env: dict[str, str], n: int) -> float:
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    m = re.search(r"ns_per_hit ([0-9.]+)", r.stdout)
    if r.returncode != 0 or not m:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{r.stdout}\n{r.stderr}")
    c = re.search(r"count=(\d+)", r.stdout)
    if c and int(c.group(1)) != n:
        raise SystemExit(f"lost hits: counted {c.group(1)} of {n}: {' '.join(cmd)}")
    return float(m.group(1))


def best(cmd: list[str], env: dict[str, str], n: int, reps: int) -> float:
    return min(run(cmd, env, n) for _ in range(reps))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=5_000_000, help="hits per trampoline run")
    ap.add_argument("--trap-n", type=int, default=200_000, help="hits per trap run")
    ap.add_argument("-r", "--reps", type=int, default=3, help="runs per cell (best is kept)")
    opts = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="pydyn-bench-") as t:
        tmp = Path(t)
        env = dict(os.environ, PYDYN_CACHE_DIR=str(tmp / "cache"))
        pydyn = [sys.executable, "-m", "pydyn.launcher.cli"]
        rows = []
        for abi in ("m64", "m32"):
            binary = build(tmp, abi)
            if binary is None:
                print(f"{abi}: cannot build (no -m32 toolchain?) - skipped")
                continue
            script = tmp / f"count_{abi}.stp"
            script.write_text(SCRIPT.format(bin=binary))
            bare = best([str(binary), str(opts.n)], env, opts.n, opts.reps)
            cells = {"bare": bare}
            for name, extra, n in (
                    ("trap", ["--probe-mode=trap"], opts.trap_n),
                    ("trampoline", [], opts.n),
                    ("tramp-noxmm", ["-D", "PD_TRAMP_SAVE_XMM=0"], opts.n)):
                cmd = [*pydyn, *extra, str(script), "-c", f"{binary} {n}"]
                cells[name] = best(cmd, env, n, opts.reps)
            plan = subprocess.run([*pydyn, "-p2", str(script)], capture_output=True,
                                  text=True, env=env).stdout
            tactic = re.search(r"plan: (\S+)", plan)
            rows.append((abi, cells, tactic.group(1) if tactic else "?"))
        print(f"{'abi':5} {'bare':>8} {'trap':>10} {'trampoline':>11} {'tramp-noxmm':>12}  "
              "(ns/hit; probe body `n++`)")
        for abi, c, tactic in rows:
            print(f"{abi:5} {c['bare']:8.2f} {c['trap']:10.1f} {c['trampoline']:11.2f} "
                  f"{c['tramp-noxmm']:12.2f}  site tactic: {tactic}")
        for abi, c, _ in rows:
            over = {k: c[k] - c["bare"] for k in ("trap", "trampoline", "tramp-noxmm")}
            print(f"{abi}: over bare: trap +{over['trap']:.1f} ns, trampoline "
                  f"+{over['trampoline']:.2f} ns, without xmm save +{over['tramp-noxmm']:.2f} ns;"
                  f" trap/trampoline = {over['trap'] / max(over['trampoline'], 0.01):.0f}x")
        for peer in ("bpftrace", "frida", "uftrace"):
            if shutil.which(peer) is None:
                print(f"{peer}: not installed here - no numbers (not faked)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
