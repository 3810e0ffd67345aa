"""docs/performance.md from one run of every benchmark: `python bench/report.py`.

`make bench-report` runs it.  Each bench script runs as a program of its own (its
command line is in the table), its output is parsed, and one markdown table is
written with the command that made it, the machine, the load average and the date:

    bench/run.py        a counting mark, entry + return pairs ($return too), latency
                        statistic, statistics, printf -- pydyn, bpftrace, Frida, uftrace
    bench/func_bench.py function probes on func_bench.c (its cases as it prints them)
    bench/startup.py    start-up: warm (module cache hit), cold, empty cache; bpftrace
    bench/coldstart.py  a new script on postgres, python3.11, libjvm; 5,000 points;
                        the 2,048-statement map_hash probe
    bench/pgbench.py    PostgreSQL 15 throughput under pgbench, pydyn and bpftrace
    bench/dwarf_read.py reading libc's separate debug information (libc6-dbg)

`--quick` runs each with small counts and one round (a smoke run: its figures are
not worth publishing, and the page says it was quick).  `--out -` prints the page
instead of writing it; `--logs DIR` keeps each script's output, and `--from-logs DIR`
makes the page from such outputs without running anything.  A script that fails or
runs out of time leaves its rows saying so; nothing is made up.
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PEERS = ("bpftrace", "frida", "uftrace")
ABIS = {"m64": "x86-64", "m32": "i386"}


@dataclass
class Step:
    """One bench script: its arguments (full and --quick) and what its run left."""

    name: str
    args: list[str]
    quick: list[str]
    timeout: int
    out: str = ""
    failed: str = ""
    load: tuple[float, float] = (0.0, 0.0)
    seconds: float = 0.0

    def command(self, quick: bool) -> str:
        return shlex.join([f"bench/{self.name}.py", *(self.quick if quick else self.args)])

    def how(self, quick: bool) -> str:
        return f"{self.name}.py, load {self.load[0]:.1f}-{self.load[1]:.1f}"


def steps() -> list[Step]:
    return [
        Step("run", ["-r", "3"], ["-n", "200000", "--trap-n", "20000", "--printf-n", "100000",
                                  "--peer-n", "20000", "-r", "1"], 3600),
        Step("func_bench", ["-r", "5"], ["-n", "200000", "-r", "1"], 1800),
        Step("startup", ["-n", "7", "--fresh-rounds", "2"], ["-n", "3", "--fresh-rounds", "1"],
             1800),
        Step("coldstart", ["--rounds", "3"], ["--rounds", "1"], 1800),
        Step("pgbench", ["-T", "5", "--rounds", "10", "--rt", "--profile"],
             ["-T", "3", "--rounds", "1", "--rt", "--profile"], 1800),
        Step("dwarf_read", [], [], 600),
    ]


# -- the scripts' outputs -----------------------------------------------------------------

@dataclass
class Cell:
    """A tool's figure: ns per hit over bare, or why there is none."""

    over: float | None = None
    why: str = ""


@dataclass
class RunOut:
    """bench/run.py: rows keyed (kind, abi), each {tool: Cell}; printf events/s."""

    rows: dict[tuple[str, str], dict[str, Cell]] = field(default_factory=dict)
    bare: dict[str, float] = field(default_factory=dict)
    printf_mps: float | None = None


def parse_run(text: str) -> RunOut:
    out = RunOut()
    cur: dict[str, Cell] | None = None
    abi = ""
    for line in text.splitlines():
        head = re.match(r"^(\w[\w ]*?) \((m64|m32)[,)]", line)
        if head:
            abi = head.group(2)
            cur = out.rows.setdefault((head.group(1), abi), {})
            continue
        cell = re.match(r"^  (\S+)\s+([0-9.]+) ns/hit(?:\s+\+\s*([0-9.-]+) over bare)?", line)
        if cell and cur is not None:
            if cell.group(1) == "bare":
                out.bare[abi] = float(cell.group(2))
            else:
                cur[cell.group(1)] = Cell(float(cell.group(3) or 0.0))
            continue
        miss = re.match(r"^  (\S+)\s+not measured \((.*)\)$", line)
        if miss and cur is not None:
            cur[miss.group(1)] = Cell(None, miss.group(2))
            continue
        mps = re.search(r"pydyn printf: ([0-9.]+) million events/s", line)
        if mps:
            out.printf_mps = float(mps.group(1))
    return out


