"""pydyn -x PID: attach to running m64 and m32 programs, follow their children,
detach cleanly (every byte and semaphore back, the program finishes right), and
the clear refusals (no such process, another user's process, a static program)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from cbuild import PROGS, build_c, run_pydyn, start_pydyn

from pydyn.launcher.attach import read_maps
from pydyn.launcher.elf.reader import get_elf_info
from pydyn.launcher.elf.stapsdt import get_probe_sites
from pydyn.launcher.plan.x86 import plan_site

TIMEOUT = 60
SRC = PROGS / "attach_loop.c"

pytestmark = pytest.mark.skipif(sys.platform != "linux" or os.uname().machine != "x86_64",
                                reason="ptrace attach is implemented for x86-64 hosts")


@pytest.fixture(scope="module")
def binaries(tmp_path_factory: pytest.TempPathFactory, sdt_cflags: object) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("attach-bin")
    return {abi: build_c(SRC, out / f"loop_{abi}", m32=abi == "m32", extra=["-pthread"])
            for abi in ("m64", "m32")}


def script_for(binary: Path, stop: str) -> str:
    """Per thread key: first and last argument seen and the number of hits."""
    return f"""
global lo, hi, n, g, total
probe process("{binary}").mark("tick") {{
    t = $arg1; if (!(t in lo)) lo[t] = $arg2; hi[t] = $arg2; n[t]++; total++
    {stop}
}}
probe process("{binary}").mark("guarded") {{ g++ }}
probe end {{
    foreach (t in lo) printf("T %d %d %d %d\\n", t, lo[t], hi[t], n[t])
    printf("G %d target %d\\n", g, target())
}}
"""


@dataclass
class Target:
    proc: subprocess.Popen[str]
    binary: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def finish(self) -> list[str]:
        self.proc.send_signal(signal.SIGUSR1)
        out, _ = self.proc.communicate(timeout=TIMEOUT)
        assert self.proc.returncode == 0, out
        return out.splitlines()


def start_target(binary: Path, threads: int, *args: str) -> Target:
    proc = subprocess.Popen([str(binary), str(threads), *args], stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline() == "ready\n"
    return Target(proc, binary)


def text_mapping(pid: int, binary: Path) -> tuple[int, int, int]:
    """(start, end, file offset) of the binary's executable mapping in pid."""
    real = os.path.realpath(binary)
    for m in read_maps(pid):
        if m.path == real and "x" in m.perms:
            return m.start, m.end, m.offset
    raise AssertionError(f"{binary} has no executable mapping in {pid}")


def site_addresses(pid: int, binary: Path) -> tuple[list[int], list[int]]:
    """Runtime addresses of the binary's mark sites and of their semaphores in pid
    (one per site: two sites of one mark share one)."""
    info = get_elf_info(str(binary))
    start, _, offset = text_mapping(pid, binary)
    seg = next(s for s in info.segments if s.offset <= offset < s.offset + s.filesz)
    bias = start - (seg.vaddr - (offset - seg.offset)) if info.is_pie else 0
    sites = get_probe_sites(str(binary)).sites
    return [bias + s.pc for s in sites], [bias + s.semaphore for s in sites]


def read_mem(pid: int, addr: int, size: int) -> bytes:
    with open(f"/proc/{pid}/mem", "rb") as f:
        f.seek(addr)
        return f.read(size)


def assert_text_as_in_file(pid: int, binary: Path) -> None:
    start, end, offset = text_mapping(pid, binary)
    with open(binary, "rb") as f:
        f.seek(offset)
        want = f.read(end - start)
    got = read_mem(pid, start, len(want))
    diff = [hex(start + i) for i, (a, b) in enumerate(zip(got, want, strict=True)) if a != b]
    assert not diff, f"bytes differ from the file after detach at {diff[:8]}"


@dataclass
class Attached:
    out: str
    err: str
    rc: int
    patched: list[bytes]      # first bytes of each site while attached
    semas_attached: list[int]


