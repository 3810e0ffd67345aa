"""PostgreSQL 15 throughput under pgbench, untraced, with pydyn and with bpftrace.

`python bench/pgbench.py [-T SECONDS] [--rounds N]` (root: the server runs as the
`postgres` user through runuser, as tests/test_real_programs.py starts it).

One cluster is made (initdb, `pgbench -i`) in a temporary directory; then each
round starts the server afresh for each of these, in turn:

- untraced: the postmaster alone;
- pydyn: `pydyn -e SCRIPT -c 'runuser -u postgres -- postgres ...'`, SCRIPT counting
  the `lwlock__acquire` and `transaction__commit` marks in every backend;
- bpftrace: the same counts with `usdt:` probes, attached to the running server.

and runs the same pgbench load against it for -T seconds.  On a shared machine the
load moves between two runs more than a probe costs, so the runs are many and short,
and every other round runs them in the reverse order (untraced, pydyn, bpftrace, then
bpftrace, pydyn, untraced): what drifts over the rounds -- the load, the tables growing
with autovacuum off -- falls before and after each tool alike.  The figure kept is the
median of the rounds' ratios to their own untraced run, printed with its quartiles.
Each run also gives a second figure, less sensitive to the load than tps: the CPU
time of the server's whole process tree (pydyn's launcher, runuser, the postmaster,
its backends; bpftrace's probes run in the backends' kernel time) over the pgbench
run, per transaction, as a ratio to the untraced run's.  And each round also runs
side by side (mode `side`) two copies of the cluster at once, one untraced, one under
pydyn, each with its own pgbench, and takes the ratio of their tps: what loads the
machine loads both (the copies swap roles every round) -- but also the CPU pydyn's
launcher takes, which only the sequential runs charge to pydyn.  bpftrace cannot be
measured that way: its uprobes are on the binary's inode, so they would trap in both
servers.  Every traced run's counts are checked: the commits counted must be at
least the transactions pgbench reports.  The server runs with fsync and synchronous
commit off so the load is CPU, where a probe's cost shows (a disk-bound load would
hide it).  `--rt` runs the servers (pydyn's launcher with them) and pgbench under
SCHED_FIFO: the machine's other processes, which CFS would give an equal share of the
CPUs, then take only what the kernel's real-time throttling leaves them (5%), so the
rounds hardly move with the load -- on a shared machine, the one way to see a cost of
a few percent in tps.  `--profile` then runs pydyn once more under `perf record`, for
the share of the server's CPU spent in pydyn's code.  A tool that cannot run here prints why,
never a number.
"""

from __future__ import annotations

import argparse
import os
import pwd
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import NamedTuple

BIN = Path("/usr/lib/postgresql/15/bin")
POSTGRES = BIN / "postgres"
MARKS = ("lwlock__acquire", "transaction__commit")
SCRIPT = ("global acquire, commit\n"
          'probe process("{pg}").mark("lwlock__acquire") {{ acquire++ }}\n'
          'probe process("{pg}").mark("transaction__commit") {{ commit++ }}\n'
          'probe end {{ printf("acquire=%d commit=%d\\n", acquire, commit) }}\n')
# BEGIN runs once every probe is attached ("Attaching 3 probes..." comes before):
# pgbench starts after it, or a bpftrace slow to attach would miss the first commits
BPFTRACE = ("BEGIN {{ printf(\"attached\\n\"); }} "
            "usdt:{pg}:postgresql:lwlock__acquire {{ @acquire = count(); }} "
            "usdt:{pg}:postgresql:transaction__commit {{ @commit = count(); }}")
MODES = ("untraced", "pydyn", "bpftrace", "side")
CUSTOM: list[Path] = []   # --script: pydyn runs it instead of SCRIPT, its counts unchecked
SHIELD: list[str] = []    # --rt: the prefix of the servers' and pgbench's commands
RT = ["chrt", "--fifo", "1"]
_SCRIPT = Path(sys.executable).with_name("pydyn")
PYDYN = [str(_SCRIPT)] if _SCRIPT.is_file() else [sys.executable, "-m", "pydyn"]


class Unavailable(Exception):
    """This measurement cannot be made here; str(exc) says why."""