def parse_func_bench(text: str) -> dict[tuple[str, str], tuple[float, float | None]]:
    """bench/func_bench.py's rows, whatever its cases: (abi, case) -> (ns, over bare)."""
    rows: dict[tuple[str, str], tuple[float, float | None]] = {}
    for line in text.splitlines():
        m = re.match(r"^(m64|m32)\s+(\S+)\s+([0-9.]+)\s*([+-][0-9.]+)?", line)
        if m:
            over = float(m.group(4)) if m.group(4) else None
            rows[(m.group(1), m.group(2))] = (float(m.group(3)), over)
    return rows


def parse_startup(text: str) -> tuple[dict[str, tuple[float, float | None]], dict[str, str]]:
    """bench/startup.py: name -> (median wall ms, median CPU ms), and unavailable ones."""
    rows: dict[str, tuple[float, float | None]] = {}
    why: dict[str, str] = {}
    for line in text.splitlines():
        m = re.match(r"^(\S.*?)\s+([0-9.]+)\s+([0-9.]+)\s+[+-][0-9.]+\s+\S+\s+(\S+)\s*$", line)
        if m:
            cpu = None if m.group(4) == "-" else float(m.group(4))
            rows[m.group(1)] = (float(m.group(2)), cpu)
            continue
        m = re.match(r"^(\S.*?)\s+unavailable: (.*)$", line)
        if m:
            why[m.group(1)] = m.group(2)
    return rows, why


@dataclass
class ColdOut:
    """bench/coldstart.py: per case (first, cpu, MB, after, cpu, MB, bpftrace s or why)."""

    cases: dict[str, tuple[float, float, float, float, float, float, float | str]] = \
        field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)
    points: dict[int, tuple[float, float, float]] = field(default_factory=dict)
    statements: tuple[float, float] | None = None


def parse_coldstart(text: str) -> ColdOut:
    out = ColdOut()
    for line in text.splitlines():
        m = re.match(r"^(\S+ \S+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+"
                     r"([0-9.]+)\s+([0-9.]+)\s+(.*?)\s+(?:met|NOT met) \(", line)
        if m:
            v = [float(m.group(i)) for i in range(2, 8)]
            b = m.group(8).strip()
            out.cases[m.group(1)] = (v[0], v[1], v[2], v[3], v[4], v[5],
                                     float(b) if re.fullmatch(r"[0-9.]+", b) else b)
            continue
        m = re.match(r"^(\S+ \S+)\s+unavailable: (.*)$", line)
        if m:
            out.missing[m.group(1)] = m.group(2)
            continue
        m = re.match(r"^(\d+) probe points -p\d: resolve\+translate ([0-9.]+) s, whole run "
                     r"([0-9.]+) s \(cpu ([0-9.]+) s\)", line)
        if m:
            out.points[int(m.group(1))] = (float(m.group(2)), float(m.group(3)),
                                           float(m.group(4)))
            continue
        m = re.match(r"^one probe of 2,048 statements -p4: ([0-9.]+) s \(cpu ([0-9.]+) s", line)
        if m:
            out.statements = (float(m.group(1)), float(m.group(2)))
    return out


