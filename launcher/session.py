"""Pass 5: run a session.

Create the segment, load the native module into the launcher (cffi), run
`begin`, start the `-c` command with the modules preloaded, drain output
while it runs, then wait for the handlers still running (bounded), run `end`,
report what was dropped, failed or still running, and remove the segment.
"""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
import select
import shlex
import signal
import subprocess
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
    PD_PROC_FREE,
    PD_PROC_KILLED,
    PD_PROC_REFUSED,
    PD_PROCF_END_PROBES,
    PD_PROCF_ENDED,
    PD_SESSION_RUNNING,
    PD_SESSION_STOPPED,
    PD_SESSION_STOPPING,
    SegmentView,
    StructView,
    init_header,
    plan_segment,
)
from ..shmlayout.globals import PD_PROBE_BEGIN, PD_PROBE_END, PD_PROBE_ERROR
from .build import ModuleSet, find_program, which
from .elf.header import EM_AARCH64, EM_X86_64, PT_INTERP, get_machine, read_program_headers
from .errors import SessionError, TargetError, say
from .modffi import launcher_ffi
from .output import LIMIT_ADVICE, OutputSink
from .program import HistFormat, Program

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



_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _hold_stop_signals() -> None:
    """Ignore SIGINT, SIGTERM and SIGHUP (main thread only)."""
    if threading.current_thread() is threading.main_thread():
        for sig in _STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)


class _Deferred:
    def __init__(self) -> None:
        self.handlers: dict[int, Any] = {}
        self.caught = False

    def note(self, signum: int, frame: object) -> None:
        self.caught = True


def _defer_stop_signals() -> _Deferred:
    """Note SIGINT, SIGTERM and SIGHUP instead of raising (main thread only)."""
    d = _Deferred()
    if threading.current_thread() is threading.main_thread():
        d.handlers = {sig: signal.signal(sig, d.note) for sig in _STOP_SIGNALS}
    return d


def _undefer_stop_signals(d: _Deferred) -> bool:
    """The handlers back; whether a stop signal came meanwhile."""
    _release_stop_signals(d.handlers)
    d.handlers = {}
    return d.caught


def _release_stop_signals(held: dict[int, Any]) -> None:
    for sig, handler in held.items():
        signal.signal(sig, handler)


class SessionOptions(NamedTuple):   # not a dataclass: see shmlayout/layout.py
    command: str | None = None
    ring_size: int = 4 << 20
    proctab_count: int = 256
    verbose: int = 0
    target_checked: bool = False   # the launcher checked the -c target (or a cache hit vouches)
    set_globals: tuple[tuple[str, str], ...] = ()   # NAME=VALUE, applied before `begin`
    attach_pid: int | None = None   # -x PID: attach to a running process (launcher/attach.py)
    timeout: float | None = None    # -T SECS: end the session after SECS, as exit() would
    no_warnings: bool = False       # -w: no warn() output, no warning about probed
    #                                   objects never loaded


class SessionResult(NamedTuple):
    exit_status: int
    errors: int
    skipped: int
    child_status: int | None = None
    processes: list[dict[str, Any]] = []   # a shared default: results are never mutated
    consumer_gone: bool = False   # stdout's reader went away: exit as if by SIGPIPE


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
    if "/" not in words[0]:
        # as stapdyn starts a -c command: from PATH, else from the current directory
        words[0] = find_program(words[0]) or words[0]
    return words


# qemu-user per foreign ELF machine: the emulator ($PYDYN_QEMU_AARCH64, else on PATH)
# and the guest's sysroot ($QEMU_LD_PREFIX, else Debian's libc6-arm64-cross).
QEMU_USER = {EM_AARCH64: ("PYDYN_QEMU_AARCH64", "qemu-aarch64", "/usr/aarch64-linux-gnu")}
HOST_MACHINE = {"x86_64": EM_X86_64, "aarch64": EM_AARCH64}


class ExecHeader(NamedTuple):
    """What the kernel reads to run a program: the ELF header and program headers."""

    elf_class: int        # 32 | 64
    machine: int          # e_machine
    elf_type: int         # e_type: 2 EXEC, 3 DYN
    has_interp: bool      # PT_INTERP: ld.so runs, and honours LD_PRELOAD