class Run(NamedTuple):
    """One pgbench run: tps, the server tree's CPU microseconds per transaction, and
    what else it says (counts, the launcher's CPU)."""

    tps: float
    cpu_us: float
    note: str


def as_postgres(*cmd: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["runuser", "-u", "postgres", "--", *cmd], capture_output=True,
                          text=True, timeout=timeout)


class Cluster:
    def __init__(self, root: Path, port: int) -> None:
        self.data = root / "data"
        self.sock = root / "sock"
        self.port = port
        self.log = root / "server.log"

    def create(self, scale: int) -> None:
        pw = pwd.getpwnam("postgres")
        for d in (self.data, self.sock):
            d.mkdir()
            os.chown(d, pw.pw_uid, pw.pw_gid)
        r = as_postgres(str(BIN / "initdb"), "-D", str(self.data), "-A", "trust",
                        "-U", "postgres")
        if r.returncode != 0:
            raise Unavailable(f"initdb failed: {r.stderr.strip()[-300:]}")
        srv = self.start([])
        try:
            self.wait_ready(srv)
            r = subprocess.run(["pgbench", *self.conn(), "-i", "-q", "-s", str(scale)],
                               capture_output=True, text=True, timeout=600)
            if r.returncode != 0:
                raise Unavailable(f"pgbench -i failed: {r.stderr.strip()[-300:]}")
        finally:
            self.stop(srv)

    def clone(self, root: Path, port: int) -> Cluster:
        """A second cluster, a copy of this stopped one's data, on its own port."""
        other = Cluster(root, port)
        pw = pwd.getpwnam("postgres")
        root.mkdir()
        root.chmod(0o755)
        subprocess.run(["cp", "-a", str(self.data), str(other.data)], check=True)
        other.sock.mkdir()
        os.chown(other.sock, pw.pw_uid, pw.pw_gid)
        return other

    def server_cmd(self) -> str:
        return (f"runuser -u postgres -- {POSTGRES} -D {self.data} -k {self.sock} "
                f"-p {self.port} -c listen_addresses= -c autovacuum=off -c fsync=off "
                "-c synchronous_commit=off -c full_page_writes=off")

    def conn(self) -> list[str]:
        return ["-h", str(self.sock), "-p", str(self.port), "-U", "postgres"]

    def start(self, prefix: list[str], env: dict[str, str] | None = None
              ) -> subprocess.Popen[str]:
        log = self.log.open("a")
        return subprocess.Popen([*SHIELD, *prefix, self.server_cmd()] if prefix
                                else [*SHIELD, *self.server_cmd().split()],
                                stdout=subprocess.PIPE, stderr=log, text=True, env=env)

    def wait_ready(self, srv: subprocess.Popen[str]) -> None:
        deadline = time.monotonic() + 120
        while subprocess.run(["pg_isready", "-q", *self.conn()]).returncode != 0:
            if srv.poll() is not None:
                raise Unavailable(f"the server exited: {self.log.read_text()[-500:]}")
            if time.monotonic() > deadline:
                raise Unavailable("the server did not start within 120 s")
            time.sleep(0.2)

    def stop(self, srv: subprocess.Popen[str]) -> str:
        """Stops the server (fast shutdown); what its starter printed."""
        as_postgres(str(BIN / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")
        try:
            out, _ = srv.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            srv.kill()
            out, _ = srv.communicate()
        return out or ""


def _stat(pid: int) -> list[str]:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()


HZ = os.sysconf("SC_CLK_TCK")


def _cpu(fields: list[str], reaped: bool = True) -> float:
    """CPU seconds in a /proc/PID/stat: utime + stime, and with `reaped` its reaped
    children's (cutime + cstime)."""
    return sum(int(v) for v in fields[11:15 if reaped else 13]) / HZ


def tree_cpu(pid: int) -> float:
    """CPU seconds of pid and all its descendants so far: the live ones' own, the
    reaped ones' through their parents' cutime and cstime."""
    stats: dict[int, list[str]] = {}
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stats[int(d)] = f = _stat(int(d))
            except OSError:
                continue
            kids.setdefault(int(f[1]), []).append(int(d))
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        if p in stats:
            total += _cpu(stats[p])
            todo.extend(kids.get(p, ()))
    return total


class Meter:
    """The server tree's CPU over a pgbench run (start it once the server is ready)."""

    def __init__(self, srv: subprocess.Popen[str]) -> None:
        self.pid = srv.pid
        self.tree = tree_cpu(self.pid)
        self.own = _cpu(_stat(self.pid), reaped=False)

    def per_xact(self, xacts: int) -> tuple[float, float]:
        """(CPU us per transaction of the whole tree, CPU seconds of the top process
        alone -- pydyn's launcher -- since the start)."""
        time.sleep(0.3)          # the backends pgbench leaves exit and are reaped
        cpu = tree_cpu(self.pid) - self.tree
        return 1e6 * cpu / max(xacts, 1), _cpu(_stat(self.pid), reaped=False) - self.own


def pgbench(cluster: Cluster, opts: argparse.Namespace) -> tuple[float, int]:
    """(tps, transactions) of one pgbench run."""
    load = ["-T", str(opts.duration)] if opts.transactions is None else \
        ["-t", str(opts.transactions)]
    r = subprocess.run([*SHIELD, "pgbench", *cluster.conn(), "-n", "-c", str(opts.clients),
                        "-j", str(opts.clients), "-b", opts.builtin, *load],
                       capture_output=True, text=True, timeout=opts.duration * 10 + 600)
    tps = re.search(r"tps = ([0-9.]+) \(without initial connection time\)", r.stdout)
    done = re.search(r"number of transactions actually processed: (\d+)", r.stdout)
    if r.returncode != 0 or not tps or not done:
        raise Unavailable(f"pgbench failed: {(r.stderr or r.stdout).strip()[-300:]}")
    return float(tps.group(1)), int(done.group(1))


def counts(text: str, sep: str) -> dict[str, int]:
    return {k: int(v) for k, v in re.findall(rf"@?(acquire|commit){sep}\s*(\d+)", text)}


def check(mode: str, got: dict[str, int], xacts: int) -> None:
    if CUSTOM:        # --script: its output is its own
        return
    if got.get("commit", 0) < xacts or got.get("acquire", 0) <= got.get("commit", 0):
        raise Unavailable(f"{mode} counted {got} for {xacts} transactions")


def run_untraced(cluster: Cluster, opts: argparse.Namespace) -> Run:
    srv = cluster.start([])
    try:
        cluster.wait_ready(srv)
        meter = Meter(srv)
        tps, xacts = pgbench(cluster, opts)
        cpu, _ = meter.per_xact(xacts)
    finally:
        cluster.stop(srv)
    return Run(tps, cpu, "")


def children(cluster: Cluster) -> list[int]:
    pm = int((cluster.data / "postmaster.pid").read_text().split()[0])
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if int(_stat(int(d))[1]) == pm:
                    out.append(int(d))
            except OSError:
                continue
    return out


class Profile:
    """`perf record` of the whole machine while pgbench runs, reported for the server's
    processes alone: where their CPU goes (pydyn's module, its trampolines -- perf's
    `[JIT]`: executable anonymous memory -- and the rest)."""

    def __init__(self, cluster: Cluster, root: Path) -> None:
        self.data = root / "perf.data"
        self.cluster = cluster
        self.pids: list[int] = []
        self.perf = subprocess.Popen(["perf", "record", "-q", "-e", "cpu-clock", "-F", "999",
                                      "-a", "-o", str(self.data)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # the backends pgbench connects, once connected
        self.timer = threading.Timer(1.0, lambda: self.pids.extend(children(cluster)))
        self.timer.start()

    def report(self) -> str:
        self.timer.join()
        self.perf.send_signal(signal.SIGINT)
        self.perf.wait(timeout=120)
        if not self.pids:
            return "profile: no server process seen"
        r = subprocess.run(["perf", "report", "-i", str(self.data), "--pid",
                            ",".join(map(str, self.pids)), "--sort", "dso", "--stdio"],
                           capture_output=True, text=True, timeout=600)
        shares = {m.group(2): float(m.group(1)) for m in
                  re.finditer(r"^\s+([0-9.]+)%\s+(.+?)\s*$", r.stdout, re.M)}
        total = sum(shares.values())
        if total == 0:
            return f"profile: no samples ({_first_line(r.stderr)})"
        mod = sum(v for k, v in shares.items() if k.startswith("pydyn_"))
        jit = sum(v for k, v in shares.items() if k.startswith("[JIT]"))
        return (f"profile: pydyn {100 * (mod + jit) / total:.2f}% of the server's CPU samples "
                f"(module {100 * mod / total:.2f}%, trampolines {100 * jit / total:.2f}%)")


def _first_line(text: str) -> str:
    return (text.strip().splitlines() or ["no output"])[0]


def run_pydyn(cluster: Cluster, opts: argparse.Namespace, script: Path,
              env: dict[str, str], profiled: bool = False) -> Run:
    srv = cluster.start([*PYDYN, *opts.pydyn_opt, str(script), "-c"], env)
    prof = ""
    try:
        cluster.wait_ready(srv)
        meter = Meter(srv)
        profile = Profile(cluster, cluster.data.parent) if profiled else None
        tps, xacts = pgbench(cluster, opts)
        if profile is not None:
            prof = "  " + profile.report()
        cpu, launcher = meter.per_xact(xacts)
    finally:
        out = cluster.stop(srv)
    if srv.returncode != 0:
        raise Unavailable(f"pydyn exited with {srv.returncode}: see {cluster.log}")
    got = counts(out, "=")
    check("pydyn", got, xacts)
    return Run(tps, cpu, " ".join(f"{k}={v}" for k, v in got.items())
               + f" launcher CPU {1e3 * launcher:.0f} ms" + prof)


def run_side_by_side(plain: Cluster, traced: Cluster, opts: argparse.Namespace,
                     script: Path, env: dict[str, str]) -> Run:
    """pydyn's tps over untraced tps, the two servers running at once (each with its
    pgbench): whatever else loads the machine loads both alike.  Its cpu_us is the
    ratio of their CPU per transaction."""
    srv_p = plain.start([])
    srv_t = traced.start([*PYDYN, *opts.pydyn_opt, str(script), "-c"], env)
    res: dict[str, tuple[float, int] | Exception] = {}

    def bench(name: str, c: Cluster) -> None:
        try:
            res[name] = pgbench(c, opts)
        except Exception as exc:     # reported by the caller, from the main thread
            res[name] = exc
    try:
        plain.wait_ready(srv_p)
        traced.wait_ready(srv_t)
        meters = Meter(srv_p), Meter(srv_t)
        threads = [threading.Thread(target=bench, args=a) for a in
                   (("plain", plain), ("traced", traced))]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        cpus = [m.per_xact(r[1])[0] if isinstance(r, tuple) else 0.0
                for m, r in zip(meters, (res.get("plain"), res.get("traced")), strict=True)]
    finally:
        plain.stop(srv_p)
        out = traced.stop(srv_t)
    for v in res.values():
        if isinstance(v, Exception):
            raise Unavailable(str(v))
    p, t = res["plain"], res["traced"]
    assert isinstance(p, tuple) and isinstance(t, tuple)
    if srv_t.returncode != 0:
        raise Unavailable(f"pydyn exited with {srv_t.returncode}: see {traced.log}")
    got = counts(out, "=")
    check("pydyn", got, t[1])
    return Run(t[0] / p[0], cpus[1] / cpus[0] if cpus[0] else float("nan"),
               f"tps {t[0]:.1f} traced, {p[0]:.1f} untraced at once; CPU per transaction "
               f"{cpus[1]:.1f} us traced, {cpus[0]:.1f} us untraced; "
               + " ".join(f"{k}={v}" for k, v in got.items()))


def run_bpftrace(cluster: Cluster, opts: argparse.Namespace) -> Run:
    exe = shutil.which("bpftrace")
    if exe is None:
        raise Unavailable("bpftrace is not installed (Debian package bpftrace)")
    srv = cluster.start([])
    try:
        cluster.wait_ready(srv)
        bt = subprocess.Popen([exe, "-e", BPFTRACE.format(pg=POSTGRES)], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
        assert bt.stdout is not None
        # warnings (RLIMIT_MEMLOCK) and "Attaching 3 probes..." come first
        said: list[str] = []
        while not (said and said[-1] == "attached\n"):
            said.append(bt.stdout.readline())
            if not said[-1]:
                bt.kill()
                raise Unavailable(f"bpftrace did not attach: {''.join(said).strip()[-300:]}")
        meter = Meter(srv)
        try:
            tps, xacts = pgbench(cluster, opts)
            cpu, _ = meter.per_xact(xacts)
        finally:
            bt.send_signal(signal.SIGINT)
            out, _ = bt.communicate(timeout=60)
    finally:
        cluster.stop(srv)
    got = counts(out, ":")
    check("bpftrace", got, xacts)
    return Run(tps, cpu, f"acquire={got['acquire']} commit={got['commit']}")


def summary(ratios: list[float]) -> str:
    """`MEDIAN (median of N; quartiles Q1-Q3; rounds R1 R2 ...)`."""
    text = f"{statistics.median(ratios):.3f} (median of {len(ratios)}; "
    if len(ratios) > 1:
        q1, _, q3 = statistics.quantiles(ratios, n=4)
        text += f"quartiles {q1:.3f}-{q3:.3f}; "
    return text + f"rounds {' '.join(f'{r:.3f}' for r in ratios)})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-T", "--duration", type=int, default=5, help="seconds per pgbench run")
    ap.add_argument("-t", "--transactions", type=int,
                    help="transactions per client instead of a duration")
    ap.add_argument("--rounds", type=int, default=10,
                    help="rounds of the runs (--modes), every other one in reverse order")
    ap.add_argument("-c", "--clients", type=int, default=2, help="pgbench clients (and threads)")
    ap.add_argument("-s", "--scale", type=int, default=1, help="pgbench -i scale")
    ap.add_argument("-b", "--builtin", default="tpcb-like",
                    help="pgbench built-in script (tpcb-like, simple-update, select-only)")
    ap.add_argument("--modes", default=",".join(MODES), help="which runs, comma-separated")
    ap.add_argument("--pydyn-opt", action="append", default=[],
                    help="an extra pydyn option (repeatable), e.g. --pydyn-opt=-v")
    ap.add_argument("--script", type=Path,
                    help="pydyn runs this script instead (to find where a cost goes: e.g. one "
                    "mark only); its counts are not checked")
    ap.add_argument("--rt", action="store_true",
                    help="run the servers and pgbench under SCHED_FIFO (root): the rounds "
                    "hardly move with the machine's other load")
    ap.add_argument("--profile", action="store_true",
                    help="then one more pydyn run under `perf record`: the share of the "
                    "server's CPU spent in pydyn's module and trampolines")
    opts = ap.parse_args()
    if opts.profile and shutil.which("perf") is None:
        raise SystemExit("--profile: perf is not installed (Debian package linux-perf)")
    modes = [m for m in opts.modes.split(",") if m]
    if opts.rt:
        try:
            r = subprocess.run([*RT, "true"], capture_output=True, text=True)
        except OSError as exc:
            raise SystemExit(f"--rt: {RT[0]}: {exc.strerror}") from exc
        if r.returncode != 0:
            raise SystemExit(f"--rt: {' '.join(RT)} is refused: {_first_line(r.stderr)}")
        SHIELD.extend(RT)
    if not POSTGRES.exists() or shutil.which("pgbench") is None:
        print(f"pgbench: unavailable: PostgreSQL 15 and pgbench are not installed ({POSTGRES})")
        return 0
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        print("pgbench: unavailable: no postgres user")
        return 0
    os.environ["PGDATABASE"] = "postgres"     # pgbench and pg_isready connect to it
    load0 = os.getloadavg()[0]
    rounds: list[dict[str, Run]] = []   # mode -> its run (side: the ratios)
    why: dict[str, str] = {}
    root = Path(tempfile.mkdtemp(prefix="pydyn-pgbench-"))
    try:
        root.chmod(0o755)
        cluster = Cluster(root, 55432 + os.getpid() % 1000)
        try:
            cluster.create(opts.scale)
        except Unavailable as exc:
            print(f"pgbench: unavailable: {exc}")
            return 0
        other = cluster.clone(root / "b", cluster.port + 1) if "side" in modes else None
        script = root / "count.stp"
        script.write_text(SCRIPT.format(pg=POSTGRES))
        if opts.script:
            CUSTOM.append(script)
            script = opts.script.resolve()
        env = dict(os.environ, PYDYN_CACHE_DIR=str(root / "cache"))
        # the module built once before timing (a cached module, as on a second run)
        subprocess.run([*PYDYN, "-p4", str(script)], env=env, capture_output=True)
        # how each site is patched: a trap would cost microseconds a hit, a trampoline ns
        listing = subprocess.run([*PYDYN, "-p2", str(script)], env=env, capture_output=True,
                                 text=True).stdout
        for mark, plan in re.findall(r'mark\("(\w+)"\).*\n\s+plan: ([^:\n]+)', listing):
            print(f"site {mark}: {plan}")
        load = ("-T", opts.duration) if opts.transactions is None else ("-t", opts.transactions)
        print(f"pgbench -b {opts.builtin} -c {opts.clients} -j {opts.clients} "
              f"{load[0]} {load[1]}, scale {opts.scale}, {opts.rounds} round(s)"
              f"{', SCHED_FIFO' if SHIELD else ''}; marks counted: {', '.join(MARKS)}")
        for rnd in range(opts.rounds):
            rounds.append({})
            # every other round backwards: a drift over the rounds (the load, the tables'
            # dead rows) falls on each side of the untraced run alike
            for mode in modes if rnd % 2 == 0 else modes[::-1]:
                if mode in why:
                    continue
                try:
                    if mode == "untraced":
                        run = run_untraced(cluster, opts)
                    elif mode == "pydyn":
                        run = run_pydyn(cluster, opts, script, env)
                    elif mode == "side":
                        assert other is not None   # each cluster traced every other round
                        pair = (cluster, other) if rnd % 2 == 0 else (other, cluster)
                        run = run_side_by_side(*pair, opts, script, env)
                    else:
                        run = run_bpftrace(cluster, opts)
                except Unavailable as exc:
                    why[mode] = str(exc)
                    print(f"round {rnd + 1} {mode:9} unavailable: {exc}")
                    continue
                rounds[-1][mode] = run
                what = (f"ratio {run.tps:7.3f}  CPU per transaction ratio {run.cpu_us:.3f}"
                        if mode == "side" else
                        f"tps {run.tps:9.1f}  CPU {run.cpu_us:6.1f} us per transaction")
                print(f"round {rnd + 1} {mode:9} {what}  {run.note}  "
                      f"load {os.getloadavg()[0]:.1f}", flush=True)
        if opts.profile and "pydyn" in modes and "pydyn" not in why:
            # one more run, not in the ratios (perf's own sampling costs the server too)
            try:
                note = run_pydyn(cluster, opts, script, env, profiled=True).note
                print(f"pgbench profile pydyn: {note.split('profile: ', 1)[-1]}")
            except Unavailable as exc:
                print(f"pgbench profile pydyn: unavailable: {exc}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    for mode in modes:
        if mode == "side":
            side = [r["side"] for r in rounds if "side" in r]
            print("pgbench side-by-side ratio pydyn: " + (
                f"{summary([r.tps for r in side])}; CPU per transaction ratio "
                f"{summary([r.cpu_us for r in side])}" if side else
                f"unavailable: {why.get('side', 'no runs')}"))
        if mode in ("untraced", "side"):
            continue
        pairs = [(r[mode], r["untraced"]) for r in rounds if mode in r and "untraced" in r]
        if not pairs:
            print(f"pgbench ratio {mode}: unavailable: "
                  f"{why.get(mode) or why.get('untraced') or 'no untraced runs'}")
            continue
        print(f"pgbench ratio {mode}: {summary([t.tps / u.tps for t, u in pairs])}; "
              f"tps median {statistics.median(t.tps for t, _ in pairs):.1f} vs untraced "
              f"{statistics.median(u.tps for _, u in pairs):.1f}")
        print(f"pgbench CPU per transaction {mode}: "
              f"{summary([t.cpu_us / u.cpu_us for t, u in pairs])} of untraced's; "
              f"median {statistics.median(t.cpu_us for t, _ in pairs):.1f} us vs untraced "
              f"{statistics.median(u.cpu_us for _, u in pairs):.1f} us")
    print(f"load average {load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end, "
          f"{os.cpu_count()} CPU(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