def parse_pgbench(text: str) -> dict[str, float | str]:
    """bench/pgbench.py: tool -> traced / untraced tps ratio or why not; "cpu TOOL" ->
    the server's CPU per transaction over untraced's; "profile" -> the share of the
    server's CPU in pydyn's code."""
    out: dict[str, float | str] = {}
    for line in text.splitlines():
        m = re.match(r"^pgbench CPU per transaction (\w+): ([0-9.]+) ", line)
        if m:
            out[f"cpu {m.group(1)}"] = float(m.group(2))
            continue
        m = re.match(r"^pgbench profile pydyn: pydyn ([0-9.]+%) ", line)
        if m:
            out["profile"] = m.group(1)
            continue
        m = re.match(r"^pgbench side-by-side ratio pydyn: ([0-9.]+) ", line)
        if m:
            out["side"] = float(m.group(1))
            continue
        m = re.match(r"^pgbench ratio (\w+): ([0-9.]+) ", line)
        if m:
            out[m.group(1)] = float(m.group(2))
            continue
        m = re.match(r"^pgbench(?: ratio (\w+))?: unavailable: (.*)$", line)
        if m:
            for tool in ([m.group(1)] if m.group(1) else ["pydyn", "bpftrace"]):
                out[tool] = m.group(2)
    return out


# -- the table -----------------------------------------------------------------------------

def _ns(c: Cell | None) -> str:
    if c is None:
        return ""
    if c.over is None:
        return f"not measured: {_short(c.why)}"
    return f"+{c.over:,.1f} ns"


def _short(why: str, n: int = 90) -> str:
    why = why.replace("|", "/").replace("\n", " ")
    return why if len(why) <= n else why[:n - 3] + "..."


def _x(c: Cell | None, ref: Cell | None) -> str:
    """A peer's cell with its cost in multiples of pydyn's."""
    s = _ns(c)
    if c is not None and c.over is not None and ref is not None and ref.over:
        s += f" ({c.over / max(ref.over, 0.01):,.0f}x)"
    return s


Row = tuple[str, str, str, str, str, str]   # what, pydyn, bpftrace, Frida, uftrace, how


def _failed(step: Step, what: str) -> Row:
    return (what, f"not measured: {_short(step.failed)}", "", "", "", step.how(False))


RUN_ROWS = [
    ("count", "counting a USDT mark, `n++`"),
    ("function", "function entry + `.return` pair, counting"),
    ("return", "entry + return pair, the return reading `$return`"),
    ("latency", "latency statistic at the return: `s <<< gettimeofday_ns() - @entry(...)`"),
    ("stats", "a statistic at a mark, `s <<< $arg1`"),
    ("keyed stats", "a keyed statistic, `s[tid()] <<< $arg1`"),
]


def run_rows(step: Step, quick: bool) -> list[Row]:
    if step.failed:
        return [_failed(step, "probe hits (bench/run.py)")]
    r = parse_run(step.out)
    how = step.how(quick)
    rows: list[Row] = []
    for kind, what in RUN_ROWS:
        for abi, arch in ABIS.items():
            cells = r.rows.get((kind, abi))
            if cells is None:
                continue
            ref = cells.get("pydyn")
            rows.append((f"{what} ({arch}), over bare {r.bare.get(abi, 0):.1f} ns",
                         _ns(ref), *(_x(cells.get(t), ref) for t in PEERS), how))
        if kind == "count" and ("count", "m64") in r.rows:
            trap = r.rows[("count", "m64")].get("pydyn-trap")
            rows.append(("the same through an int3 trap (`--probe-mode=trap`, x86-64)",
                         _ns(trap), "", "", "", how))
    pf = r.rows.get(("printf", "m64"), {})

    def rate(c: Cell | None) -> str:
        if c is None or c.over is None:
            return _ns(c)
        per = c.over + r.bare.get("m64", 0.0)
        return f"{1e3 / per:,.2f} M/s" if per > 0 else "?"
    pyd = f"{r.printf_mps:,.2f} M/s" if r.printf_mps is not None else rate(pf.get("pydyn"))
    rows.append(("`printf(\"%d\\n\", $arg1)` at a mark, lossless, events/s (x86-64, `-o FILE`)",
                 pyd, *(rate(pf.get(t)) for t in PEERS), how))
    return rows


FUNC_CASES = {"entry": "function entry, `n++`", "pair": "entry + return pair, `n++` each",
              "hijack": "the pair through return-address replacement",
              "args": "entry `c++` + return `r += $return` on a leaf too small for two patches",
              "ret": "that return probe alone, `c++; r += $return`, on that leaf",
              "latency": "latency statistic in the return probe, on that leaf"}


