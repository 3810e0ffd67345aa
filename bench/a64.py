"""aarch64 probe cost under qemu-user: `python bench/a64.py`.

Cross-builds bench/bench.c with aarch64-linux-gnu-gcc and times N hits of its
mark under qemu-aarch64: bare, pydyn with `BRK #0` traps (--probe-mode=trap) and
with `B` trampolines (the default), for each `--cpu` (qemu's default `max` has
SVE, so the trampoline saves z0-z31/p0-p15/ffr; `cortex-a72` has none, so it saves
q0-q31).  Counts are checked against N (bench/run.py's `best`).  These are
emulation numbers: a trap is a guest signal that qemu delivers in user space, a
trampoline is translated guest code (SVE stores are slow to emulate), so the
ratios say nothing precise about real arm64 hardware (README, "aarch64").
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from run import HERE, SCRIPT, best

CC = os.environ.get("PYDYN_CC_AARCH64", "aarch64-linux-gnu-gcc")
SDT = Path("/usr/include/x86_64-linux-gnu/sys")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=1_000_000, help="hits per trampoline run")
    ap.add_argument("--trap-n", type=int, default=100_000, help="hits per trap run")
    ap.add_argument("-r", "--reps", type=int, default=3, help="runs per cell (best is kept)")
    ap.add_argument("--cpu", action="append", help="qemu -cpu (default: max and cortex-a72)")
    opts = ap.parse_args()
    qemu = shutil.which("qemu-aarch64")
    if shutil.which(CC) is None or qemu is None:
        print(f"needs {CC} and qemu-aarch64 (gcc-aarch64-linux-gnu, qemu-user) - skipped")
        return 0
    with tempfile.TemporaryDirectory(prefix="pydyn-bench-a64-") as t:
        tmp = Path(t)
        (tmp / "inc" / "sys").mkdir(parents=True)
        for name in ("sdt.h", "sdt-config.h"):   # arch-generic, kept under the x86-64 triplet
            (tmp / "inc" / "sys" / name).symlink_to(SDT / name)
        binary = tmp / "bench_aarch64"
        subprocess.run([CC, "-O2", "-idirafter", str(tmp / "inc"), "-o", str(binary),
                        str(HERE / "bench.c")], check=True)
        script = tmp / "count.stp"
        script.write_text(SCRIPT.format(bin=binary))
        env = dict(os.environ, PYDYN_CACHE_DIR=str(tmp / "cache"))
        pydyn = [sys.executable, "-m", "pydyn.launcher.cli"]
        print("aarch64 under qemu-user (ns/hit; probe body `n++`; emulated, see above)")
        for cpu in opts.cpu or ["max", "cortex-a72"]:
            guest = [qemu, "-cpu", cpu, "-L", "/usr/aarch64-linux-gnu", str(binary)]
            cells = {"bare": best([*guest, str(opts.n)], env, opts.n, opts.reps)}
            for name, extra, n in (("trap", ["--probe-mode=trap"], opts.trap_n),
                                   ("trampoline", [], opts.n)):
                command = " ".join([*guest, str(n)])      # a shell line: qemu with -cpu
                cells[name] = best([*pydyn, *extra, str(script), "-c", command], env, n,
                                   opts.reps)
            over = {k: cells[k] - cells["bare"] for k in ("trap", "trampoline")}
            print(f"-cpu {cpu}: bare {cells['bare']:.2f}, trap {cells['trap']:.1f} "
                  f"(+{over['trap']:.1f}), trampoline {cells['trampoline']:.1f} "
                  f"(+{over['trampoline']:.1f}); trap/trampoline = "
                  f"{over['trap'] / max(over['trampoline'], 0.01):.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
