"""Modules that processes of another user can load.

A session's modules live in the launcher's cache, private to its user (0700).  A
process of the session running as another user -- the command of a root session
that drops privileges (`runuser -u postgres -- postgres`, `setpriv --reuid`, a
daemon calling setuid before it execs), or another user's process under `-x` --
cannot read them: ld.so says "cannot be preloaded" and nothing is traced.  Such a
session loads copies staged for it (`stage_modules`): a directory
`pydyn-share.<launcher pid>.<random>` owned by the launcher's user, mode 0755 with
0644 files, created where every ancestor is writable only by root or that user (or is
sticky, as /tmp is), on a file system that allows mapping code.  Nobody but the
session's owner (or root) can change what the processes load.

The directory is removed at exit unless a process of the session still runs (its
children may exec and load the module later); a later session removes the
directories of dead launchers that no process maps any more (`remove_stale_stages`).
No `tempfile` or `shutil`: a warm root run stages, and their imports cost
milliseconds (tests/test_startup.py).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path

from .build import ModuleSet, link_lib_dirs
from .errors import SessionError

PREFIX = "pydyn-share."
# tmpfs first: on a disk file system the directories' removal alone took ~20 ms of a
# session's exit (journalled rmdirs), as much as the rest of a warm run's work.
CANDIDATES = ("/dev/shm", "/tmp", "/var/tmp")


def _safe_ancestors(path: str) -> str | None:
    """Why `path` (a real directory path) is no place for shared code, or None."""
    me = os.geteuid()
    at = "/"
    for part in [""] + [p for p in path.split("/") if p]:
        at = os.path.join(at, part) if part else "/"
        try:
            st = os.lstat(at)
        except OSError as exc:
            return f"{at}: {exc.strerror}"
        if not stat.S_ISDIR(st.st_mode):
            return f"{at} is not a directory"
        if st.st_uid not in (0, me):
            return f"{at} is owned by uid {st.st_uid}"
        if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
            return f"{at} is writable by group or others"
        if not st.st_mode & 0o001:
            return f"{at} cannot be searched by other users (mode {stat.S_IMODE(st.st_mode):04o})"
    try:
        if os.statvfs(path).f_flag & os.ST_NOEXEC:
            return f"{path} is on a noexec file system"
    except OSError as exc:
        return f"{path}: {exc.strerror}"
    return None


def stage_parent() -> str:
    """The first of $TMPDIR, /dev/shm, /tmp, /var/tmp fit to hold shared modules."""
    reasons = []
    tmpdir = os.environ.get("TMPDIR")
    for cand in ([tmpdir] if tmpdir else []) + list(CANDIDATES):
        real = os.path.realpath(cand)
        why = _safe_ancestors(real)
        if why is None:
            return real
        reasons.append(why)
    raise SessionError("no directory to share the probe modules with processes of other "
                       "users: " + "; ".join(reasons))


def _copy(src: Path, dst: Path) -> None:
    fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o644)
    try:
        with open(src, "rb") as f:
            while chunk := f.read(1 << 20):
                os.write(fd, chunk)
        os.fchmod(fd, 0o644)   # whatever the umask
    finally:
        os.close(fd)


def stage_modules(modules: ModuleSet) -> ModuleSet:
    """Copies of `modules` (with their $LIB links) every user can load and only we write."""
    remove_stale_stages()
    parent = stage_parent()
    for _ in range(8):
        stage = Path(parent, f"{PREFIX}{os.getpid()}.{os.urandom(6).hex()}")
        try:
            os.mkdir(stage, 0o700)   # opened up once complete
            break
        except FileExistsError:
            continue
    else:
        raise SessionError(f"cannot create a fresh directory in {parent}")
    try:
        copies = {}
        for abi, path in modules.modules.items():
            copies[abi] = stage / path.name
            _copy(path, copies[abi])
        link_lib_dirs(stage, modules.checksum_hex, copies)
        for dirpath, dirs, _files in os.walk(stage):
            for name in dirs:
                os.chmod(os.path.join(dirpath, name), 0o755)
        os.chmod(stage, 0o755)
    except OSError as exc:
        remove_tree(stage)
        raise SessionError(f"cannot stage the probe modules in {stage}: "
                           f"{exc.strerror or exc}") from exc
    return ModuleSet(stage, modules.checksum_hex, copies, modules.from_cache)


def remove_tree(root: Path) -> None:
    """Remove a staged directory (never following a link out of it)."""
    if not root.name.startswith(PREFIX):
        return
    for dirpath, dirs, files in os.walk(root, topdown=False):
        for name in files:
            try:
                os.unlink(os.path.join(dirpath, name))
            except OSError:
                pass
        for name in dirs:
            p = os.path.join(dirpath, name)
            try:
                if os.path.islink(p):
                    os.unlink(p)
                else:
                    os.rmdir(p)
            except OSError:
                pass
    try:
        os.rmdir(root)
    except OSError:
        pass


def _mapped_anywhere(paths: Iterable[str]) -> set[str]:
    """Which of `paths` (directories) some live process maps a file from."""
    wanted = [p + "/" for p in paths]
    found: set[str] = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/maps", "rb") as f:
                text = f.read().decode(errors="replace")
        except OSError:
            continue
        found.update(w[:-1] for w in wanted if w in text)
    return found


def remove_stale_stages() -> list[str]:
    """Remove our staged directories whose launcher is dead and that no process maps."""
    try:
        parent = stage_parent()
        names = [n for n in os.listdir(parent) if n.startswith(PREFIX)]
    except (SessionError, OSError):
        return []
    dead = []
    for name in names:
        path = os.path.join(parent, name)
        try:
            pid = int(name[len(PREFIX):].split(".")[0])
            if os.lstat(path).st_uid != os.geteuid() or pid == os.getpid():
                continue
            os.kill(pid, 0)
        except ProcessLookupError:
            dead.append(path)
        except (ValueError, OSError):
            continue
    if not dead:
        return []
    busy = _mapped_anywhere(dead)
    removed = []
    for path in dead:
        if path not in busy:
            remove_tree(Path(path))
            removed.append(path)
    return removed