def func_rows(step: Step, quick: bool) -> list[Row]:
    if step.failed:
        return [_failed(step, "function probes (bench/func_bench.py)")]
    rows: list[Row] = []
    for (abi, case), (ns, over) in parse_func_bench(step.out).items():
        if case.startswith("bare"):
            continue
        what = FUNC_CASES.get(case, f"`{case}`")
        cost = f"+{over:.1f} ns" if over is not None else f"{ns:.1f} ns/call"
        rows.append((f"func_bench: {what} ({ABIS[abi]})", cost, "", "", "", step.how(quick)))
    return rows


STARTUP = [("pydyn warm", "start-up, the script seen before (module cache hit)"),
           ("pydyn cold", "start-up, a new script (runtime precompiled)"),
           ("pydyn fresh", "start-up, an empty cache (the runtime compiled too)"),
           ("20 probes cold -p4", "a new 20-probe script to `-p4`"),
           ("20 probes fresh -p4", "the same, empty cache")]


def startup_rows(step: Step, quick: bool) -> list[Row]:
    if step.failed:
        return [_failed(step, "start-up (bench/startup.py)")]
    rows, why = parse_startup(step.out)
    bpf = rows.get("bpftrace")
    bcell = f"{bpf[0]:,.0f} ms" if bpf else f"not measured: {_short(why.get('bpftrace', '?'))}"
    out: list[Row] = []
    base = ", ".join(f"{k} {rows[k][0]:.1f} ms" for k in ("bare", "python -c pass") if k in rows)
    for key, what in STARTUP:
        if key in rows:
            wall, cpu = rows[key]
            cell = f"{wall:,.0f} ms" + (f" ({cpu:,.0f} ms CPU)" if cpu is not None else "")
        else:
            cell = f"not measured: {_short(why.get(key, 'no row'))}"
        out.append((f"{what}; wall, median", cell, bcell if key in ("pydyn warm", "pydyn cold")
                    else "", "", "", step.how(quick) + (f"; {base}" if base else "")))
    return out


COLD = [("postgres mark", 'postgres `mark("transaction__start")`'),
        ("postgres function", 'postgres `function("ExecutorStart")`'),
        ("python3.11 mark", 'python3.11 `mark("function__entry")`'),
        ("libjvm mark", 'libjvm `mark("thread__start")`')]


def cold_rows(step: Step, quick: bool) -> list[Row]:
    if step.failed:
        return [_failed(step, "a new script on a big binary (bench/coldstart.py)")]
    c = parse_coldstart(step.out)
    how = step.how(quick)
    rows: list[Row] = []
    for key, what in COLD:
        if key in c.missing or key not in c.cases:
            rows.append((f"a new script on {what}", "not measured: "
                         + _short(c.missing.get(key, "no row")), "", "", "", how))
            continue
        f, fc, fm, a, ac, am, b = c.cases[key]
        bcell = f"{b:.2f} s to attach" if isinstance(b, float) else f"not measured: {_short(b)}"
        rows.append((f"a new script on {what}, `-p4`, first time the binary is seen",
                     f"{f:.2f} s ({fc:.2f} s CPU, {fm:.0f} MB)", bcell, "", "", how))
        rows.append((f"a new script on {what} after that", f"{a:.2f} s ({ac:.2f} s CPU, "
                     f"{am:.0f} MB)", "", "", "", how))
    for n, (work, wall, cpu) in sorted(c.points.items()):
        rows.append((f"{n:,} probe points on postgres: resolve + translate",
                     f"{work:.2f} s (whole run {wall:.2f} s, {cpu:.2f} s CPU)", "", "", "", how))
    if c.statements is not None:
        rows.append(("map_hash: one probe of 2,048 `a[k] = 1` statements, `-p4` (m64 and m32)",
                     f"{c.statements[0]:.2f} s ({c.statements[1]:.2f} s CPU)", "", "", "", how))
    return rows


