"""Attach to a running process: `pydyn script.stp -x PID`.

The launcher stops every thread of PID with ptrace (PTRACE_SEIZE + PTRACE_INTERRUPT,
repeated until /proc/PID/task shows no thread that is not stopped), then makes one
thread call libc's `dlopen` on the probe module of the process's class and the
module's `pd_attach_live` (runtime/pd_attach.c), which joins the session and arms
the sites while the other threads are still stopped; then every thread is detached
and runs on.  At the end of the session the same way in reverse: stop, call
`pd_detach_live` (every patched byte put back, semaphores decremented, the module
inert), detach.  No ptrace is held in between.

An injected call: the thread's registers are saved, a frame is built below its stack
pointer (and the x86-64 red zone) whose return address is 0, the thread continues
and comes back as a SIGSEGV at pc 0, which the tracer swallows before restoring the
registers.  `orig_rax` is set to -1 so that a thread stopped inside a system call is
not sent back into it by the kernel's syscall restart; the saved registers carry the
original value, so the interrupted call restarts after the restore as it would have.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import re
import signal
import struct
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import astuple, dataclass, field, fields, replace
from pathlib import Path
from typing import ClassVar, TypeVar

from .errors import SessionError, TargetError

PTRACE_CONT = 7
PTRACE_DETACH = 17
PTRACE_GETSIGINFO = 0x4202
PTRACE_SETSIGINFO = 0x4203
PTRACE_GETREGSET = 0x4204
PTRACE_SETREGSET = 0x4205
PTRACE_SEIZE = 0x4206
PTRACE_INTERRUPT = 0x4207
PTRACE_EVENT_STOP = 128
NT_PRSTATUS = 1
WALL = 0x40000000       # __WALL: wait for threads (clone children) too
SYS_TGKILL = 234        # x86-64
SIGINFO_SIZE = 128
RTLD_NOW, RTLD_NODELETE = 0x2, 0x1000
RETURN_ADDRESS = 0      # an injected call returns here: a SIGSEGV the tracer catches
STOP_TIMEOUT = 5.0      # a thread that does not stop in this time is in D state
# An injected call waiting this long may be blocked on a lock (malloc, the loader's)
# held by a stopped thread: the other threads then run until it completes.  There is
# no timeout after that: a thread let go inside the call would return to address 0.
LOCK_GRACE = 2.0

# Returned by pd_attach_live (runtime/pd_internal.h PD_ATTACH_*, pd_attach.c).
LIVE_ATTACH_ERRORS = {
    -1: "the module cannot map the session's segment",
    -2: "the module refused the segment (not a pydyn segment, or owned by another user)",
    -3: "the module was built from another source than the session",
    -4: "the process is a qemu-user emulator",
    -5: "the session ended before the module attached",
    -6: "this module is already attached to a session in that process",
    -7: "the module could not set its environment variables",
}

_libc = ctypes.CDLL(None, use_errno=True)
_libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
_libc.ptrace.restype = ctypes.c_long
_libc.syscall.restype = ctypes.c_long


class _Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


def _ptrace(request: int, tid: int, addr: int = 0, data: int | ctypes.c_void_p | None = 0) -> int:
    ctypes.set_errno(0)
    rc = _libc.ptrace(request, tid, ctypes.c_void_p(addr), data)
    if rc == -1 and ctypes.get_errno():
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return int(rc)


# ---- registers ---------------------------------------------------------------------

_R = TypeVar("_R", bound="_RegsBase")


class _RegsBase:
    """A register set as PTRACE_GETREGSET NT_PRSTATUS transfers it.  Subclasses give
    pc, sp, result (the return register) and call_frame(func, args, below): the
    registers entering func(args) on a stack under `below`, with the address and
    bytes to write there (arguments, return address)."""

    FORMAT: ClassVar[str]
    NAMES: ClassVar[tuple[str, str, str]]   # the fields of pc, sp and the result

    @classmethod
    def unpack(cls: type[_R], raw: bytes) -> _R:
        return cls(*struct.unpack(cls.FORMAT, raw))

    @property
    def pc(self) -> int:
        return int(getattr(self, self.NAMES[0]))

    @property
    def sp(self) -> int:
        return int(getattr(self, self.NAMES[1]))

    @property
    def result(self) -> int:
        return int(getattr(self, self.NAMES[2]))

    def pack(self) -> bytes:
        return struct.pack(self.FORMAT, *astuple(self))  # type: ignore[call-overload]


@dataclass
class X8664Regs(_RegsBase):
    """`struct user_regs_struct` of x86-64 (what NT_PRSTATUS holds for a 64-bit tracee)."""

    r15: int
    r14: int
    r13: int
    r12: int
    rbp: int
    rbx: int
    r11: int
    r10: int
    r9: int
    r8: int
    rax: int
    rcx: int
    rdx: int
    rsi: int
    rdi: int
    orig_rax: int
    rip: int
    cs: int
    eflags: int
    rsp: int
    ss: int
    fs_base: int
    gs_base: int
    ds: int
    es: int
    fs: int
    gs: int
    FORMAT: ClassVar[str] = "<27Q"
    NAMES: ClassVar[tuple[str, str, str]] = ("rip", "rsp", "rax")
    WORD: ClassVar[int] = 8
    RED_ZONE: ClassVar[int] = 128

    def call_frame(self, func: int, args: Sequence[int],
                   below: int) -> tuple[X8664Regs, int, bytes]:
        names = ("rdi", "rsi", "rdx", "rcx", "r8", "r9")
        if len(args) > len(names):
            raise ValueError("at most 6 register arguments")
        sp = (below & ~15) - 8                 # at entry (rsp + 8) % 16 == 0
        regs = dict(zip(names[:len(args)], args, strict=True))
        new = replace(self, rip=func, rsp=sp, rax=0, orig_rax=(1 << 64) - 1,
                      eflags=self.eflags & ~0x400, **regs)   # DF clear, as the ABI says
        return new, sp, struct.pack("<Q", RETURN_ADDRESS)


@dataclass
class I386Regs(_RegsBase):
    """`struct user_regs_struct` of i386: what NT_PRSTATUS holds for a 32-bit tracee,
    also seen from a 64-bit tracer (the regset view follows the tracee's mode)."""

    ebx: int
    ecx: int
    edx: int
    esi: int
    edi: int
    ebp: int
    eax: int
    xds: int
    xes: int
    xfs: int
    xgs: int
    orig_eax: int
    eip: int
    xcs: int
    eflags: int
    esp: int
    xss: int
    FORMAT: ClassVar[str] = "<17I"
    NAMES: ClassVar[tuple[str, str, str]] = ("eip", "esp", "eax")
    WORD: ClassVar[int] = 4
    RED_ZONE: ClassVar[int] = 0

    def call_frame(self, func: int, args: Sequence[int],
                   below: int) -> tuple[I386Regs, int, bytes]:
        # cdecl: arguments on the stack, 16-aligned at the call (gcc's i386 ABI)
        at = (below - 4 * len(args)) & ~15
        sp = at - 4
        new = replace(self, eip=func, esp=sp, eax=0, orig_eax=0xFFFFFFFF,
                      eflags=self.eflags & ~0x400)
        return new, sp, struct.pack(f"<{1 + len(args)}I", RETURN_ADDRESS, *args)


Regs = X8664Regs | I386Regs
REGS_BY_SIZE: dict[int, type[Regs]] = {
    struct.calcsize(X8664Regs.FORMAT): X8664Regs, struct.calcsize(I386Regs.FORMAT): I386Regs}
REGS_BY_ABI: dict[str, type[Regs]] = {"m64": X8664Regs,
                                                             "m32": I386Regs}
assert len(fields(X8664Regs)) == 27 and len(fields(I386Regs)) == 17


def get_regs(tid: int) -> Regs:
    buf = ctypes.create_string_buffer(512)
    iov = _Iovec(ctypes.cast(buf, ctypes.c_void_p), len(buf))
    _ptrace(PTRACE_GETREGSET, tid, NT_PRSTATUS, ctypes.cast(ctypes.pointer(iov), ctypes.c_void_p))
    cls = REGS_BY_SIZE.get(iov.len)
    if cls is None:
        raise SessionError(f"thread {tid}: unexpected register set size {iov.len}")
    return cls.unpack(buf.raw[:iov.len])


def set_regs(tid: int, regs: Regs) -> None:
    raw = regs.pack()
    buf = ctypes.create_string_buffer(raw, len(raw))
    iov = _Iovec(ctypes.cast(buf, ctypes.c_void_p), len(raw))
    _ptrace(PTRACE_SETREGSET, tid, NT_PRSTATUS, ctypes.cast(ctypes.pointer(iov), ctypes.c_void_p))


# ---- the target ------------------------------------------------------------------

@dataclass(frozen=True)
class Mapping:
    start: int
    end: int
    perms: str
    offset: int
    path: str


def read_maps(pid: int) -> list[Mapping]:
    out = []
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        parts = line.split(None, 5)
        if len(parts) < 5:
            continue
        start, end = (int(x, 16) for x in parts[0].split("-"))
        out.append(Mapping(start, end, parts[1], int(parts[2], 16),
                           parts[5] if len(parts) > 5 else ""))
    return out


_LIBC_RE = re.compile(r"/libc(\.so\.6|-[0-9.]+\.so)$")
_LDSO_RE = re.compile(r"/ld-(linux[^/]*|musl[^/]*)\.so[.0-9]*$")


@dataclass(frozen=True)
class Target:
    """A process pydyn may attach to (what `inspect` found)."""

    pid: int
    exe: str        # the executable's path (realpath of /proc/PID/exe)
    abi: str        # 'm64' | 'm32'
    uid: int        # effective ids
    gid: int
    libc: str       # path of its libc as mapped


def _status(pid: int) -> dict[str, str]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        out[key] = value.strip()
    return out


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"


def permission_reason(pid: int, status: dict[str, str] | None = None) -> str | None:
    """Why ptrace would refuse PID, in words (None: no reason found)."""
    try:
        status = status or _status(pid)
    except OSError:
        return None
    tracer = int(status.get("TracerPid", "0") or 0)
    if tracer:
        return (f"is already traced by pid {tracer} ({_comm(tracer)}): a process has at "
                "most one ptrace tracer")
    me = os.geteuid()
    if me == 0:
        scope = _yama_scope()
        if scope == 3:
            return "kernel.yama.ptrace_scope is 3: ptrace attach is disabled until reboot"
        return None
    uids = {int(u) for u in status.get("Uid", "").split()}
    if uids and uids != {me}:
        owner = status.get("Uid", "?").split()[0]
        return (f"belongs to uid {owner} and you are uid {me}: only root (CAP_SYS_PTRACE) "
                "may attach to another user's process")
    scope = _yama_scope()
    if scope == 1:
        return ("kernel.yama.ptrace_scope is 1: only a parent may attach without "
                "CAP_SYS_PTRACE (run as root, or sysctl kernel.yama.ptrace_scope=0)")
    if scope == 2:
        return "kernel.yama.ptrace_scope is 2: only root (CAP_SYS_PTRACE) may attach"
    if scope == 3:
        return "kernel.yama.ptrace_scope is 3: ptrace attach is disabled until reboot"
    return None


def _yama_scope() -> int | None:
    try:
        return int(Path("/proc/sys/kernel/yama/ptrace_scope").read_text())
    except (OSError, ValueError):
        return None


def inspect(pid: int) -> Target:
    """The process PID as pydyn -x needs it, or a TargetError naming what is wrong."""
    from .elf.reader import get_elf_info

    name = f"pid {pid}"
    if pid <= 0:
        raise TargetError(name, "no such process")
    try:
        status = _status(pid)
    except FileNotFoundError:
        raise TargetError(name, "no such process") from None
    except OSError as exc:
        raise TargetError(name, f"cannot read /proc/{pid}/status: {exc.strerror}") from exc
    if pid == os.getpid():
        raise TargetError(name, "is pydyn itself")
    if status.get("State", "").startswith(("Z", "X")):
        raise TargetError(name, "has exited (a zombie)")
    reason = permission_reason(pid, status)
    if reason:
        raise TargetError(name, reason)
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except PermissionError:
        raise TargetError(name, "permission denied reading /proc/PID/exe (not dumpable: "
                                "setuid, or PR_SET_DUMPABLE 0)") from None
    except FileNotFoundError:
        raise TargetError(name, "is a kernel thread: no executable to probe") from None
    name = f"pid {pid} ({exe})"
    try:
        same_root = os.path.samefile(f"/proc/{pid}/root", "/")
    except OSError:
        same_root = True
    if not same_root:
        raise TargetError(name, "runs under another root (a container or chroot): the module "
                                "pydyn would load is not at the same path there")
    if os.path.basename(exe).startswith("qemu-"):
        raise TargetError(name, "runs under qemu-user: ptrace sees the emulator, not the "
                                "guest, so an emulated (aarch64) process cannot be attached")
    info = get_elf_info(f"/proc/{pid}/exe")   # the running inode, even if replaced on disk
    if info.abi not in REGS_BY_ABI:
        raise TargetError(name, f"is an {info.machine} process: -x supports x86-64 and i386")
    try:
        maps = read_maps(pid)
    except OSError as exc:
        raise TargetError(name, f"cannot read /proc/{pid}/maps: {exc.strerror}") from exc
    libc = next((m.path for m in maps if _LIBC_RE.search(m.path)), None)
    if libc is None:
        has_ldso = any(_LDSO_RE.search(m.path) for m in maps)
        raise TargetError(name, "has no glibc loaded (musl?): pydyn cannot load its module"
                          if has_ldso else "is not dynamically linked (no libc or ld.so in "
                          "its memory map): pydyn cannot load its module into it")
    uid, gid = (int(status.get(k, "0 0").split()[1]) for k in ("Uid", "Gid"))
    return Target(pid, exe.removesuffix(" (deleted)"), info.abi, uid, gid, libc)


def _load_bias(pid: int, maps: Sequence[Mapping], path: str) -> int:
    """Where the object mapped from `path` was loaded (bias of its link-time addresses)."""
    from .elf.reader import get_elf_info

    starts = [m.start for m in maps if m.path == path and m.offset == 0]
    if not starts:
        raise SessionError(f"pid {pid}: {path} is not mapped")
    first = min(s.vaddr for s in get_elf_info(f"/proc/{pid}/root{path}").segments)
    return min(starts) - (first & ~0xFFF)


def find_dlopen(pid: int, libc: str) -> tuple[int, int]:
    """Runtime addresses of dlopen and dlerror in PID (glibc >= 2.34 exports both from
    libc.so.6; older ones have __libc_dlopen_mode, with dlopen's signature)."""
    path = f"/proc/{pid}/root{libc}"
    from .elf.symbols import get_default_symbols  # pyelftools: only when attaching
    syms = get_default_symbols(path, {"dlopen", "__libc_dlopen_mode", "dlerror"})
    bias = _load_bias(pid, read_maps(pid), libc)
    opener = syms.get("dlopen") or syms.get("__libc_dlopen_mode")
    if opener is None:
        raise TargetError(f"pid {pid}", f"{libc} has no dlopen (glibc < 2.34 without "
                                        "__libc_dlopen_mode?)")
    err = syms.get("dlerror")
    return bias + opener, bias + err if err else 0


# ---- stopping threads and running calls -------------------------------------------------

@dataclass
class _Thread:
    tid: int
    # signals that arrived while we held the thread: (signo, siginfo), re-sent at detach
    pending: list[tuple[int, bytes]] = field(default_factory=list)
    in_signal_stop: bool = False   # its last stop was a signal-delivery-stop


class Tracer:
    """Every thread of one process, stopped under ptrace (`stop_all`) until `detach_all`."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.threads: dict[int, _Thread] = {}
        self.mem: int | None = None
        self.lock_waits = 0   # calls that let the other threads run (LOCK_GRACE)

    def _tasks(self) -> set[int]:
        try:
            return {int(t) for t in os.listdir(f"/proc/{self.pid}/task")}
        except FileNotFoundError:
            raise TargetError(f"pid {self.pid}", "exited") from None

    def stop_all(self) -> None:
        """Seize and interrupt each task until a listing shows no new one (a thread
        created meanwhile by one not yet stopped shows up in the next listing)."""
        while True:
            new = self._tasks() - self.threads.keys()
            if not new:
                break
            seized = []
            for tid in sorted(new):
                try:
                    _ptrace(PTRACE_SEIZE, tid, 0, 0)
                except OSError as exc:
                    if exc.errno == errno.ESRCH:
                        continue     # the thread exited meanwhile
                    if exc.errno == errno.EPERM:
                        reason = permission_reason(self.pid) or "ptrace: permission denied"
                        raise TargetError(f"pid {self.pid}", reason) from None
                    raise SessionError(f"pid {self.pid}: cannot ptrace thread {tid}: "
                                       f"{exc.strerror}") from exc
                self.threads[tid] = _Thread(tid)
                seized.append(tid)
                try:
                    _ptrace(PTRACE_INTERRUPT, tid, 0, 0)
                except OSError as exc:
                    if exc.errno != errno.ESRCH:
                        raise
            for tid in seized:
                self._wait_stopped(self.threads[tid])
        if not self.threads:
            raise TargetError(f"pid {self.pid}", "exited")
        if self.mem is None:
            self.mem = os.open(f"/proc/{self.pid}/mem", os.O_RDWR)

    def _note_stop(self, t: _Thread, status: int) -> None:
        """Records a stop: an interrupt or group stop, or a signal to deliver later."""
        if status >> 16 == PTRACE_EVENT_STOP:
            t.in_signal_stop = False
            return
        sig = os.WSTOPSIG(status)
        info = ctypes.create_string_buffer(SIGINFO_SIZE)
        try:
            _ptrace(PTRACE_GETSIGINFO, t.tid, 0, ctypes.cast(info, ctypes.c_void_p))
        except OSError:
            pass
        t.pending.append((sig, info.raw))
        t.in_signal_stop = True

    def _wait_stopped(self, t: _Thread, timeout: float = STOP_TIMEOUT) -> None:
        status = self._waitpid(t.tid, timeout)
        if status is None:
            raise SessionError(f"pid {self.pid}: thread {t.tid} did not stop within "
                               f"{timeout:.0f}s (uninterruptible sleep?)")
        if os.WIFEXITED(status) or os.WIFSIGNALED(status):
            del self.threads[t.tid]
            return
        self._note_stop(t, status)

    @staticmethod
    def _waitpid(tid: int, timeout: float) -> int | None:
        deadline = time.monotonic() + timeout
        delay = 0.0002
        while True:
            try:
                pid, status = os.waitpid(tid, WALL | os.WNOHANG)
            except ChildProcessError:
                return 0   # gone: reported as exited (WIFEXITED(0))
            if pid:
                return status
            if time.monotonic() > deadline:
                return None
            time.sleep(delay)
            delay = min(delay * 2, 0.01)

    def write(self, addr: int, data: bytes) -> None:
        assert self.mem is not None
        os.pwrite(self.mem, data, addr)

    def read(self, addr: int, size: int) -> bytes:
        assert self.mem is not None
        return os.pread(self.mem, size, addr)

    def pick_thread(self) -> int:
        """The thread to run calls in: the leader unless it is busy with a signal."""
        order = sorted(self.threads, key=lambda tid: (tid != self.pid, tid))
        clean = [tid for tid in order if not self.threads[tid].pending]
        return (clean or order)[0]

    def call(self, tid: int, func: int, args: Sequence[int | bytes],
             buffers: list[int] | None = None) -> int:
        """Runs func(args) in thread `tid` and returns its result register.  A bytes
        argument is copied onto the thread's stack and passed by address (appended to
        `buffers`: it can be read back until the thread runs again)."""
        t = self.threads[tid]
        saved = get_regs(tid)
        below = saved.sp - saved.RED_ZONE
        values = []
        for a in args:
            if isinstance(a, bytes):
                below = (below - len(a)) & ~15
                self.write(below, a)
                values.append(below)
                if buffers is not None:
                    buffers.append(below)
            else:
                values.append(a)
        regs, frame_at, frame = saved.call_frame(func, values, below)
        self.write(frame_at, frame)
        set_regs(tid, regs)
        try:
            done = self._run_call(t)
        except BaseException:
            with contextlib.suppress(OSError):   # not if the process has gone
                set_regs(tid, saved)
            raise
        set_regs(tid, saved)
        return done.result

    def _run_call(self, t: _Thread) -> Regs:
        _ptrace(PTRACE_CONT, t.tid, 0, 0)
        others_running = False
        try:
            while True:
                status = self._waitpid(t.tid, LOCK_GRACE if not others_running else 3600)
                if status is None:
                    if not others_running:
                        self._resume_others(t.tid)
                        others_running = True
                        self.lock_waits += 1
                    continue
                if os.WIFEXITED(status) or os.WIFSIGNALED(status):
                    raise TargetError(f"pid {self.pid}", "exited during the attach")
                if status >> 16 == PTRACE_EVENT_STOP:     # a pending interrupt or group stop
                    _ptrace(PTRACE_CONT, t.tid, 0, 0)
                    continue
                regs = get_regs(t.tid)
                sig = os.WSTOPSIG(status)
                if sig == signal.SIGSEGV and regs.pc == RETURN_ADDRESS:
                    t.in_signal_stop = True
                    return regs
                if sig in (signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE):
                    t.in_signal_stop = True
                    raise SessionError(f"pid {self.pid}: an injected call faulted "
                                       f"({signal.Signals(sig).name} at {regs.pc:#x})")
                self._note_stop(t, status)
                _ptrace(PTRACE_CONT, t.tid, 0, 0)
        finally:
            if others_running:
                self._restop_others(t.tid)

    def _resume_others(self, busy: int) -> None:
        for tid in list(self.threads):
            if tid != busy:
                try:
                    _ptrace(PTRACE_CONT, tid, 0, 0)
                except OSError:
                    pass

    def _restop_others(self, busy: int) -> None:
        for tid in list(self.threads):
            if tid != busy:
                try:
                    _ptrace(PTRACE_INTERRUPT, tid, 0, 0)
                except OSError:
                    pass
        for tid in list(self.threads):
            if tid != busy:
                self._wait_stopped(self.threads[tid])
        self.stop_all()   # threads created while they ran

    def detach_all(self) -> int:
        """Lets every thread go; signals that arrived meanwhile are delivered again.
        Returns the number of threads detached."""
        if self.mem is not None:
            os.close(self.mem)
            self.mem = None
        n = 0
        for t in self.threads.values():
            resend = list(t.pending)
            sig = 0
            if resend and t.in_signal_stop:
                sig, info = resend.pop(0)
                buf = ctypes.create_string_buffer(info, SIGINFO_SIZE)
                try:
                    _ptrace(PTRACE_SETSIGINFO, t.tid, 0, ctypes.cast(buf, ctypes.c_void_p))
                except OSError:
                    pass
            try:
                _ptrace(PTRACE_DETACH, t.tid, 0, sig)
                n += 1
            except OSError:
                continue      # exited
            for s, _ in resend:
                _libc.syscall(SYS_TGKILL, self.pid, t.tid, s)
        self.threads.clear()
        return n


# ---- attaching a session ------------------------------------------------------------

@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Ctrl-C, SIGTERM and SIGHUP wait until the threads run their own code again: an
    interrupt between setting a call's registers and restoring them would leave a
    thread running the call's frame once the kernel drops the dead tracer.  Python
    runs handlers in the main thread whichever thread the kernel picked, so the
    handlers are swapped rather than the signals masked."""
    if threading.current_thread() is not threading.main_thread():
        yield     # signal.signal is main-thread only; so are Python's handlers
        return
    got: list[int] = []
    held = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    old = {s: signal.signal(s, lambda signum, frame: got.append(signum)) for s in held}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
        for signum in got:
            signal.raise_signal(signum)