def run_attached(cache: Path, target: Target, script: str, *extra: str,
                 during: object = None, interrupt_after: float | None = None) -> Attached:
    """pydyn -v -x target; while attached, records the sites' bytes and semaphores
    (and calls `during()`); optionally ends the session with SIGINT."""
    proc = start_pydyn(cache, "-v", "-e", script, "-x", str(target.pid), *extra,
                       start_new_session=False)
    assert proc.stderr is not None and proc.stdout is not None
    sites, semas = site_addresses(target.pid, target.binary)
    err_lines: list[str] = []
    patched: list[bytes] = []
    sema_values: list[int] = []
    for line in proc.stderr:
        err_lines.append(line)
        # printed once the sites are armed, before the session can end
        if line.startswith(f"pydyn: attached to pid {target.pid} ("):
            patched = [read_mem(target.pid, a, 1) for a in sites]
            sema_values = [int.from_bytes(read_mem(target.pid, a, 2), "little") for a in semas]
            if callable(during):
                during()
            if interrupt_after is not None:
                time.sleep(interrupt_after)
                proc.send_signal(signal.SIGINT)
            break
    rest = threading.Thread(target=lambda: err_lines.extend(proc.stderr or ()))
    rest.start()
    out = proc.stdout.read()
    proc.wait(timeout=TIMEOUT)
    rest.join()
    return Attached(out, "".join(err_lines), proc.returncode, patched, sema_values)


def hit_ranges(out: str) -> dict[int, tuple[int, int, int]]:
    rows = [line.split()[1:] for line in out.splitlines() if line.startswith("T ")]
    return {int(t): (int(lo), int(hi), int(n)) for t, lo, hi, n in rows}


def attach_one_thread(cache: Path, target: Target, seconds: str, min_hits: int) -> Attached:
    """A -T session on a one-thread target: every hit seen, the code restored."""
    res = run_attached(cache, target, script_for(target.binary, ""), "-T", seconds)
    assert res.rc == 0, res.err
    lo, hi, n = hit_ranges(res.out)[0]
    assert n == hi - lo + 1 > min_hits, res.out
    # the exit report's scalar counter: this session's adds (a thread's counter block
    # from an earlier session in the same process is not this segment's)
    assert f"\ntotal={n}\n" in res.out, res.out
    assert_text_as_in_file(target.pid, target.binary)
    return res


CASES = [
    # abi, threads, how the session ends, extra options
    pytest.param("m64", 1, "-T", (), id="m64-T"),
    pytest.param("m32", 1, "-T", (), id="m32-T"),
    pytest.param("m64", 4, "exit", (), id="m64-4threads-exit"),
    pytest.param("m32", 3, "sigint", ("--probe-mode=trap",), id="m32-3threads-trap-sigint"),
    pytest.param("m64", 2, "target-exits", (), id="m64-2threads-target-exits"),
]


@pytest.mark.parametrize("abi, threads, end, extra", CASES)
def test_attach_sees_every_hit_and_detaches_cleanly(cache: Path, binaries: dict[str, Path],
                                                    abi: str, threads: int, end: str,
                                                    extra: tuple[str, ...]) -> None:
    binary = binaries[abi]
    stop = "if (total >= 3000) exit()" if end == "exit" else ""
    options = ["-T", "1.5"] if end == "-T" else []
    target = start_target(binary, threads)
    sites, semas = site_addresses(target.pid, binary)

    def end_target() -> None:
        time.sleep(1.0)
        target.proc.send_signal(signal.SIGUSR1)

    try:
        res = run_attached(cache, target, script_for(binary, stop), *options, *extra,
                           interrupt_after=1.0 if end == "sigint" else None,
                           during=end_target if end == "target-exits" else None)
        assert res.rc == 0, res.err
        # while attached every site was patched and every semaphore counted us
        assert res.patched and all(b in (b"\xcc", b"\xe9") for b in res.patched), \
            (res.patched, res.err)
        # each armed site counts once on its mark's semaphore
        assert res.semas_attached == [semas.count(a) for a in semas], res.err
        if "--probe-mode=trap" in extra:
            assert set(res.patched) == {b"\xcc"}
        ranges = hit_ranges(res.out)
        assert sorted(ranges) == list(range(threads)), res.out
        for t, (lo, hi, n) in ranges.items():
            assert n == hi - lo + 1 > 100, f"thread {t}: {lo}..{hi} but {n} hits\n{res.err}"
        assert f"target {target.pid}" in res.out
        assert int(res.out.split("G ")[1].split()[0]) > 0   # the guarded mark was enabled
        assert f"pydyn: attached to pid {target.pid} ({binary}, {abi}): {threads} thread(s)" \
            in res.err
        if end == "target-exits":   # the session ends with the process: nothing to restore
            assert "detached" not in res.err and "1 exited" in res.err, res.err
        else:
            assert (f"pydyn: detached from pid {target.pid}: restored {len(sites)} site(s)"
                    in res.err and f"{len(semas)} semaphore(s)" in res.err), res.err
            # after detach: the program's code is the file's again, semaphores are 0
            assert_text_as_in_file(target.pid, binary)
            assert {read_mem(target.pid, a, 2) for a in semas} == {b"\0\0"}
    finally:
        lines = target.finish()
    results = [line for line in lines if line.startswith("thread ")]
    assert len(results) == threads and all(line.endswith(" ok") for line in results), lines
    # a process that exited attached saw its semaphores still counted
    assert (lines[-1] == "semaphores 0 0") == (end != "target-exits"), lines[-1]