def pgbench_rows(step: Step, quick: bool) -> list[Row]:
    what = ("PostgreSQL 15 pgbench throughput, traced / untraced "
            "(`lwlock__acquire` + `transaction__commit` counted)")
    if step.failed:
        return [_failed(step, what)]
    r = parse_pgbench(step.out)

    def cell(tool: str) -> str:
        v = r.get(tool)
        if v is None:
            return "not measured: no result"
        if isinstance(v, str):
            return f"not measured: {_short(v)}"
        return f"{v:.3f}"
    def cpu(tool: str) -> str:
        v = r.get(f"cpu {tool}")
        return f" (server CPU per transaction x{v:.3f})" if isinstance(v, float) else ""
    pyd = cell("pydyn")
    if not pyd.startswith("not measured"):
        pyd += cpu("pydyn")
    side = r.get("side")
    if isinstance(side, float):
        pyd += f"; side by side with an untraced copy: {side:.3f}"
    if isinstance(r.get("profile"), str) and not pyd.startswith("not measured"):
        pyd += f"; pydyn's code {r['profile']} of the server's CPU (perf)"
    bpf = cell("bpftrace")
    if not bpf.startswith("not measured"):
        bpf += cpu("bpftrace")
    return [(what, pyd, bpf, "", "", step.how(quick))]


def parse_dwarf(text: str) -> list[tuple[str, str]]:
    """bench/dwarf_read.py: (what, seconds) in the order it printed them."""
    out: list[tuple[str, str]] = []
    for line in text.splitlines():
        m = re.match(r"^debug file (\S+): found in ([0-9.]+) s", line)
        if m:
            out.append((f"finding the debug file ({m.group(1)}, build-id path)", m.group(2)))
        m = re.match(r"^open \(.*\): ([0-9.]+) s", line)
        if m:
            out.append(("opening it (sections decompressed)", m.group(1)))
        m = re.match(r"^(\w+): ([0-9.]+) s  \(", line)
        if m:
            out.append((f"then the parameters of `{m.group(1)}` (its unit only)", m.group(2)))
        m = re.match(r"^total from the start: ([0-9.]+) s", line)
        if m:
            out.append(("all of the above", m.group(1)))
    return out


def dwarf_rows(step: Step, quick: bool) -> list[Row]:
    if step.failed:
        return [_failed(step, "DWARF of libc's debug file (bench/dwarf_read.py)")]
    return [(f"DWARF of libc's debug file: {what}", f"{sec} s", "", "", "", step.how(quick))
            for what, sec in parse_dwarf(step.out)]


def machine() -> str:
    model = next((ln.split(":", 1)[1].strip() for ln in
                  Path("/proc/cpuinfo").read_text().splitlines()
                  if ln.startswith("model name")), "unknown CPU")
    u = os.uname()
    osname = next((ln.split("=", 1)[1].strip('"') for ln in
                   Path("/etc/os-release").read_text().splitlines()
                   if ln.startswith("PRETTY_NAME=")), u.sysname) \
        if Path("/etc/os-release").exists() else u.sysname
    return f"{model}, {os.cpu_count()} CPU(s) (nproc), {osname}, Linux {u.release}"


