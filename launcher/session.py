"""Pass 5: run a session.

Create the segment, load the native module into the launcher (cffi), run
`begin`, start the `-c` command with the modules preloaded, drain output
while it runs, then wait for the handlers still running (bounded), run `end`,
report what was dropped, failed or still running, and remove the segment.
"""

from __future__ import annotations

import mmap
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import posix_ipc

from ..shmlayout import (
    PD_ABI_AARCH64,
    PD_ABI_I386,
    PD_ABI_X86_64,
    PD_FLAG_MERGE_TEXT,
    PD_PROC_ALIVE,
    PD_PROC_EXECED,
    PD_PROC_EXITED,
    PD_PROC_KILLED,
    PD_PROC_REFUSED,
    PD_SESSION_RUNNING,
    PD_SESSION_STOPPED,
    PD_SESSION_STOPPING,
    SegmentView,
    init_header,
    plan_segment,
)
from ..shmlayout.globals import PD_PROBE_BEGIN, PD_PROBE_END, PD_PROBE_ERROR
from .build import ModuleSet, which
from .errors import SessionError, TargetError
from .modffi import launcher_ffi
from .output import LIMIT_ADVICE, OutputSink
from .program import Program

ABI_NAMES = {PD_ABI_X86_64: "m64", PD_ABI_I386: "m32", PD_ABI_AARCH64: "aarch64"}
PROC_STATE_NAMES = {PD_PROC_ALIVE: "still running", PD_PROC_EXITED: "exited",
                    PD_PROC_KILLED: "killed", PD_PROC_EXECED: "exec'd",
                    PD_PROC_REFUSED: "refused"}


def _cstr(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode(errors="replace")


# Probe kinds as the runtime numbers them (runtime/pd_runtime.h).

ENV_SHM = "PYDYN_SHM"
ENV_PRELOAD_MARK = "PYDYN_PRELOAD"  # our LD_PRELOAD entry, for children that scrub it

_ATTACH_ERRORS = {-1: "cannot map the segment", -2: "the segment is not a pydyn segment",
                  -3: "the module was built from another source than the segment"}
SHELL_CHARS = set("|&;<>()$`\\\"'*?[]{}~#\n=%")


class SessionOptions(NamedTuple):   # not a dataclass: see shmlayout/layout.py
    command: str | None = None
    ring_size: int = 4 << 20
    proctab_count: int = 256
    verbose: int = 0
    target_checked: bool = False   # the launcher checked the -c target (or a cache hit vouches)
    set_globals: tuple[tuple[str, str], ...] = ()   # NAME=VALUE, applied before `begin`
    attach_pid: int | None = None   # -x PID: attach to a running process (launcher/attach.py)
    timeout: float | None = None    # -T SECS: end the session after SECS, as exit() would


class SessionResult(NamedTuple):
    exit_status: int
    errors: int
    skipped: int
    child_status: int | None = None
    processes: list[dict[str, Any]] = []   # a shared default: results are never mutated


def remove_stale_segments(shm_dir: Path = Path("/dev/shm")) -> list[str]:
    """Unlink segments of sessions whose launcher is dead (killed with SIGKILL).

    Names are `pydyn.<launcher pid>.<random>`; only our own user's are touched.
    """
    removed = []
    # listdir, not glob: Path.glob compiles a pattern, ~3 ms of every run.
    for path in (shm_dir / n for n in os.listdir(shm_dir)
                 if n.startswith("pydyn.") and n.count(".") >= 2):
        try:
            pid = int(path.name.split(".")[1])
            if path.stat().st_uid != os.getuid() or pid == os.getpid():
                continue
            os.kill(pid, 0)
        except ProcessLookupError:
            try:
                path.unlink()
                removed.append(path.name)
            except OSError:
                pass
        except (ValueError, OSError):
            continue
    return removed


def split_command(command: str) -> list[str]:
    """Split like a shell would: plain words directly, shell syntax through `sh -c`."""
    try:
        words = shlex.split(command)
    except ValueError:
        words = []
    if not words or any(ch in SHELL_CHARS for ch in command.replace('"', "").replace("'", "")):
        return ["/bin/sh", "-c", command]
    return words


EM_AARCH64 = 183
# qemu-user per foreign ELF machine: the emulator ($PYDYN_QEMU_AARCH64, else on PATH)
# and the guest's sysroot ($QEMU_LD_PREFIX, else Debian's libc6-arm64-cross).
QEMU_USER = {EM_AARCH64: ("PYDYN_QEMU_AARCH64", "qemu-aarch64", "/usr/aarch64-linux-gnu")}
HOST_MACHINE = {"x86_64": 62, "aarch64": EM_AARCH64}


def _elf_machine(path: str) -> int | None:
    """e_machine of an ELF file from its first 20 bytes (no full parse), or None."""
    try:
        with open(path, "rb") as f:
            head = f.read(20)
    except OSError:
        return None
    if len(head) < 20 or head[:4] != b"\x7fELF":
        return None
    return int.from_bytes(head[18:20], "little" if head[5] == 1 else "big")


def emulator_prefix(argv: Sequence[str]) -> list[str]:
    """`[qemu-aarch64, -L, SYSROOT]` when argv[0] is an aarch64 program on another host,
    else []: an x86-64 launcher runs an aarch64 -c target under qemu-user."""
    exe = argv[0]
    path = exe if "/" in exe else which(exe)
    machine = _elf_machine(path) if path else None
    if machine not in QEMU_USER or HOST_MACHINE.get(os.uname().machine) == machine:
        return []
    env_name, default, sysroot = QEMU_USER[machine]
    qemu = os.environ.get(env_name) or which(default)
    if qemu is None:
        raise TargetError(path or exe, f"is an aarch64 program and {default} is not "
                          "installed (apt-get install qemu-user)")
    return [qemu, "-L", os.environ.get("QEMU_LD_PREFIX", sysroot)]


def check_command_target(argv: Sequence[str]) -> None:
    """Refuse a -c program that cannot take a preloaded module, before starting it."""
    exe = argv[0]
    path = exe if "/" in exe else which(exe)
    if path is None:
        raise TargetError(exe, "command not found")
    p = Path(path)
    if not p.exists():
        raise TargetError(path, "no such file")
    if p.is_file():
        with p.open("rb") as f:
            if f.read(2) == b"#!":
                return  # a script: its interpreter takes the preload
        if not os.access(p, os.X_OK):
            raise TargetError(path, "is not executable")
    from .elf.reader import check_preloadable, get_elf_info  # pyelftools: ~50 ms
    check_preloadable(get_elf_info(path))  # the path as the user wrote it, in any message


def process_gone(pid: int) -> bool:
    """Whether pid has exited (a zombie counts as exited)."""
    try:
        os.kill(pid, 0)
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][:1] == "Z"
    except ProcessLookupError:
        return True
    except (PermissionError, OSError):
        return False