_EM_ABIS = {62: "m64", 3: "m32", EM_AARCH64: "aarch64"}
_EM_NAMES = {62: "x86_64", 3: "i386", EM_AARCH64: "aarch64"}


def read_exec_header(path: str) -> ExecHeader | None:
    """The ELF and program headers of `path` (no section headers, which the kernel never
    reads), or None if it is no ELF file or they are damaged."""
    try:
        with open(path, "rb") as f:
            headers = read_program_headers(f)
    except OSError:
        return None
    if headers is None:
        return None
    return ExecHeader(headers.elf_class, headers.machine, headers.elf_type,
                      any(seg.type == PT_INTERP for seg in headers.segments))


def target_abi(path: str) -> str | None:
    """Which module a process of the program at `path` loads ('m64', 'm32', ...)."""
    header = read_exec_header(path)
    return _EM_ABIS.get(header.machine) if header else None


def emulator_prefix(argv: Sequence[str]) -> list[str]:
    """`[qemu-aarch64, -L, SYSROOT]` when argv[0] is an aarch64 program on another host,
    else []: an x86-64 launcher runs an aarch64 -c target under qemu-user."""
    exe = argv[0]
    path = exe if "/" in exe else which(exe)
    machine = get_machine(path) if path else None
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
    from .elf.reader import missing_reason
    missing = missing_reason(path)
    if missing is not None:
        raise TargetError(path, missing)
    if p.is_file():
        if not os.access(p, os.X_OK):
            raise TargetError(path, "is not executable")
        with p.open("rb") as f:
            if f.read(4) != b"\x7fELF":
                # A script (#!: its interpreter takes the preload), or a file a shell
                # runs with sh (the kernel says ENOEXEC): a shell would run it.
                return
    from .elf.reader import check_preloadable, get_elf_info  # pyelftools: ~50 ms
    try:
        info = get_elf_info(path)   # the path as the user wrote it, in any message
    except TargetError:
        header = read_exec_header(path)
        if header is None:
            raise
        # Damaged beyond the program headers (section headers, say): the kernel runs
        # it all the same, so only what the kernel and ld.so read is checked.
        _check_exec_header(path, header)
        return
    check_preloadable(info)


def _check_exec_header(path: str, header: ExecHeader) -> None:
    """check_preloadable's checks, on the program headers alone."""
    if header.machine not in _EM_NAMES:
        raise TargetError(path, f"unsupported machine {header.machine}: pydyn supports "
                                "x86_64, i386 and aarch64 targets")
    if header.elf_type not in (2, 3):
        raise TargetError(path, f"is not an executable (ELF type {header.elf_type})")
    if not header.has_interp:
        raise TargetError(path, "is statically linked: pydyn needs a dynamically linked "
                                "target (LD_PRELOAD)")
    from .elf.reader import secure_exec
    if secure_exec(os.stat(path)):
        raise TargetError(path, "is setuid/setgid: the dynamic linker ignores LD_PRELOAD "
                                "for it (unless its owner runs it)")


def process_reaped(pid: int) -> bool:
    """Whether pid no longer exists (one kill(pid, 0); a zombie still does)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        pass
    return False


def zombie_wait_status(pid: int) -> int | None:
    """How pid ended, as waitpid will report it, while it is a zombie (its /proc stat's
    exit_code); None once it is reaped."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().split(") ")[-1].split()
        return int(fields[49]) if fields[0] == "Z" and len(fields) > 49 else None
    except (OSError, ValueError):
        return None


def process_gone(pid: int) -> bool:
    """Whether pid has exited (a zombie counts as exited)."""
    try:
        os.kill(pid, 0)
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][:1] == "Z"
    except ProcessLookupError:
        return True
    except (PermissionError, OSError):
        return False


# The launcher's rounds of process-table keeping while the session runs (Session._wait):
# short while processes come and go, long while the table stays as it is.
WAIT_MIN = 0.02
WAIT_MAX = 0.2
# How long the drain thread looks at an empty ring every 10 ms before it sleeps until
# the next record (Session._drain_loop).
DRAIN_POLL_MS = 100