def test_children_forked_and_execed_after_attach_are_followed(
        cache: Path, binaries: dict[str, Path]) -> None:
    binary = binaries["m64"]
    target = start_target(binary, 1)
    assert target.proc.stdout is not None
    stdout = target.proc.stdout

    def spawn() -> str:
        target.proc.send_signal(signal.SIGUSR2)
        child = stdout.readline()
        assert stdout.readline() == "children done 0 0\n"
        return child

    seen: list[str] = []

    try:
        res = run_attached(cache, target, script_for(binary, ""), "-T", "1.5",
                           during=lambda: seen.append(spawn()))
        assert res.rc == 0, res.err
        ranges = hit_ranges(res.out)
        assert ranges[98] == (1, 50, 50)      # forked: the inherited patched code
        assert ranges[99] == (1, 100, 100)    # exec'd: loaded its module from the env
        # the process, the forked child, the exec'd child before and after its exec
        assert res.err.count("pydyn: attached pid ") == 4, res.err
        assert seen[0].startswith("child PYDYN_SHM set LD_PRELOAD /"), seen
        # after the detach the process's environment is its own again
        assert spawn() == "child PYDYN_SHM unset LD_PRELOAD unset\n"
    finally:
        lines = target.finish()
    assert lines[-1] == "semaphores 0 0"