def share_segment(target: Target, shm_name: str) -> None:
    """Root attaching to another user's process: that user must open the segment (the
    runtime trusts only a segment its own euid, or root, owns, and opens it by name:
    an attached process inherits no descriptor), so the segment is given to the user.
    That user can then write the segment: a hostile process could falsify the
    session's results and output, the price of tracing it.  The modules are staged
    for it by share.stage_modules, as for a root session's -c command."""
    os.chown(f"/dev/shm{shm_name}", target.uid, target.gid)


@dataclass(frozen=True)
class Restored:
    sites: int
    bytes: int
    semaphores: int
    threads: int
    got: int = 0    # GOT entries put back (runtime/pd_got.c)


class AttachedProcess:
    """A process the session's module was loaded into (`attach`), until `detach`."""

    def __init__(self, target: Target, module: Path, log: Callable[[str], None],
                 verbose: int = 0) -> None:
        self.target = target
        self.module = Path(os.path.realpath(module))
        self.log = log
        self.verbose = verbose
        self.detach_entry = 0
        self.moved = 0      # threads stopped inside a patched window, moved to its stub
        self.word = REGS_BY_ABI[target.abi].WORD

    def attach(self, shm_name: str, preload_entry: str, probe_mode: str) -> None:
        pid = self.target.pid
        dlopen, dlerror = find_dlopen(pid, self.target.libc)
        from .elf.symbols import get_symbol_table

        table = get_symbol_table(str(self.module))
        entries = {}
        for name in ("pd_attach_live", "pd_attach_commit", "pd_detach_live"):
            sym = table.get_symbol(name)
            if sym is None:
                raise SessionError(f"{self.module}: no {name} (module built by an older pydyn)")
            entries[name] = sym.value
        t0 = time.monotonic()
        tracer = Tracer(pid)
        with _signals_held():   # a Ctrl-C meanwhile is raised after the report
            bias, threads, resumed = self._load(tracer, dlopen, dlerror, entries,
                                                [shm_name, preload_entry, probe_mode])
            if self.verbose:
                ms = (time.monotonic() - t0) * 1000
                waits = (f" ({tracer.lock_waits} call(s) waited for a lock a stopped thread "
                         "held: the other threads ran meanwhile)" if tracer.lock_waits else "")
                moved = (f" ({self.moved} stopped inside a patched window: moved to its "
                         "stub's copy)" if self.moved else "")
                self.log(f"pydyn: attached to pid {pid} ({self.target.exe}, "
                         f"{self.target.abi}): {threads} thread(s) stopped for {ms:.0f}ms"
                         f"{waits}, {resumed} resumed{moved}, module {self.module} at "
                         f"{bias:#x}")

    def _load(self, tracer: Tracer, dlopen: int, dlerror: int, entries: dict[str, int],
              args: list[str]) -> tuple[int, int, int]:
        """dlopen + pd_attach_live with every thread stopped: (bias, threads, resumed)."""
        pid = self.target.pid
        try:
            tracer.stop_all()
            threads = len(tracer.threads)
            tid = tracer.pick_thread()
            handle = tracer.call(tid, dlopen, [_cstr(str(self.module)), RTLD_NOW | RTLD_NODELETE])
            if handle == 0:
                raise SessionError(f"pid {pid}: dlopen({self.module}) failed: "
                                   f"{self._dlerror(tracer, tid, dlerror)}")
            # a glibc dlopen handle is the object's struct link_map: l_addr comes first
            bias = int.from_bytes(tracer.read(handle, self.word), "little")
            rc = _signed32(tracer.call(tid, bias + entries["pd_attach_live"],
                                       [_cstr(a) for a in args]))
            if rc != 0:
                raise SessionError(f"pid {pid}: {LIVE_ATTACH_ERRORS.get(rc, f'error {rc}')}")
            self.detach_entry = bias + entries["pd_detach_live"]
            self.moved = self._commit(tracer, tid, bias + entries["pd_attach_commit"])
        finally:
            resumed = tracer.detach_all()
        return bias, threads, resumed

    def _commit(self, tracer: Tracer, tid: int, entry: int) -> int:
        """pd_attach_commit with every thread stopped: the module writes the code that
        arming recorded (the other threads may have run while pd_attach_live waited for
        a lock), then a thread stopped inside a window that a site's jump now covers,
        which would resume in the middle of the jump, resumes at the stub's copy of its
        instruction instead.  Returns how many threads were moved."""
        regs = {t: get_regs(t) for t in tracer.threads}
        fmt = f"<{len(regs)}{'Q' if self.word == 8 else 'I'}"
        buffers: list[int] = []
        moved = tracer.call(tid, entry, [struct.pack(fmt, *(r.pc for r in regs.values())),
                                         len(regs)], buffers)
        if not moved & 0xFFFFFFFF:
            return 0
        pcs = struct.unpack(fmt, tracer.read(buffers[0], struct.calcsize(fmt)))
        n = 0
        for (t, r), pc in zip(regs.items(), pcs, strict=True):
            if pc != r.pc:
                set_regs(t, replace(r, **{r.NAMES[0]: pc}))
                n += 1
        return n

    @staticmethod
    def _dlerror(tracer: Tracer, tid: int, dlerror: int) -> str:
        if not dlerror:
            return "no dlerror"
        at = tracer.call(tid, dlerror, [])
        return tracer.read(at, 512).split(b"\0", 1)[0].decode(errors="replace") if at else "?"

    def detach(self) -> Restored | None:
        """Stops the process again and restores it; None if it has exited."""
        if not self.detach_entry:
            return None
        entry, self.detach_entry = self.detach_entry, 0
        tracer = Tracer(self.target.pid)
        with _signals_held():
            try:
                try:
                    tracer.stop_all()
                except TargetError:
                    return None     # exited: nothing to restore
                tid = tracer.pick_thread()
                counts: list[int] = []
                tracer.call(tid, entry, [b"\0" * 24], counts)
                sites, nbytes, semas, got, got_left, frames = struct.unpack(
                    "<6I", tracer.read(counts[0], 24))
            finally:
                threads = tracer.detach_all()
        restored = Restored(sites, nbytes, semas, threads, got)
        if got_left:    # an object unloaded behind our back, or another tool's hook
            self.log(f"pydyn: WARNING: pid {self.target.pid}: {got_left} GOT entr(ies) of the "
                     "unwinder/dlopen functions were not redirected or not restored")
        if self.verbose:
            self.log(f"pydyn: detached from pid {self.target.pid}: restored {sites} site(s), "
                     f"{nbytes} byte(s), {semas} semaphore(s), {got} GOT entr(ies), "
                     f"{frames} return address(es); {threads} thread(s) resumed")
        return restored


def _cstr(text: str) -> bytes:
    return os.fsencode(text) + b"\0"


def _signed32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value