def render(steps: list[Step], quick: bool, command: str, when: str, where: str,
           load: tuple[float, float]) -> str:
    rows: list[Row] = []
    by = {s.name: s for s in steps}
    for name, fn in (("run", run_rows), ("func_bench", func_rows), ("startup", startup_rows),
                     ("coldstart", cold_rows), ("pgbench", pgbench_rows),
                     ("dwarf_read", dwarf_rows)):
        if name in by:
            rows += fn(by[name], quick)
    lines = [
        "# Performance",
        "",
        "The last run of every benchmark in `bench/`, written by `bench/report.py`; "
        "do not edit by hand.",
        "",
        f"- command: `{command}`" + (" (a smoke run: small counts, one round)" if quick else ""),
        f"- machine: {where}",
        f"- date: {when}; load average {load[0]:.1f} at the start, {load[1]:.1f} at the end "
        "(the machine is shared: figures move with the load)",
        "- a probe's cost is ns per hit over the same program without probes; a peer's cost "
        "is followed by its multiple of pydyn's; pgbench is traced throughput over untraced "
        "(median of the rounds' ratios, short rounds in alternating order, servers and "
        "pgbench under SCHED_FIFO so the machine's other load hardly moves them; the server "
        "process tree's CPU per transaction over untraced's in parentheses; side by side: "
        "both servers at once)",
        "- the scripts it ran: " + ", ".join(f"`{s.command(quick)}`" for s in steps),
        "",
        "| what | pydyn | bpftrace | Frida | uftrace | script, load |",
        "|---|---|---|---|---|---|",
    ]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    lines += [
        "",
        "Elsewhere: SystemTap's testsuite figures are in "
        "[differences-from-stap.md](differences-from-stap.md#systemtaps-testsuite), "
        "aarch64 under qemu in [platforms.md](platforms.md#aarch64-under-qemu-user), "
        "`make demo` on a fresh Debian 12 in "
        "[platforms.md](platforms.md#set-up-on-a-fresh-debian-12), "
        "which sites get trampolines in "
        "[architecture.md](architecture.md#probe-mechanisms-runtime).",
        "",
    ]
    return "\n".join(lines)


def run_step(step: Step, quick: bool, logs: Path | None) -> None:
    cmd = [sys.executable, str(ROOT / "bench" / f"{step.name}.py"),
           *(step.quick if quick else step.args)]
    print(f"== {step.command(quick)}", flush=True)
    l0, t0 = os.getloadavg()[0], time.monotonic()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=step.timeout, cwd=ROOT)
        step.out = r.stdout
        if r.returncode != 0:
            step.failed = f"exit {r.returncode}: " + \
                (r.stderr.strip().splitlines() or ["no output"])[-1]
    except subprocess.TimeoutExpired as exc:
        step.out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else ""
        step.failed = f"no result within {step.timeout} s"
    step.load = (l0, os.getloadavg()[0])
    step.seconds = time.monotonic() - t0
    print(step.out, end="", flush=True)
    print(f"-- {step.name}: {step.seconds:.0f} s, load {step.load[0]:.1f}-{step.load[1]:.1f}"
          + (f", FAILED: {step.failed}" if step.failed else ""), flush=True)
    if logs is not None:
        logs.mkdir(parents=True, exist_ok=True)
        (logs / f"{step.name}.out").write_text(step.out)
        (logs / f"{step.name}.meta").write_text(f"{step.load[0]} {step.load[1]}\n{step.failed}\n")


def from_logs(step: Step, logs: Path) -> None:
    out = logs / f"{step.name}.out"
    if not out.exists():
        step.failed = f"no {out}"
        return
    step.out = out.read_text()
    meta = logs / f"{step.name}.meta"
    if meta.exists():
        first, _, failed = meta.read_text().partition("\n")
        a, b = first.split()
        step.load = (float(a), float(b))
        step.failed = failed.strip()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small counts, one round (a smoke run)")
    ap.add_argument("--only", help="comma-separated scripts to run (default: all)")
    ap.add_argument("--out", default=str(ROOT / "docs" / "performance.md"),
                    help="where to write the page; - prints it")
    ap.add_argument("--logs", type=Path, help="keep each script's output in this directory")
    ap.add_argument("--from-logs", type=Path,
                    help="make the page from a --logs directory, running nothing")
    opts = ap.parse_args()
    todo = steps()
    if opts.only:
        keep = set(opts.only.split(","))
        todo = [s for s in todo if s.name in keep]
    load0 = os.getloadavg()[0]
    for step in todo:
        if opts.from_logs:
            from_logs(step, opts.from_logs)
        else:
            run_step(step, opts.quick, opts.logs)
    command = shlex.join(["python", "bench/report.py", *sys.argv[1:]])
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    loads = [s.load for s in todo if s.load != (0.0, 0.0)]
    load = (loads[0][0], loads[-1][1]) if loads else (load0, os.getloadavg()[0])
    page = render(todo, opts.quick, command, when, machine(), load)
    if opts.out == "-":
        print(page)
    else:
        Path(opts.out).write_text(page)
        print(f"wrote {opts.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