def assert_one_line_error(res: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert res.returncode == 1, res
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pydyn: error: "), res.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    assert "Traceback" not in res.stderr


def free_pid() -> int:
    """A pid no process has: one that just exited and was reaped."""
    proc = subprocess.run(["true"])
    pid = 0
    for _ in range(100):
        p = subprocess.Popen(["true"])
        p.wait()
        if not os.path.exists(f"/proc/{p.pid}"):
            pid = p.pid
            break
    assert proc.returncode == 0 and pid
    return pid


def test_attach_refused_for_a_bad_pid(cache: Path) -> None:
    pid = free_pid()
    res = run_pydyn(cache, "-u", "-e", "probe begin { }", "-x", str(pid))
    assert_one_line_error(res, f"pid {pid}: no such process")
    res = run_pydyn(cache, "-u", "-e", "probe begin { }", "-x", "1", "-c", "true")
    assert_one_line_error(res, "-c and -x")
    zombie = subprocess.Popen(["true"])   # exited, not reaped yet
    try:
        for _ in range(200):
            if Path(f"/proc/{zombie.pid}/stat").read_text().split(") ")[1][0] == "Z":
                break
            time.sleep(0.01)
        res = run_pydyn(cache, "-u", "-e", "probe begin { }", "-x", str(zombie.pid))
        assert_one_line_error(res, f"pid {zombie.pid}: has exited (a zombie)")
    finally:
        zombie.wait()


TRACER = """
import ctypes, sys, time
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
if libc.ptrace(0x4206, int(sys.argv[1]), None, None) != 0:   # PTRACE_SEIZE
    sys.exit(f"seize: errno {ctypes.get_errno()}")
print("seized", flush=True)
time.sleep(60)
"""


def test_attach_refused_when_another_tracer_holds_the_process(
        cache: Path, binaries: dict[str, Path]) -> None:
    target = start_target(binaries["m64"], 1)
    tracer = subprocess.Popen([sys.executable, "-c", TRACER, str(target.pid)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert tracer.stdout is not None and tracer.stdout.readline() == "seized\n"
        res = run_pydyn(cache, "-u", "-e", "probe begin { }", "-x", str(target.pid))
        assert_one_line_error(res, f"pid {target.pid}: is already traced by pid {tracer.pid} (")
    finally:
        tracer.kill()     # the kernel lets a dead tracer's tracee go
        tracer.wait()
        target.finish()


@pytest.mark.unit
@pytest.mark.parametrize("scope, words", [(1, "only a parent may attach"),
                                          (2, "only root"), (3, "disabled until reboot")])
def test_yama_scope_is_named(monkeypatch: pytest.MonkeyPatch, scope: int, words: str) -> None:
    # No Yama on the test machine: the scope is what /proc/sys/kernel/yama would say.
    from pydyn.launcher import attach

    monkeypatch.setattr(attach, "_yama_scope", lambda: scope)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    status = {"Uid": "1000\t1000\t1000\t1000", "TracerPid": "0"}
    reason = attach.permission_reason(12345, status)
    assert reason is not None and f"kernel.yama.ptrace_scope is {scope}" in reason
    assert words in reason


def main_as(uid: int, args: list[str]) -> subprocess.CompletedProcess[str]:
    """cli.main(args) in a forked child running as uid: this interpreter and the
    package may live where that user cannot read them (/root), so no new process."""
    from pydyn.launcher import attach, cache, cli, script, session  # noqa: F401 (imported now)

    r, w = os.pipe()
    child = os.fork()
    if child == 0:   # pragma: no cover (the child)
        try:
            sys.stderr = os.fdopen(w, "w")   # pytest captures sys.stderr, not fd 2
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            rc = cli.main(args)
            sys.stderr.flush()
            os._exit(rc)
        finally:
            os._exit(99)
    os.close(w)
    with os.fdopen(r) as f:
        err = f.read()
    _, status = os.waitpid(child, 0)
    return subprocess.CompletedProcess(args, os.waitstatus_to_exitcode(status), "", err)


def test_attach_refused_for_another_users_process(binaries: dict[str, Path]) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to run pydyn as another user")
    target = start_target(binaries["m64"], 1)   # owned by root
    try:
        res = main_as(65534, ["--disable-cache", "-u", "-e", "probe begin { }",
                              "-x", str(target.pid)])
        assert_one_line_error(res, f"pid {target.pid}: belongs to uid 0 and you are uid 65534",
                              "only root")
    finally:
        target.finish()


def test_root_attaches_to_another_users_process(cache: Path, binaries: dict[str, Path],
                                                tmp_path_factory: pytest.TempPathFactory
                                                ) -> None:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv (util-linux) to run a target as another user")
    shared = Path(tempfile.mkdtemp(prefix="pydyn-attach-test-"))   # one nobody can enter
    try:
        shared.chmod(0o755)
        binary = shared / "loop"
        shutil.copy(binaries["m64"], binary)
        proc = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                                 str(binary), "1"], stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        target = Target(proc, binary)
        try:
            attach_one_thread(cache, target, "1", 100)
        finally:
            lines = target.finish()
        assert lines[-1] == "semaphores 0 0"
    finally:
        shutil.rmtree(shared)


def test_attach_refused_for_a_static_process(cache: Path, tmp_path: Path) -> None:
    src = tmp_path / "static.c"
    src.write_text("#include <unistd.h>\nint main(void) { pause(); return 0; }\n")
    binary = build_c(src, tmp_path / "static", extra=["-static"])
    proc = subprocess.Popen([str(binary)])
    try:
        time.sleep(0.1)
        res = run_pydyn(cache, "-u", "-e", "probe begin { }", "-x", str(proc.pid))
        assert_one_line_error(res, f"pid {proc.pid}", "is not dynamically linked")
    finally:
        proc.kill()
        proc.wait()


def test_attach_while_a_stopped_thread_holds_the_loader_lock(
        cache: Path, binaries: dict[str, Path]) -> None:
    # dlopen (and arming's dl_iterate_phdr) would wait forever for a thread stopped
    # inside a dl_iterate_phdr callback: after a grace period the others run.
    binary = binaries["m64"]
    target = start_target(binary, 1, "lock")
    try:
        res = attach_one_thread(cache, target, "0.5", 10)
        assert "waited for a lock a stopped thread held" in res.err, res.err
    finally:
        lines = target.finish()
    assert lines[-1] == "semaphores 0 0"


def test_ctrl_c_during_the_attach_waits_for_it_and_restores(
        cache: Path, binaries: dict[str, Path]) -> None:
    # The lock target keeps the attach busy for seconds: SIGINT lands in it.
    binary = binaries["m64"]
    script = script_for(binary, "")
    target = start_target(binary, 1, "lock")
    try:
        assert run_pydyn(cache, "-p4", "-e", script, "-x", str(target.pid)).returncode == 0
        proc = start_pydyn(cache, "-v", "-e", script, "-x", str(target.pid),
                           start_new_session=False)
        assert proc.stderr is not None
        for line in proc.stderr:
            if line.startswith("Pass 4:"):
                break
        time.sleep(1.0)   # the dlopen call is now waiting (LOCK_GRACE is 2 s)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=TIMEOUT)
        assert proc.returncode in (0, 130), err
        assert "Traceback" not in err, err
        assert f"pydyn: attached to pid {target.pid}" in err, err
        assert f"pydyn: detached from pid {target.pid}: restored" in err, err
        assert_text_as_in_file(target.pid, binary)
    finally:
        lines = target.finish()
    assert lines[-1] == "semaphores 0 0"
    assert all(line.endswith(" ok") for line in lines if line.startswith("thread "))


def test_attach_refused_when_the_class_has_no_toolchain(binaries: dict[str, Path],
                                                       tmp_path: Path) -> None:
    # a compiler that cannot build -m32: the m32 process cannot get its module
    cc = tmp_path / "cc-no-m32"
    cc.write_text('#!/bin/sh\nfor a in "$@"; do [ "$a" = -m32 ] && exit 1; done\n'
                  'exec gcc "$@"\n')
    cc.chmod(0o755)
    target = start_target(binaries["m32"], 1)
    try:
        res = run_pydyn(tmp_path, "--disable-cache", "-u", "-e", "probe begin { }",
                        "-x", str(target.pid), timeout=TIMEOUT, env={"CC": str(cc)})
        assert_one_line_error(res, "no m32 toolchain", "gcc-12-multilib")
    finally:
        target.finish()


def test_attach_again_after_detach(cache: Path, binaries: dict[str, Path]) -> None:
    # the second session dlopens the same module file: the loaded, inert one comes back
    binary = binaries["m64"]
    target = start_target(binary, 1)
    try:
        for _ in range(2):
            attach_one_thread(cache, target, "0.7", 100)
    finally:
        lines = target.finish()
    assert lines[-1] == "semaphores 0 0"


def test_timeout_ends_a_command_session_as_exit_does(cache: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    with out.open("w") as f:   # a file: the command, which runs on, holds no pipe of ours
        rc = start_pydyn(cache, "-v", "-T", "0.5", "-e", 'probe end { printf("end\\n") }',
                         "-c", "sleep 10", stdout=f, stderr=subprocess.STDOUT,
                         start_new_session=False).wait(timeout=TIMEOUT)
    text = out.read_text()
    assert rc == 0 and "end\n" in text, text
    m = re.search(r"pydyn: started \S*sleep as pid (\d+)", text)
    assert m, text
    pid = int(m.group(1))
    try:   # the session ended while the command still ran
        assert Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] in "SR"
    finally:
        os.kill(pid, signal.SIGKILL)
    res = run_pydyn(cache, "-T", "0", "-u", "-e", "probe begin { }")
    assert_one_line_error(res, "-T 0: the timeout must be a positive number")


def test_detach_restores_branches_retargeted_into_a_stub(cache: Path, tmp_path: Path) -> None:
    # fp_branch.S's `jmp` into the "looped" window is rewritten (through an island of
    # dead padding) when the site is armed; the detach must give those bytes back too.
    binary = build_c([PROGS / "fp_branch.S", PROGS / "fp_branch_wait.c"], tmp_path / "branch")
    looped = next(s for s in get_probe_sites(str(binary)).sites if s.name == "looped")
    redirect = plan_site(looped).redirects[0]
    proc = subprocess.Popen([str(binary), "50"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None and proc.stdin is not None
    assert proc.stdout.readline() == "ready\n"
    target = Target(proc, binary)
    start, _, offset = text_mapping(proc.pid, binary)
    info = get_elf_info(str(binary))
    seg = next(s for s in info.segments if s.offset <= offset < s.offset + s.filesz)
    bias = start - (seg.vaddr - (offset - seg.offset)) if info.is_pie else 0
    rewritten: list[bool] = []

    def during() -> None:
        with open(binary, "rb") as f:
            f.seek(redirect.field - seg.vaddr + seg.offset)
            original = f.read(redirect.size)
        rewritten.append(read_mem(proc.pid, bias + redirect.field, redirect.size) != original)

    try:
        res = run_attached(cache, target, f'probe process("{binary}").mark("looped") {{ }}',
                           "-u", "-T", "1", during=during)
        assert res.rc == 0, res.err
        assert rewritten == [True], "the branch into the window was not retargeted"
        assert_text_as_in_file(proc.pid, binary)
    finally:
        out, _ = proc.communicate("go\n", timeout=TIMEOUT)
    assert out == "fp_branch looped 49 plain 1 result 49\n" and proc.returncode == 0


@pytest.mark.parametrize("mode", ["", "lock"])
@pytest.mark.parametrize("abi", ["m64", "m32"])
def test_threads_stopped_inside_a_window_resume_at_its_copy(cache: Path, tmp_path: Path,
                                                            abi: str, mode: str) -> None:
    # attach_spin's threads spend most of their time inside the windows the entry jumps
    # cover: without moving them to the stub's copy, the first attaches crash the target.
    # "lock": the loader lock is held by a stopped thread, so the spinning threads run
    # while the module arms; code written then would crash them within a few attaches.
    binary = build_c(PROGS / "attach_spin.c", tmp_path / f"spin_{abi}", m32=abi == "m32",
                     extra=["-pthread"])
    proc = subprocess.Popen([str(binary), "3", *([mode] if mode else [])],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    script = (f'global n; probe process("{binary}").function("spin_sum"), '
              f'process("{binary}").function("spin_pause") {{ n++ }}')
    moved = []
    try:
        # about 2 s each (4 s with the lock's waits); a move is seen in about every
        # other attach
        for _ in range(6 if mode else 8):
            res = run_pydyn(cache, "-v", "-T", "0.05", "-e", script, "-x", str(proc.pid),
                            timeout=TIMEOUT)
            assert proc.poll() is None, f"the target died ({proc.returncode}):\n{res.stderr}"
            assert res.returncode == 0, res.stderr
            assert not mode or "waited for a lock a stopped thread held" in res.stderr
            m = re.search(r"resumed \((\d+) stopped inside a patched window", res.stderr)
            moved.append(int(m.group(1)) if m else 0)
            assert re.search(r"^n=[1-9]", res.stdout, re.M), res.stdout
            if not mode and len(moved) >= 3 and sum(map(bool, moved)) >= 2:
                break
        assert mode or any(moved), "no attach found a thread inside a window"
        assert_text_as_in_file(proc.pid, binary)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGUSR1)
        out, _ = proc.communicate(timeout=TIMEOUT)
    assert out == "spin ok\n" and proc.returncode == 0, (out, proc.returncode, moved)
