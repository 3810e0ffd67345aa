"""How long a new script takes to be ready on a big binary, beside bpftrace's start.

`python bench/coldstart.py [--rounds N]` (part of `make bench`).  Each row is a new
script (never seen by the module cache: pass 1-4 run, the runtime and pd_sweep are
already compiled), measured with `-p4` (parse, resolve, plan, translate, compile):

- *first*: the binary has not been seen (its facts are removed from the cache);
- *after*: another new script on the same binary (its facts come from the cache);
- *bpftrace*: `bpftrace -e 'usdt:...{} BEGIN { exit() }'` (or `uprobe:`), which ends
  once its probe is attached: bpftrace's start on the same probe.

Then 5,000 probe points on one binary (resolve + translate, from `-v`), 800 of them
at -p2, and one probe of 2,048 statements (`a[k] = 1`, k = 2048 .. 1) built with -p4.
Wall seconds and the peak RSS of the pydyn process (its own, from wait4), medians of
`--rounds`.  Goals: first <= 1.0 s and <= 150 MB, after <= 0.5 s; 5,000 points
<= 3 s; the 2,048-statement probe in seconds.  A binary that is not installed, or a
bpftrace that cannot run here, is reported as such, never as a number.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
POSTGRES = "/usr/lib/postgresql/15/bin/postgres"
PYTHON = "/usr/bin/python3.11"
LIBJVM = "/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so"
# name, binary, probe point component, bpftrace probe kind
CASES = [
    ("postgres mark", POSTGRES, 'mark("transaction__start")', "usdt"),
    ("postgres function", POSTGRES, 'function("ExecutorStart")', "uprobe"),
    ("python3.11 mark", PYTHON, 'mark("function__entry")', "usdt"),
    ("libjvm mark", LIBJVM, 'mark("thread__start")', "usdt"),
]
_SCRIPT = Path(sys.executable).with_name("pydyn")
PYDYN = [str(_SCRIPT)] if _SCRIPT.is_file() else [sys.executable, "-m", "pydyn"]


CPU: list[float] = []   # CPU s (user + sys) of the last run(), its compilers included


def run(cmd: list[str], env: dict[str, str]) -> tuple[float, float, str, str, int]:
    """(wall s, peak RSS MB of the process, stdout, stderr, exit status); its CPU
    seconds go to CPU (steadier than wall time on a loaded machine)."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env)
        _pid, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        CPU.append(usage.ru_utime + usage.ru_stime)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return (wall, usage.ru_maxrss / 1024, out.read().decode(errors="replace"),
                err.read().decode(errors="replace"), proc.returncode)


def pydyn(args: list[str], cache: Path) -> tuple[float, float, str, str]:
    env = dict(os.environ, PYDYN_CACHE_DIR=str(cache))
    wall, rss, out, err, rc = run([*PYDYN, *args], env)
    if rc != 0:
        raise SystemExit(f"pydyn {' '.join(args[:3])} ... failed:\n{err}")
    return wall, rss, out, err


def forget_binaries(cache: Path) -> None:
    """The binaries' facts out of the cache (pd_sweep stays: it is per machine)."""
    store = cache / "objfacts"
    for p in store.glob("*"):
        if p.name.startswith("pd_sweep-"):
            continue
        shutil.rmtree(p) if p.is_dir() else p.unlink()


_tag = 0


def new_script(binary: str, point: str) -> str:
    global _tag
    _tag += 1
    return (f'global n\nprobe process("{binary}").{point} {{ n++ }}\n'
            f'probe end {{ printf("%d\\n", n) }}\n# new script {_tag} {time.time()}\n')


def provider_of(binary: str, point: str) -> str | None:
    m = re.fullmatch(r'mark\("(.*)"\)', point)
    if not m:
        return None
    from pydyn.launcher.elf.stapsdt import get_probe_sites
    return next((s.provider for s in get_probe_sites(binary).sites if s.name == m.group(1)),
                None)