def _open_pidfd(pid: int) -> int:
    """A pidfd of pid (readable once it exits), or -1 (Linux < 5.3, or pid is gone)."""
    try:
        return os.pidfd_open(pid)
    except (OSError, AttributeError):
        return -1


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

    def probe_point(self, index: int) -> str:
        """Probe `index`'s point as the script names it ("?" for none)."""
        pp = self.lib.pd_launcher_probe_pp(index) if index >= 0 else self.ffi.NULL
        return self.ffi.string(pp).decode(errors="replace") if pp != self.ffi.NULL else "?"

    def draw_hist(self, hist: HistFormat, buckets: list[int]) -> str:
        """The text of a print(@hist_*(x)) record, drawn by the module's C (pd_hist.c)."""
        counts = self.ffi.new("int64_t[]", buckets)
        cap = 1 << 14
        while True:
            buf = self.ffi.new("char[]", cap)
            n = int(self.lib.pd_launcher_hist_draw(buf, cap, counts, len(buckets),
                                                   hist.kind == "log", hist.lo, hist.step))
            if n < cap:
                return bytes(self.ffi.buffer(buf, n)).decode("ascii")
            cap = n + 1


class Session:
    def __init__(self, program: Program, modules: ModuleSet, options: SessionOptions,
                 sink: OutputSink | None = None,
                 log: Callable[[str], None] | None = None) -> None:
        self.program = program
        self.modules = modules
        self.options = options
        self.sink = sink or OutputSink(program.formats)
        self.sink.dedup_warnings = not self.options.verbose
        self.sink.suppress_warnings = self.options.no_warnings
        self.log = log or say
        self._stop_drain = threading.Event()
        self._seen_procs: set[tuple[int, int, int]] = set()  # (entry, pid, start_ns)
        # Entries of processes that are gone, copied out before their entry was freed
        # for a later process (_recycle_processes): the exit accounting reads them.
        self._gone_procs: list[dict[str, Any]] = []
        self._stop_timers = threading.Event()
        self._drain_error: BaseException | None = None
        self._attached: Any = None   # attach.AttachedProcess under -x
        self._detach_failed = False
        self._stuck: tuple[int, str] = (0, "")   # handlers still running after the stop
        self._staged: Path | None = None   # modules shared with other users (share.py)
        self.child_shm = ""   # PYDYN_SHM of the -c command: NAME, or NAME:FD
        # written by the drain thread to end the main thread's sleep in _wait (exit(),
        # the output's reader gone); an eventfd, open while run() runs
        self._wake_fd = -1

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
        # Wake the drain thread from pd_launcher_idle or _wait (a module built before
        # pd_launcher_wake existed, given to pydyn-run, lets the wait time out).
        wake = getattr(module.lib, "pd_launcher_wake", None)
        if wake is not None:
            wake()

    def _drain_loop(self, module: _Module) -> None:
        buf = module.ffi.new("uint8_t[]", 1 << 20)
        header = self.view.header
        woken = False
        # pd_launcher_idle: an empty ring looked at every 10 ms in C for DRAIN_POLL_MS
        # (producers wake the drain only in bulk while records come), then a sleep until
        # its next record (a module built before it existed, given to pydyn-run, returns
        # to Python every 10 ms)
        idle = getattr(module.lib, "pd_launcher_idle", None)
        polled = False
        try:
            while not self._stop_drain.is_set():
                if self._drain_once(module, buf):
                    polled = False
                elif idle is None:
                    module.lib.pd_launcher_wait(10)
                else:
                    idle(0, 1000) if polled else idle(10, DRAIN_POLL_MS)
                    polled = True
                if not woken and (header.exit_requested or self.sink.consumer_gone):
                    woken = True   # the session ends: _wait sleeps no longer
                    os.eventfd_write(self._wake_fd, 1)
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
        env[ENV_SHM] = self.child_shm or self.shm_name
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

    def _recycle_processes(self) -> int:
        """Copy out the entries of processes that are gone (exited, killed, exec'd,
        refused) and free them for later processes: a long session starts far more
        processes than the table has entries.  Only the launcher writes an entry in
        those states, and the runtime claims only free ones, so no lock is needed: each
        state is one store (shmlayout/view.py), never a moment of 0 that a process
        registering meanwhile would take for a free entry.  Returns the entries still
        in use."""
        alive = 0
        for i, proc in self.view.used_procs():
            if proc.state in (PD_PROC_ALIVE, PD_PROC_FREE):
                alive += 1
                continue
            if self.options.verbose:
                self._report_process(i, proc)   # -v lists it even if it came and went
            self._gone_procs.append(proc.as_dict())
            self._seen_procs.discard((i, int(proc.pid), int(proc.start_ns)))
            proc.state = PD_PROC_FREE
        return alive

    def _mark_dead_processes(self, child: subprocess.Popen[bytes] | None,
                             quick: bool = False) -> None:
        """A process killed by a signal never runs its destructor: mark it here.
        `quick`: only processes already reaped (no /proc read for zombies)."""
        for _, proc in self.view.used_procs():
            if proc.state != PD_PROC_ALIVE:
                continue
            pid = proc.pid
            if child is not None and pid == child.pid and child.returncode is not None:
                gone = True
            else:
                gone = process_reaped(pid) if quick else process_gone(pid)
            if not gone:
                continue
            state = PD_PROC_KILLED
            if proc.flags & PD_PROCF_END_PROBES and not proc.flags & PD_PROCF_ENDED:
                # it ended where pydyn could not see it (_report_no_end): how, where the
                # launcher can know it (the status stays 0: unknown)
                wstatus = None
                if child is not None and pid == child.pid and child.returncode is not None:
                    rc = child.returncode
                    wstatus = -rc if rc < 0 else rc << 8
                elif not quick:
                    wstatus = zombie_wait_status(pid)
                if wstatus is not None and os.WIFEXITED(wstatus):
                    state, proc.exit_status = PD_PROC_EXITED, os.WEXITSTATUS(wstatus)
                elif wstatus is not None and os.WIFSIGNALED(wstatus):
                    proc.exit_status = os.WTERMSIG(wstatus)
            proc.state = state

    def run(self) -> SessionResult:
        m64 = self.modules.get_module("m64")
        if m64 is None:
            raise SessionError("no m64 module: the launcher needs the native module")
        module = _Module(m64)
        self.sink.draw_hist = module.draw_hist
        argv = split_command(self.options.command) if self.options.command else None
        if argv is not None and not self.options.target_checked:
            check_command_target(argv)
        stale = remove_stale_segments()
        if stale and self.options.verbose:
            self.log(f"pydyn: removed {len(stale)} segment(s) of dead sessions")
        shm, mem = self._create_segment(module)
        self.shm_name = shm.name
        inherited_fd = -1
        deferred = _Deferred()      # noted from the begin probes to the wait
        if argv is not None and os.geteuid() == 0:
            try:
                inherited_fd = self._share_with_any_user(shm.name)
            except BaseException:
                shm.unlink()
                raise
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
            self._wake_fd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
            drain.start()
            # From the begin probes to the wait, a Ctrl-C is noted, not raised: raised
            # there it would skip the orderly stop, end probes included.
            deferred = _defer_stop_signals()
            module.lib.pd_launcher_run(PD_PROBE_BEGIN)
            header = self.view.header
            if not header.exit_requested:
                header.session_state = PD_SESSION_RUNNING
                if argv is not None:
                    env = self.child_env()
                    emulator = emulator_prefix(argv)
                    if emulator:
                        argv = [*emulator, *self._guest_preload(env), *argv]
                    fds = (inherited_fd,) if inherited_fd >= 0 else ()
                    try:
                        try:
                            child = subprocess.Popen(argv, env=env, pass_fds=fds)
                        except OSError as exc:
                            if exc.errno != errno.ENOEXEC:
                                raise
                            # Neither ELF nor #!: a shell runs such a file with sh.
                            child = subprocess.Popen(["/bin/sh", *argv], env=env,
                                                     pass_fds=fds)
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
                if _undefer_stop_signals(deferred):
                    raise KeyboardInterrupt
                self._wait(child, module)
            except KeyboardInterrupt:
                interrupted = True
            # The stop is under way and bounded on its own (STUCK_CONTEXT_MS): a Ctrl-C
            # now (a second one, or one sent as the session ended by itself) must not
            # cut the end probes short.
            _hold_stop_signals()
            header.session_state = PD_SESSION_STOPPING
            self._stop_timers.set()
            for t in timers:
                t.join()
            if self._attached is not None:
                # -x: the handlers in flight end before the detach makes the module
                # inert; a thread stopped inside one would clear its busy word in the
                # zero page that replaces the segment, and look stuck here for ever
                self._quiesce(module)
            self._detach()
            # Interrupted: the user wants everything stopped.  exit() or an error
            # only ends the session; the target runs on with its probes inert.
            if child is not None and child.poll() is None and interrupted:
                child.terminate()
                try:   # a stopped command acts on SIGTERM only once continued
                    os.kill(child.pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
                try:
                    child.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    child.kill()
                    child.wait()
            self._mark_dead_processes(child)
            if not self._stuck[0]:   # (-x: waited for already)
                self._quiesce(module)
            module.lib.pd_launcher_run(PD_PROBE_END)     # (each runs in its session
            module.lib.pd_launcher_run(PD_PROBE_ERROR)   # state only, as in stap)
            header.session_state = PD_SESSION_STOPPED
            self._stop_draining(module)
            drain.join()
            if self._drain_error is not None:
                raise self._drain_error
            return self._result(child, module)
        finally:
            _undefer_stop_signals(deferred)   # (an error before the wait)
            if inherited_fd >= 0:
                os.close(inherited_fd)
            self._stop_timers.set()
            self._detach()
            self._unstage(child)
            self._stop_draining(module)
            if drain.is_alive():
                drain.join(timeout=5)
            if self._wake_fd >= 0 and not drain.is_alive():
                os.close(self._wake_fd)
                self._wake_fd = -1
            module.lib.pd_launcher_detach()
            try:
                shm.unlink()
            except posix_ipc.ExistentialError:
                pass
            try:
                mem.close()
            except BufferError:
                pass  # a StructView still holds the buffer; the mapping goes with us
            # The stop signals stay ignored from the stop on: the session is the
            # launcher's last act, and a Ctrl-C sent as it ended by itself would only
            # interrupt the interpreter's exit (a traceback from a weakref callback).

    def _share_with_any_user(self, name: str) -> int:
        """A root session's command may change user before it loads the module
        (runuser, setpriv, a daemon's setuid): the modules are staged where any user
        can read them (share.py), and the segment, which stays root's and 0600, is
        left open in the command as a descriptor; PYDYN_SHM=NAME:FD tells the runtime,
        which maps it through FD when it cannot open NAME.  Returns FD."""
        from .share import stage_modules
        self.modules = stage_modules(self.modules)
        self._staged = self.modules.directory
        fd = os.open(f"/dev/shm{name}", os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
        try:
            # High, where programs do not put descriptors of their own (shells move
            # theirs to 10 and up; bash's script is 255).
            soft = 1024
            try:
                import resource
                soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
            except (ImportError, ValueError, OSError):
                pass
            high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, max(3, min(500, soft // 2)))
        finally:
            os.close(fd)
        self.child_shm = f"{name}:{high}"
        return high

    def _unstage(self, child: subprocess.Popen[bytes] | None) -> None:
        """Remove the staged modules, unless a process of the session still runs (its
        children may still exec and preload them; share.remove_stale_stages takes the
        directory once nothing maps it)."""
        staged, self._staged = self._staged, None
        if staged is None:
            return
        from .share import remove_tree
        try:
            if self.options.attach_pid is not None:
                # restored at the detach, its environment too: nothing loads them again
                alive = self._detach_failed
            else:
                alive = (child is not None and child.poll() is None) or any(
                    p.state == PD_PROC_ALIVE and not process_gone(int(p.pid))
                    for _, p in self.view.used_procs())
        except (ValueError, AttributeError):   # the segment was never mapped
            alive = False
        if not alive:
            remove_tree(staged)

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

    def _report_unloaded_objects(self) -> None:
        """The probed programs and libraries no process of the session loaded: their
        probes could not fire (a -c command that runs another copy of the program, a
        library the program does not link)."""
        h = self.view.header
        if not h.attach_count:   # the session ended before any process joined it
            return
        loaded = int(h.objects_loaded_lo) | int(h.objects_loaded_hi) << 32
        ran: set[str] | None = None
        for o, (path, points) in enumerate(self.program.objects[:64]):
            if loaded >> o & 1 or not points:
                continue
            more = f" and {len(points) - 1} more probe point(s)" if len(points) > 1 else ""
            self.log(f"WARNING: no process of the session loaded {path}: {points[0]}{more} "
                     "never fired")
            if ran is None:
                procs = self._gone_procs + [p.as_dict() for _, p in self.view.used_procs()]
                ran = {_cstr(p["exe"]) for p in procs}
            same = sorted(e for e in ran if os.path.basename(e) == os.path.basename(path))
            if same:
                self.log(f"hint: the session ran {', '.join(same)}")

    def _report_no_end(self) -> None:
        """The processes whose process.end probes did not run, where stap runs them in
        the kernel: they ended without running any code of theirs (SIGKILL), or by an
        exit or exec pydyn did not see (the system calls made directly).  Not run in the
        launcher on their behalf: pid(), execname(), their memory and registers would
        not be theirs.  How they ended is known from the wait of a parent that has the
        session's module, the -c command's status, or a zombie the launcher saw."""
        procs = self._gone_procs + [p.as_dict() for _, p in self.view.used_procs()]
        missed = [p for p in procs
                  if int(p["flags"]) & PD_PROCF_END_PROBES and not int(p["flags"]) & PD_PROCF_ENDED
                  and int(p["state"]) in (PD_PROC_KILLED, PD_PROC_EXECED, PD_PROC_EXITED)]
        if not missed:
            return

        def why(p: dict[str, Any]) -> str:
            sig = int(p["exit_status"])
            if int(p["state"]) == PD_PROC_EXECED:
                return "replaced by an exec pydyn did not see"
            if int(p["state"]) == PD_PROC_EXITED:   # as its parent's wait saw it
                return f"exit status {sig} by an exit pydyn did not see"
            if sig <= 0:
                return "ended, how is unknown"
            try:
                return f"killed by {signal.Signals(sig).name}"
            except ValueError:
                return f"killed by signal {sig}"
        shown = [f"pid {p['pid']} {os.path.basename(_cstr(p['exe'])) or '?'} ({why(p)})"
                 for p in missed[:10]]
        more = f" and {len(missed) - 10} more" if len(missed) > 10 else ""
        self.log(f"WARNING: process.end not run for {len(missed)} process(es): "
                 f"{', '.join(shown)}{more}")

    def _report_new_processes(self) -> None:
        """-v: one line per process as it attaches."""
        for i, proc in self.view.used_procs():
            self._report_process(i, proc)

    def _report_process(self, i: int, proc: StructView) -> None:
        key = (i, int(proc.pid), int(proc.start_ns))  # entries are reused
        if proc.state != PD_PROC_FREE and key not in self._seen_procs:
            self._seen_procs.add(key)
            abi = ABI_NAMES.get(proc.abi, "?")
            module = self.modules.get_module(abi)
            state = "refused (checksum mismatch)" if proc.state == PD_PROC_REFUSED else "attached"
            self.log(f"pydyn: {state} pid {proc.pid} (ppid {proc.ppid}) {abi} "
                     f"{_cstr(proc.exe)} module {module.name if module else '?'}, "
                     f"{proc.sites_armed} site(s) armed")

    def _attach(self, pid: int) -> None:
        """-x PID: load the module of the process's class into it and arm its sites."""
        from .attach import AttachedProcess, inspect, share_segment
        from .build import INSTALL_HINT

        target = inspect(pid)
        modules = self.modules
        if modules.get_module(target.abi) is None:
            raise TargetError(f"pid {pid} ({target.exe})", f"is a {target.abi} process and no "
                              f"{target.abi} module was built: {INSTALL_HINT[target.abi]}")
        if target.uid != os.geteuid():
            from .share import stage_modules
            share_segment(target, self.shm_name)
            modules = stage_modules(modules)
            self._staged = modules.directory
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

    def _wait(self, child: subprocess.Popen[bytes] | None, module: _Module) -> None:
        """Until the session ends: the command or the attached process exits, exit(),
        -T, the output's reader goes away, or a stop signal (KeyboardInterrupt).  The
        launcher shares the machine with the traced program, so it sleeps, not polls:
        in a poll(2) on the process's pidfd (it returns at the exit) and on the wake
        descriptor the drain thread writes at exit() or a gone reader.  Between those
        it keeps the process table: every WAIT_MIN seconds while it changes, backing
        off to WAIT_MAX while it does not (a table of long-lived processes)."""
        header = self.view.header
        last_scan = time.monotonic()
        # statistic slots of threads that are gone without giving them back (a main
        # thread never does): runtime/pd_quiesce.c; absent from an older pydyn-run module
        reap_slots = getattr(module.lib, "pd_launcher_reap_slots", None)
        deadline = None if self.options.timeout is None else last_scan + self.options.timeout
        attached = self.options.attach_pid
        watched = child.pid if child is not None else attached
        pidfd = _open_pidfd(watched) if watched is not None else -1
        poller = select.poll()
        for fd in (pidfd, self._wake_fd):
            if fd >= 0:
                poller.register(fd, select.POLLIN)
        period = WAIT_MIN
        last_used = -1
        try:
            while not header.exit_requested:
                if child is not None and child.poll() is not None:
                    return
                if self.sink.consumer_gone:
                    # Nobody reads the output: end the session (the drain keeps emptying
                    # the ring meanwhile, so no producer waits on it); the command runs on
                    # with its probes inert, as after exit().
                    return
                if deadline is not None and time.monotonic() >= deadline:
                    return
                if attached is not None:
                    if process_gone(attached):
                        return
                elif child is None and not self.program.needs_wait:
                    return
                nap = period if deadline is None else \
                    max(0.0, min(period, deadline - time.monotonic()))
                if child is not None and pidfd < 0:
                    try:   # no pidfd (Linux < 5.3): Popen's own polling wait
                        child.wait(timeout=nap)
                    except subprocess.TimeoutExpired:
                        pass
                else:
                    poller.poll(int(nap * 1000) + 1)
                if self.options.verbose:
                    self._report_new_processes()
                # a forked child's _exit leaves its entry alive until marked: every round
                # once the table is half full, as a loop of short processes takes entries
                # (between the half-second scans by kill(pid, 0) alone: no /proc read for
                # each of many long-lived processes every round; zombies wait for the full
                # scan)
                gone = len(self._gone_procs)
                used = self._recycle_processes()
                if reap_slots is not None:
                    reap_slots()
                full = time.monotonic() - last_scan > 0.5
                if full or used > self.options.proctab_count // 2:
                    self._mark_dead_processes(child, quick=not full)
                    used = self._recycle_processes()
                    if full:
                        last_scan = time.monotonic()
                # processes came or went: back to short rounds, lest a burst of short
                # ones fill the table between two of them
                quiet = used == last_used and gone == len(self._gone_procs)
                period = min(period * 2, WAIT_MAX) if quiet else WAIT_MIN
                last_used = used
        finally:
            if pidfd >= 0:
                os.close(pidfd)

    def _result(self, child: subprocess.Popen[bytes] | None, module: _Module) -> SessionResult:
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
        if h.reentered_count:
            self.log(f"WARNING: Skipped due to reentrancy: {h.reentered_count} (last: "
                     f"{module.probe_point(int(h.reentered_probe) - 1)}, hit while its thread "
                     "ran a handler: a signal handler's hit, or a function a handler calls "
                     "-- docs/probe-points.md lists the libc functions pydyn's handlers "
                     "call)")
        if h.lock_timeouts:
            self.log(f"WARNING: {h.lock_timeouts} wait(s) for a segment lock given up: its "
                     "holder was stopped (SIGSTOP, a debugger) or held it longer than "
                     "STUCK_CONTEXT_MS; those probes were skipped")
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
        self._report_no_end()
        if not self.options.no_warnings:
            self._report_unloaded_objects()
        if self.options.verbose:
            self._report_new_processes()
        procs = self._gone_procs + [p.as_dict() for _, p in self.view.used_procs()]
        if h.procs_unlisted:
            self.log(f"WARNING: {h.procs_unlisted} process(es) found the process table full "
                     f"({self.options.proctab_count} entries alive at once): their probes "
                     "ran, but they are not listed (-v) or counted as processes")
        if self.options.verbose and procs:
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
                             status, procs, self.sink.consumer_gone)