class _Module:
    """The native module loaded into the launcher."""

    def __init__(self, path: Path) -> None:
        self.ffi = launcher_ffi()   # out-of-line ABI mode: no C parser at run time
        try:
            self.lib: Any = self.ffi.dlopen(str(path))
        except OSError as exc:
            raise SessionError(f"cannot load {path}: {exc}") from exc
        info = self.lib.pd_launcher_module_info()
        self.checksum = bytes(self.ffi.buffer(info.checksum, 32))
        self.globals_size = int(info.globals_size)


class Session:
    def __init__(self, program: Program, modules: ModuleSet, options: SessionOptions,
                 sink: OutputSink | None = None,
                 log: Callable[[str], None] | None = None) -> None:
        self.program = program
        self.modules = modules
        self.options = options
        self.sink = sink or OutputSink(program.formats)
        self.log = log or (lambda msg: print(msg, file=sys.stderr))
        self._stop_drain = threading.Event()
        self._seen_procs: set[tuple[int, int, int]] = set()  # (entry, pid, start_ns)
        self._stop_timers = threading.Event()
        self._drain_error: BaseException | None = None
        self._attached: Any = None   # attach.AttachedProcess under -x
        self._detach_failed = False
        self._stuck: tuple[int, str] = (0, "")   # handlers still running after the stop

    # -- segment -------------------------------------------------------------
    def _create_segment(self, module: _Module) -> tuple[posix_ipc.SharedMemory, mmap.mmap]:
        plan = plan_segment(self.options.proctab_count, module.globals_size,
                            self.options.ring_size)
        for _ in range(8):
            name = f"/pydyn.{os.getpid()}.{os.urandom(8).hex()}"
            try:
                shm = posix_ipc.SharedMemory(name, posix_ipc.O_CREX, mode=0o600,
                                             size=plan.segment_size)
                break
            except posix_ipc.ExistentialError:
                continue
            except (posix_ipc.Error, OSError) as exc:
                raise SessionError(f"cannot create the shared segment: {exc}") from exc
        else:
            raise SessionError("cannot create a shared segment with a fresh name")
        mem = mmap.mmap(shm.fd, plan.segment_size)
        shm.close_fd()
        self.view = SegmentView(mem)
        init_header(self.view, checksum=module.checksum,
                    proctab_count=self.options.proctab_count,
                    globals_size=module.globals_size, ring_size=self.options.ring_size,
                    launcher_pid=os.getpid(), fresh=True)
        return shm, mem

    # -- output --------------------------------------------------------------
    def _drain_once(self, module: _Module, buf: Any) -> int:
        n = int(module.lib.pd_launcher_drain(buf, len(buf)))
        if n:
            self.sink.feed(bytes(module.ffi.buffer(buf, n)))
        return n

    def _stop_draining(self, module: _Module) -> None:
        self._stop_drain.set()
        # Wake the drain thread from pd_launcher_wait (a module built before
        # pd_launcher_wake existed, given to pydyn-run, lets the wait time out).
        wake = getattr(module.lib, "pd_launcher_wake", None)
        if wake is not None:
            wake()

    def _drain_loop(self, module: _Module) -> None:
        buf = module.ffi.new("uint8_t[]", 1 << 20)
        try:
            while not self._stop_drain.is_set():
                if self._drain_once(module, buf) == 0:
                    module.lib.pd_launcher_wait(10)  # producers wake it only in bulk
            while self._drain_once(module, buf):
                pass
        except BaseException as exc:  # surfaced by run(), never lost in a thread
            self._drain_error = exc

    def _set_globals(self, mem: mmap.mmap) -> None:
        """NAME=VALUE from the command line, written after the script's own initialisers."""
        base = int(self.view.header.globals_off)
        for name, value in self.options.set_globals:
            if name not in self.program.scalars:
                known = ", ".join(sorted(self.program.scalars)) or "none"
                raise SessionError(f"{name}={value}: no scalar global '{name}' "
                                   f"(scalar globals: {known})")
            offset, kind, size = self.program.scalars[name]
            at = base + offset
            if kind == "string":
                raw = value.encode()[:size - 1] + b"\0"
                mem[at:at + len(raw)] = raw
            else:
                try:
                    number = int(value, 0)
                except ValueError as exc:
                    raise SessionError(f"{name}={value}: '{name}' is a long, "
                                       "the value is not a number") from exc
                mem[at:at + 8] = (number & ((1 << 64) - 1)).to_bytes(8, "little")

    # -- timers --------------------------------------------------------------
    def _timer_loop(self, module: _Module, index: int, period_ns: int, rand_ns: int) -> None:
        """timer.* probes run in the launcher, as in stapdyn, on their own thread."""
        import random  # timers only: tempfile and secrets stay off a warm run
        rng = random.Random()
        deadline = time.monotonic_ns()
        while not self._stop_timers.is_set():
            jitter = rng.randint(-rand_ns, rand_ns) if rand_ns else 0
            deadline += max(period_ns + jitter, 1000)
            delay = (deadline - time.monotonic_ns()) / 1e9
            if delay > 0 and self._stop_timers.wait(delay):
                return
            if self.view.header.session_state != PD_SESSION_RUNNING:
                return
            module.lib.pd_launcher_run_probe(index)

    # -- processes -----------------------------------------------------------
    def child_env(self) -> dict[str, str]:
        env = dict(os.environ)
        ours = self.modules.preload_entry
        user = env.get("LD_PRELOAD", "")
        env["LD_PRELOAD"] = f"{ours}:{user}" if user else ours
        env[ENV_SHM] = self.shm_name
        env[ENV_PRELOAD_MARK] = ours
        return env

    def _guest_preload(self, env: dict[str, str]) -> list[str]:
        """qemu-user options giving the guest our LD_PRELOAD, which is taken out of the
        emulator's own environment (qemu would load the m64 module into itself; the
        runtime also stays inert there).  `-E` splits at commas: a path with one
        stays in the shared environment, which qemu forwards to the guest."""
        ours = self.modules.preload_entry
        if "," in env["LD_PRELOAD"]:
            return []
        user = os.environ.get("LD_PRELOAD", "")
        if user:
            env["LD_PRELOAD"] = user
        else:
            del env["LD_PRELOAD"]
        return ["-E", f"LD_PRELOAD={ours}:{user}" if user else f"LD_PRELOAD={ours}"]

    def _mark_dead_processes(self, child: subprocess.Popen[bytes] | None) -> None:
        """A process killed by a signal never runs its destructor: mark it here."""
        for _, proc in self.view.used_procs():
            if proc.state != PD_PROC_ALIVE:
                continue
            pid = proc.pid
            if child is not None and pid == child.pid and child.returncode is not None:
                gone = True
            else:
                gone = process_gone(pid)
            if gone:
                proc.state = PD_PROC_KILLED

    def run(self) -> SessionResult:
        m64 = self.modules.get_module("m64")
        if m64 is None:
            raise SessionError("no m64 module: the launcher needs the native module")
        module = _Module(m64)
        argv = split_command(self.options.command) if self.options.command else None
        if argv is not None and not self.options.target_checked:
            check_command_target(argv)
        stale = remove_stale_segments()
        if stale and self.options.verbose:
            self.log(f"pydyn: removed {len(stale)} segment(s) of dead sessions")
        shm, mem = self._create_segment(module)
        self.shm_name = shm.name
        child: subprocess.Popen[bytes] | None = None
        drain = threading.Thread(target=self._drain_loop, args=(module,), daemon=True)
        interrupted = False
        timers: list[threading.Thread] = []
        try:
            rc = module.lib.pd_launcher_attach(shm.name.encode())
            if rc != 0:
                raise SessionError(f"launcher attach failed: {_ATTACH_ERRORS.get(rc, rc)}")
            module.lib.pd_launcher_init_globals()
            self._set_globals(mem)
            if self.sink.merge_text:  # before the drain thread runs: it sets bit 0 itself
                self.view.header.flags |= PD_FLAG_MERGE_TEXT
            drain.start()
            module.lib.pd_launcher_run(PD_PROBE_BEGIN)
            header = self.view.header
            if not header.exit_requested:
                header.session_state = PD_SESSION_RUNNING
                if argv is not None:
                    env = self.child_env()
                    emulator = emulator_prefix(argv)
                    if emulator:
                        argv = [*emulator, *self._guest_preload(env), *argv]
                    try:
                        child = subprocess.Popen(argv, env=env)
                    except OSError as exc:
                        raise TargetError(argv[0], exc.strerror or str(exc)) from exc
                    header.target_pid = child.pid
                    if self.options.verbose:
                        self.log(f"pydyn: started {argv[0]} as pid {child.pid}")
                elif self.options.attach_pid is not None:
                    header.target_pid = self.options.attach_pid
                    self._attach(self.options.attach_pid)
                for index, period, rand in self.program.timers:
                    t = threading.Thread(target=self._timer_loop,
                                         args=(module, index, period, rand), daemon=True)
                    t.start()
                    timers.append(t)
            try:
                self._wait(child)
            except KeyboardInterrupt:
                interrupted = True
            header.session_state = PD_SESSION_STOPPING
            self._stop_timers.set()
            for t in timers:
                t.join()
            self._detach()
            # Interrupted: the user wants everything stopped.  exit() or an error
            # only ends the session; the target runs on with its probes inert.
            if child is not None and child.poll() is None and interrupted:
                child.terminate()
                try:
                    child.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    child.kill()
                    child.wait()
            self._mark_dead_processes(child)
            self._quiesce(module)
            if header.error_count:
                module.lib.pd_launcher_run(PD_PROBE_ERROR)
            module.lib.pd_launcher_run(PD_PROBE_END)
            header.session_state = PD_SESSION_STOPPED
            self._stop_draining(module)
            drain.join()
            if self._drain_error is not None:
                raise self._drain_error
            return self._result(child)
        finally:
            self._stop_timers.set()
            self._detach()
            self._stop_draining(module)
            if drain.is_alive():
                drain.join(timeout=5)
            module.lib.pd_launcher_detach()
            try:
                shm.unlink()
            except posix_ipc.ExistentialError:
                pass
            try:
                mem.close()
            except BufferError:
                pass  # a StructView still holds the buffer; the mapping goes with us

    def _quiesce(self, module: _Module) -> None:
        """Before `end`: wait until no handler that saw RUNNING still runs (bounded,
        runtime/pd_quiesce.c); the ones that do are an error of the exit report."""
        quiesce = getattr(module.lib, "pd_launcher_quiesce", None)   # pydyn-run: older module
        if quiesce is None:
            return
        msg = module.ffi.new("char[]", 512)
        n = int(quiesce(msg, len(msg)))
        if n:
            self._stuck = (n, module.ffi.string(msg).decode(errors="replace"))

    def _report_new_processes(self) -> None:
        """-v: one line per process as it attaches."""
        for i, proc in self.view.used_procs():
            key = (i, int(proc.pid), int(proc.start_ns))  # an exec'd entry may be reused
            if proc.state == 0 or key in self._seen_procs:
                continue
            self._seen_procs.add(key)
            abi = ABI_NAMES.get(proc.abi, "?")
            module = self.modules.get_module(abi)
            state = "refused (checksum mismatch)" if proc.state == PD_PROC_REFUSED else "attached"
            self.log(f"pydyn: {state} pid {proc.pid} (ppid {proc.ppid}) {abi} "
                     f"{_cstr(proc.exe)} module {module.name if module else '?'}, "
                     f"{proc.sites_armed} site(s) armed")

    def _attach(self, pid: int) -> None:
        """-x PID: load the module of the process's class into it and arm its sites."""
        from .attach import AttachedProcess, inspect, share_with
        from .build import INSTALL_HINT

        target = inspect(pid)
        modules = self.modules
        if modules.get_module(target.abi) is None:
            raise TargetError(f"pid {pid} ({target.exe})", f"is a {target.abi} process and no "
                              f"{target.abi} module was built: {INSTALL_HINT[target.abi]}")
        if target.uid != os.geteuid():
            modules = share_with(target, modules, self.shm_name)
        module = modules.get_module(target.abi)
        assert module is not None
        self._attached = AttachedProcess(target, module, self.log, self.options.verbose)
        self._attached.attach(self.shm_name, modules.preload_entry,
                              os.environ.get("PYDYN_PROBE_MODE", "auto"))

    def _detach(self) -> None:
        """-x: restore the attached process (once; also when the session failed)."""
        attached, self._attached = self._attached, None
        if attached is None:
            return
        try:
            attached.detach()
        except (SessionError, TargetError, OSError) as exc:
            self._detach_failed = True
            self.log(f"pydyn: error: could not restore pid {attached.target.pid}: {exc}")

    def _wait(self, child: subprocess.Popen[bytes] | None) -> None:
        header = self.view.header
        last_scan = time.monotonic()
        deadline = None if self.options.timeout is None else last_scan + self.options.timeout
        attached = self.options.attach_pid
        while not header.exit_requested:
            if child is not None and child.poll() is not None:
                return
            if deadline is not None and time.monotonic() >= deadline:
                return
            if attached is not None:
                if process_gone(attached):
                    return
            elif child is None and not self.program.needs_wait:
                return
            if child is not None:
                try:   # returns within ~1 ms of the exit, where a sleep costs 10 ms on average
                    child.wait(timeout=0.02)
                except subprocess.TimeoutExpired:
                    pass
            else:
                time.sleep(0.02)
            if self.options.verbose:
                self._report_new_processes()
            if time.monotonic() - last_scan > 0.5:
                self._mark_dead_processes(child)
                last_scan = time.monotonic()

    def _result(self, child: subprocess.Popen[bytes] | None) -> SessionResult:
        h = self.view.header
        stuck, stuck_msg = self._stuck
        errors = int(h.error_count) + stuck
        skipped = int(h.skipped_count)
        status = child.returncode if child is not None else None
        if stuck:
            self.log(f"ERROR: {stuck_msg}")
        if errors or skipped:
            self.log(f"WARNING: Number of errors: {errors}, skipped probes: {skipped}")
            for kind in sorted(self.sink.error_kinds):
                self.log(f"hint: {kind}: {LIMIT_ADVICE[kind]}")
        if h.lock_recoveries:
            self.log(f"WARNING: {h.lock_recoveries} segment lock(s) recovered from a process "
                     "that died holding them")
        if h.mismatch_count:
            self.log(f"WARNING: {h.mismatch_count} process(es) refused the session: "
                     "module built from another source")
        if self.sink.bad_records:
            self.log(f"WARNING: {self.sink.bad_records} output record(s) could not be decoded")
        if status is not None and status < 0:
            self.log(f"WARNING: Child process exited with signal {-status} "
                     f"({signal.Signals(-status).name})")
        procs = [p.as_dict() for _, p in self.view.used_procs()]
        if skipped and len(procs) >= self.options.proctab_count and not any(
                p["state"] == PD_PROC_EXECED for p in procs):
            self.log(f"WARNING: the process table is full ({self.options.proctab_count} "
                     "entries): processes started after it filled were not registered "
                     "(their probes still ran; each is counted in skipped probes, and -v "
                     "does not list them)")
        if self.options.verbose and procs:
            self._report_new_processes()
            states: dict[str, int] = {}
            for p in procs:
                name = PROC_STATE_NAMES.get(int(p["state"]), "?")
                states[name] = states.get(name, 0) + 1
            summary = ", ".join(f"{n} {k}" for k, n in sorted(states.items()))
            self.log(f"pydyn: {len(procs)} process image(s) in the session: {summary}")
            if h.stat_slot_fallbacks:   # runtime/pd_pstat.c: correct, but under a lock
                self.log(f"pydyn: {h.stat_slot_fallbacks} thread(s) found no free per-thread "
                         "slot (statistics shared the locked one, counters added atomically)")
        return SessionResult(1 if errors or self._detach_failed else 0, errors, skipped,
                             status, procs)