def bpftrace(binary: str, point: str, kind: str) -> float | str:
    exe = shutil.which("bpftrace")
    if exe is None:
        return "bpftrace not installed"
    name = re.fullmatch(r'\w+\("(.*)"\)', point)
    assert name is not None
    if kind == "usdt":
        prov = provider_of(binary, point)
        probe = f"usdt:{binary}:{prov}:{name.group(1)}"
    else:
        probe = f"uprobe:{binary}:{name.group(1)}"
    wall, _rss, _out, err, rc = run([exe, "-e", f"{probe} {{ }} BEGIN {{ exit(); }}"],
                                    dict(os.environ))
    if rc != 0:
        return f"bpftrace failed: {err.strip().splitlines()[-1] if err.strip() else rc}"
    return wall


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    opts = ap.parse_args()
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="pydyn-coldstart-") as tmp:
        cache = Path(tmp) / "cache"
        # the runtime and pd_sweep compiled once, as on any machine pydyn ran on before
        counter = ROOT / "examples" / "bin" / "counter"
        if not counter.exists():
            raise SystemExit("build the examples first: make examples")
        pydyn(["-p4", "-e", new_script(str(counter), 'mark("tick")')], cache)
        rows: list[tuple[str, Any]] = []
        for name, binary, point, kind in CASES:
            if not os.path.exists(binary):
                rows.append((name, f"{binary} is not installed"))
                continue
            first, first_rss, after, after_rss, bpf = [], [], [], [], []
            first_cpu, after_cpu = [], []
            for _ in range(opts.rounds):
                forget_binaries(cache)
                w, r, _o, _e = pydyn(["-p4", "-e", new_script(binary, point)], cache)
                first.append(w)
                first_rss.append(r)
                first_cpu.append(CPU[-1])
                w, r, _o, _e = pydyn(["-p4", "-e", new_script(binary, point)], cache)
                after.append(w)
                after_rss.append(r)
                after_cpu.append(CPU[-1])
                bpf.append(bpftrace(binary, point, kind))
            b = [x for x in bpf if isinstance(x, float)]
            bs = f"{statistics.median(b):8.2f}" if b else f"  {bpf[0]}"
            rows.append((name, (statistics.median(first), statistics.median(first_rss),
                                statistics.median(after), statistics.median(after_rss), bs,
                                statistics.median(first_cpu), statistics.median(after_cpu))))
        print(f"new script, -p4: wall s, CPU s (pydyn and its compilers) and peak RSS MB "
              f"(median of {opts.rounds})")
        print(f"{'':18} {'first s':>7} {'cpu':>5} {'MB':>4} {'after s':>7} {'cpu':>5} "
              f"{'MB':>4} {'bpftrace s':>10}  goals (wall)")
        for name, v in rows:
            if isinstance(v, str):
                print(f"{name:18} unavailable: {v}")
                continue
            f, fr, a, ar, bs, fc, ac = v
            met = "met" if f <= 1.0 and fr <= 150 and a <= 0.5 else "NOT met"
            print(f"{name:18} {f:7.2f} {fc:5.2f} {fr:4.0f} {a:7.2f} {ac:5.2f} {ar:4.0f} "
                  f"{bs:>10}  {met} (first <= 1.0 s, <= 150 MB; after <= 0.5 s)")
        # many probe points on one binary: resolve + translate must scale linearly
        if os.path.exists(POSTGRES):
            for n, passes in ((800, "-p2"), (5000, "-p3")):
                text = "global n\n" + "".join(
                    f'probe process("{POSTGRES}").mark("transaction__start") {{ n++ }}\n'
                    for _ in range(n)) + f"# {time.time()}\n"
                walls, work, cpu = [], [], []
                script = Path(tmp) / f"points{n}.stp"
                script.write_text(text)
                for _ in range(opts.rounds):
                    w, _r, _o, err = pydyn(["-v", passes, str(script)], cache)
                    ms = [float(x) for x in re.findall(r"Pass [23]: .* in (\d+)ms", err)]
                    walls.append(w)
                    cpu.append(CPU[-1])
                    work.append(sum(ms) / 1000)
                goal = "  goal: resolve + translate <= 3 s: " + (
                    "met" if statistics.median(work) <= 3 else "NOT met") if n == 5000 else ""
                print(f"{n} probe points {passes}: resolve+translate "
                      f"{statistics.median(work):.2f} s, whole run {statistics.median(walls):.2f} s"
                      f" (cpu {statistics.median(cpu):.2f} s)" + goal)
        # one probe of 2,048 statements
        text = "global a\nprobe begin {\n" + "".join(
            f"  a[{k}] = 1;\n" for k in range(2048, 0, -1)) + "  exit()\n}\n"
        walls = []
        script = Path(tmp) / "statements.stp"
        for _ in range(max(1, opts.rounds // 3)):
            script.write_text(text + f"# {time.time()}\n")
            w, _r, _o, _e = pydyn(["-p4", str(script)], cache)
            walls.append(w)
        print(f"one probe of 2,048 statements -p4: {statistics.median(walls):.2f} s "
              f"(cpu {CPU[-1]:.2f} s, m64 and m32 compiled in parallel)")
    u = os.uname()
    model = next((ln.split(":", 1)[1].strip() for ln in
                  Path("/proc/cpuinfo").read_text().splitlines()
                  if ln.startswith("model name")), platform.processor())
    print(f"machine: {model}, {os.cpu_count()} CPU(s), {u.sysname} {u.release}, "
          f"load average {load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
