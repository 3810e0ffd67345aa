"""The module cache: a rerun of the same script costs no compiler and no ELF parse.

An entry is keyed by a hash of everything that changes the modules, computed
from cheap facts only, before resolve runs:

- the script text, its file name, arguments and `-D` values, the host arch
  and kernel release the preprocessor tests, the launcher's and the runtime's
  sources (`build.runtime_digest()`);
- the compiler: which `$CC` resolves to, its `--version` output and the flags
  of each ABI (`--version` is run once per compiler binary and remembered in
  `compilers.json` under the binary's path, inode, size and mtime);
- every probed binary and the `-c` target: the path each probe point names
  (after `$PATH`), and per file its GNU build-id read without pyelftools
  (`elf/header.py`: its PT_NOTE segments; size and mtime when it has none).  Libraries
  found by `.library()` are only known after a resolve, so `index/<hash>.json`,
  named by the inputs known before parsing, remembers the points' paths as
  written and which files the last resolve of this script touched: a hit
  recomputes the paths' realpaths and fingerprints and never parses.

Layout of `DIR/<key>/`: `pydyn_<key>.c`, `pd_shm.h`, `pydyn_<key>_m64.so`,
`pydyn_<key>_m32.so`, the `$LIB` links, `pydyn_<key>.json` (the manifest:
the key's inputs, each artefact's sha256, the probe sites and what the
session needs of the `Program`, so a hit skips resolve and translate) and
`pydyn_<key>.hash` (a readable log of each input and its hash, like stap's).
`DIR/runtime/<abi>-<hash>/` holds the runtime's object files per compiler, ABI
flags and `-D` values (`build.runtime_objects`): a cold build compiles only
the generated C and links.

Concurrency: `.lock` in an entry is held exclusively while it is built and
shared while it is verified; `.inuse` is held shared for a session's whole
life so eviction never removes a module a running session may still preload.
Files are written to temporaries and renamed; the manifest is written last.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import pwd
import stat
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from .build import (
    ABIS,
    COMMON_CFLAGS,
    LIB_DIRS,
    ModuleSet,
    abi_cc,
    abi_flags,
    build_modules,
    compiler_path,
    compiler_version,
    find_program,
    iter_source_files,
    link_lib_dirs,
    runtime_digest,
    sha256,
    source_signature,
)
from .elf.header import get_build_id
from .errors import PydynError, ScriptWarning, say

FORMAT_VERSION = 1
DEFAULT_SIZE_MIB = 256
KEY_LEN = 32
LAUNCHER_DIR = Path(__file__).resolve().parent
NO_ELF_ENV = "PYDYN_DEBUG_NO_ELF"
RUNTIME_STORE = "runtime"   # precompiled runtime objects (build.runtime_objects)

Warn = Callable[[str], None]


def _default_warn(msg: str) -> None:
    say(f"pydyn: warning: {msg}")


def _sha(data: bytes | str) -> str:
    return sha256(data.encode() if isinstance(data, str) else data).hexdigest()


def _file_sha(path: Path) -> str:
    return sha256(path.read_bytes()).hexdigest()


# -- cheap facts ---------------------------------------------------------------------


def file_fingerprint(path: str) -> str:
    """`build-id HEX` (or `size N mtime NS`) plus the mode bits that matter for preloading."""
    st = os.stat(path)
    build_id = get_build_id(path)
    what = f"build-id {build_id}" if build_id else f"size {st.st_size} mtime {st.st_mtime_ns}"
    return f"{what} mode {stat.S_IMODE(st.st_mode) & 0o7111:04o}"


def _launcher_digest() -> str:
    return source_signature(iter_source_files(str(LAUNCHER_DIR), (".py",))).hex()


def probe_paths(script: Any) -> tuple[list[str], bool, bool]:
    """The `process("...")` paths of the probe points as written, whether any point
    uses `.library()` and whether any names no path (probes the -c/-x target): from the
    AST, kept in the index so a hit needs no parse."""
    out: set[str] = set()
    uses_library = uses_target = False
    for probe in script.probes:
        for point in probe.points:
            comps = point.components
            if not comps or comps[0].name != "process":
                continue
            uses_library |= any(c.name == "library" for c in comps)
            if isinstance(comps[0].arg, str):
                out.add(comps[0].arg)
            elif comps[0].arg is None:
                uses_target = True
    return sorted(out), uses_library, uses_target


def named_binaries(points: Iterable[str], target_path: str | None) -> list[str]:
    """Realpaths of the binaries the paths name, as resolve will find them (after $PATH,
    from the current directory, through symlinks): recomputed on every lookup."""
    out: list[str] = []
    for arg in points:
        found = find_program(arg) if "/" not in arg else arg
        out.append(os.path.realpath(found) if found and os.path.exists(found)
                   else f"<missing {arg}>")
    if target_path:
        out.append(target_path)
    return sorted(set(out))


class KeyInput(NamedTuple):   # not a dataclass: see shmlayout/layout.py
    label: str
    digest: str      # sha256 of the value, or the value itself when it is a short fact
    note: str = ""

    def line(self) -> str:
        return f"{self.label}: {self.digest}"


class Lookup:
    """The cheap half of a key: what is known before resolve.

    `script` (inputs known before parsing) names the index entry, which records the
    probe points' paths (`points`) and the files the last resolve read (`deps`)."""

    def __init__(self, script: list[KeyInput], target_path: str | None = None) -> None:
        self.script = script
        self.target_path = target_path
        self.points: list[str] | None = None   # None until bound from the index or the AST
        self.uses_library = False
        self.uses_target = False
        self.named: list[str] = []
        self.deps: list[str] = []   # files whose fingerprints complete the key

    @property
    def script_hash(self) -> str:
        return _sha("\n".join(i.line() for i in self.script))

    def bind(self, points: Sequence[str], uses_library: bool, uses_target: bool) -> None:
        """The target is one of the probed binaries only when a point names no path:
        otherwise the modules are the same whatever -c starts (a -p4 build serves a
        later run with -c)."""
        self.points, self.uses_library = list(points), uses_library
        self.uses_target = uses_target
        self.named = named_binaries(points, self.target_path if uses_target else None)

    def bind_script(self, script: Any) -> None:
        """After a parse (a miss): the points as the AST has them."""
        self.bind(*probe_paths(script))

    @property
    def base(self) -> list[KeyInput]:
        if self.points is None:
            raise RuntimeError("cache lookup not bound to its probe points")
        return [*self.script, *point_inputs(self.named, self.uses_library)]


def _host() -> str:
    # os.uname, not the platform module (~10 ms of regex compiles at import): the same
    # machine and release strings on Linux.
    u = os.uname()
    return f"{u.machine} {u.release}"


def script_inputs(text: str, filename: str, args: Sequence[str], defines: Sequence[str],
                  compilers: Iterable[KeyInput]) -> list[KeyInput]:
    """The key's inputs known without parsing the script."""
    return [
        KeyInput("pydyn cache format", str(FORMAT_VERSION)),
        KeyInput(f"script {filename}", _sha(text.encode(errors="surrogateescape")),
                 f"{len(text)} chars"),
        KeyInput("script arguments", _sha(json.dumps(list(args))), json.dumps(list(args))),
        KeyInput("-D values", _sha(json.dumps(sorted(defines))), " ".join(sorted(defines))),
        KeyInput("host", _sha(_host()), _host()),
        KeyInput("launcher sources", _launcher_digest()),
        KeyInput("runtime and shmlayout sources", runtime_digest().hex()),
        *compilers,
    ]


def point_inputs(named: Sequence[str], uses_library: bool) -> list[KeyInput]:
    """The key's inputs that depend on the probe points."""
    inputs = [KeyInput("probed binaries", _sha("\n".join(named)), " ".join(named))]
    if uses_library:
        ld_cache = "/etc/ld.so.cache"
        try:
            st = os.stat(ld_cache)
            fact = f"{st.st_size} {st.st_mtime_ns}"
        except OSError:
            fact = "missing"
        env = os.environ.get("LD_LIBRARY_PATH", "")
        inputs.append(KeyInput("library search", _sha(f"{fact}\n{env}"),
                               f"ld.so.cache {fact}, LD_LIBRARY_PATH={env}"))
    return inputs


def dep_inputs(deps: Iterable[str]) -> list[KeyInput]:
    out = []
    for path in sorted(set(deps)):
        try:
            fp = file_fingerprint(path)
        except OSError:
            fp = "missing"
        out.append(KeyInput(f"binary {path}", _sha(fp), fp))
    return out


def full_key(base: Sequence[KeyInput], deps: Sequence[KeyInput]) -> str:
    return _sha("\n".join(i.line() for i in [*base, *deps]))[:KEY_LEN]


# -- the Program fields a session needs, as JSON ---------------------------------------


def _dump_format(fmt: Any) -> dict[str, Any]:
    from .format import FormatSpec
    if isinstance(fmt, FormatSpec):
        pieces: list[Any] = [p if isinstance(p, str) else
                             p._asdict()
                             for p in fmt.pieces]
        return {"kind": "printf", "pieces": pieces, "arg_types": list(fmt.arg_types)}
    return {"kind": "hist", **fmt._asdict()}


def _load_format(d: dict[str, Any]) -> Any:
    from .format import Conversion, FormatSpec
    from .program import HistFormat
    if d["kind"] == "printf":
        return FormatSpec(tuple(p if isinstance(p, str) else Conversion(**p)
                                for p in d["pieces"]), tuple(d["arg_types"]))
    # _dump_format's fields override its "kind": "hist", so kind is "log"/"linear" here
    return HistFormat(**d)


def program_to_json(program: Any) -> dict[str, Any]:
    return {"checksum": program.checksum.hex(),
            "formats": [_dump_format(f) for f in program.formats],
            "timers": [list(t) for t in program.timers],
            "needs_wait": program.needs_wait,
            "required_abis": sorted(program.required_abis),
            "globals_size": program.globals_size,
            "report": {str(k): [t[0], t[1], list(t[2]), t[3]] for k, t in program.report.items()},
            "scalars": {k: list(v) for k, v in program.scalars.items()},
            "objects": [[path, list(points)] for path, points in program.objects]}


def program_from_json(d: dict[str, Any], c_source: str) -> Any:
    from .program import Program
    return Program(c_source=c_source, checksum=bytes.fromhex(d["checksum"]),
                   formats=[_load_format(f) for f in d["formats"]],
                   required_abis=frozenset(d["required_abis"]), globals_size=d["globals_size"],
                   needs_wait=bool(d["needs_wait"]),
                   timers=[(int(a), int(b), int(c)) for a, b, c in d["timers"]],
                   report={int(k): (t[0], t[1], tuple(t[2]), t[3])
                           for k, t in d.get("report", {}).items()},
                   scalars={k: (int(v[0]), str(v[1]), int(v[2]))
                            for k, v in d.get("scalars", {}).items()},
                   objects=[(str(p), [str(x) for x in pts]) for p, pts in d.get("objects", [])])


def _site_json(site: Any, plan: Any) -> dict[str, Any]:
    d = {"path": site.path, "provider": site.provider, "name": site.name, "pc": site.pc,
         "semaphore": site.semaphore, "args": site.arg_text, "nop_len": site.nop_len,
         "machine": site.machine, "elf_class": site.elf_class}
    if plan is not None:
        d["tactic"], d["reason"] = plan.tactic, plan.reason
    return d


# -- files, locks, permissions ---------------------------------------------------------


def _rmtree(path: Path) -> None:
    import shutil  # eviction and cleaning only: a warm run does not load it
    shutil.rmtree(path, ignore_errors=True)


def _write_atomic(path: Path, data: bytes | str) -> None:
    import tempfile  # random, its import, is not needed by a warm run
    raw = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class _Lock:
    """flock on `path`, reopened if the file was replaced or removed while we waited."""

    def __init__(self, path: Path, mode: int, blocking: bool = True) -> None:
        self.path = path
        self.fd = -1
        while True:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, mode | (0 if blocking else fcntl.LOCK_NB))
            except BlockingIOError:
                os.close(fd)
                raise
            try:
                same = os.fstat(fd).st_ino == os.stat(path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                self.fd = fd
                return
            os.close(fd)
            path.parent.mkdir(mode=0o700, exist_ok=True)

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> _Lock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class CacheRefused(PydynError):
    """A cache directory or entry that is not safely ours."""


def _owner_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def check_private(path: Path, what: str) -> None:
    """CacheRefused unless `path` is owned by us and not writable by group or others."""
    st = os.lstat(path)
    if st.st_uid != os.geteuid():
        raise CacheRefused(f"refusing {what} {path}: owned by {_owner_name(st.st_uid)}, "
                           f"not {_owner_name(os.geteuid())}")
    if not stat.S_ISLNK(st.st_mode) and st.st_mode & 0o022:
        raise CacheRefused(f"refusing {what} {path}: writable by group or others "
                           f"(mode {stat.S_IMODE(st.st_mode):04o})")


def _is_hex(name: str) -> bool:
    return all(c in "0123456789abcdef" for c in name)


def _tighten(entry: Path) -> None:
    """Drop group/other write bits a permissive umask (002) left on what the build made."""
    for dirpath, dirs, files in os.walk(entry):
        for name in [*dirs, *files]:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            if not stat.S_ISLNK(st.st_mode) and st.st_mode & 0o022:
                os.chmod(p, stat.S_IMODE(st.st_mode) & ~0o022)


_held: list[_Lock] = []   # .inuse locks kept for the life of the process


class Hit(NamedTuple):
    program: Any
    modules: ModuleSet
    site_count: int
    sites: list[dict[str, Any]]
    warnings: list[ScriptWarning | str]
    verbose_lines: list[str]


class ModuleCache:
    def __init__(self, root: Path, size_limit: int = DEFAULT_SIZE_MIB << 20,
                 warn: Warn | None = None) -> None:
        self.root = root
        self.size_limit = size_limit
        self.warn = warn or _default_warn
        self._damaged: set[str] = set()

    # -- the directory -----------------------------------------------------------
    def open(self) -> None:
        """Create the directory 0700, or check an existing one (CacheRefused)."""
        try:
            self.root.mkdir(parents=True, mode=0o700)
            os.chmod(self.root, 0o700)
        except FileExistsError:
            pass
        except OSError as exc:
            raise CacheRefused(f"cannot create cache directory {self.root}: "
                               f"{exc.strerror}") from exc
        check_private(self.root, "cache directory")
        if not self.root.is_dir():
            raise CacheRefused(f"refusing cache directory {self.root}: not a directory")

    def entry_dir(self, key: str) -> Path:
        return self.root / key

    # -- compilers -------------------------------------------------------------
    def compiler_inputs(self) -> list[KeyInput]:
        """Per ABI: the compiler's realpath, `--version` and flags; no process is started
        when this compiler binary was seen before."""
        inputs: list[KeyInput] = []
        for abi in ABIS:
            cc_env = abi_cc(abi)
            cc = compiler_path(abi)
            if cc is None:
                inputs.append(KeyInput(f"compiler {abi}", _sha(f"missing {cc_env}"),
                                       f"{cc_env} not found"))
            else:
                inputs.append(self._compiler_input(abi, cc_env, cc))
        return inputs

    def _compiler_input(self, abi: str, cc_env: str, cc: str) -> KeyInput:
        real = os.path.realpath(cc)
        st = os.stat(real)
        ident = f"{cc_env}|{cc}|{real}|{st.st_dev}:{st.st_ino}|{st.st_size}|{st.st_mtime_ns}"
        memo_path = self.root / "compilers.json"
        try:
            memo = json.loads(memo_path.read_text())
            if not isinstance(memo, dict):
                memo = {}
        except (OSError, ValueError):
            memo = {}
        version = memo.get(ident)
        if not isinstance(version, str):
            version = compiler_version(cc)
            memo[ident] = version
            try:
                _write_atomic(memo_path, json.dumps(memo, indent=1, sort_keys=True))
            except OSError:
                pass
        first = version.splitlines()[0] if version else "?"
        return KeyInput(f"compiler {abi}",
                        _sha(f"{real}\n{' '.join(abi_flags(abi))}\n"
                             f"{' '.join(COMMON_CFLAGS)}\n{version}"),
                        f"{real} {' '.join(abi_flags(abi))} ({first})")

    # -- -c targets -------------------------------------------------------------
    # Not part of any key (the same modules serve every target of a script that names
    # its binaries): what a session needs of its target is checked once per target
    # version and remembered here, so a hit still starts no ELF parser.
    def _target_ident(self, path: str) -> str:
        return f"{os.path.realpath(path)}|{file_fingerprint(path)}"

    def target_checked(self, path: str) -> bool:
        """Whether the -c program at `path`, as it is now, passed check_command_target."""
        try:
            memo = json.loads((self.root / "targets.json").read_text())
            return isinstance(memo, dict) and memo.get(self._target_ident(path)) is True
        except (OSError, ValueError):
            return False

    def remember_target(self, path: str) -> None:
        memo_path = self.root / "targets.json"
        try:
            ident = self._target_ident(path)
            try:
                memo = json.loads(memo_path.read_text())
                if not isinstance(memo, dict) or len(memo) > 1000:
                    memo = {}
            except (OSError, ValueError):
                memo = {}
            memo[ident] = True
            _write_atomic(memo_path, json.dumps(memo, indent=1, sort_keys=True))
        except OSError:
            pass

    # -- lookup ------------------------------------------------------------------
    def lookup_text(self, text: str, filename: str, args: Sequence[str],
                    defines: Sequence[str], target_path: str | None,
                    guru: bool = False, extra: Sequence[tuple[str, str]] = (),
                    ) -> tuple[Lookup | None, Hit | None]:
        """The cheap key of this run and the entry it names, if that entry is sound;
        before any parse (a hit never parses, resolves nor translates).  On a miss the
        caller parses and binds the Lookup (`bind_script`) before `build`.

        (None, None) after one warning if the entry is not safely ours: build privately."""
        inputs = script_inputs(text, filename, args, defines, self.compiler_inputs())
        if guru:   # -g changes guru_mode conditions and what translates: never shared
            inputs.append(KeyInput("guru mode", "1"))
        # options that change the program without being in its text (-G NAME=VALUE,
        # --compatible, -I tapset files; --skip-badvars is a -D STP_SKIP_BADVARS)
        inputs.extend(KeyInput(what, _sha(value.encode(errors="surrogateescape")),
                               f"{len(value)} chars") for what, value in extra)
        try:
            return self.lookup(Lookup(inputs, target_path))
        except CacheRefused as exc:
            self.warn(f"{exc}; building in a private directory instead")
            return None, None

    def build(self, lk: Lookup | None, deps: Iterable[str], program: Any, required: set[str],
              defines: Sequence[str], warnings: Sequence[ScriptWarning | str],
              verbose_lines: Sequence[str] = (), keep: bool = False) -> ModuleSet:
        """`store`, or a private build when the lookup refused the entry (or store does)."""
        if lk is not None:
            try:
                return self.store(lk, deps, program, required, defines, warnings,
                                  verbose_lines)
            except CacheRefused as exc:
                self.warn(f"{exc}; building in a private directory instead")
        return build_private(program, required, defines, keep)

    def lookup(self, lk: Lookup) -> tuple[Lookup, Hit | None]:
        try:
            index = json.loads((self.root / "index" / f"{lk.script_hash}.json").read_text())
            points, deps = index["points"], index["deps"]
            if not all(isinstance(p, str) for p in [*points, *deps]):
                return lk, None
            lk.bind(points, bool(index["uses_library"]), bool(index.get("uses_target")))
        except (OSError, ValueError, KeyError, TypeError):
            return lk, None
        lk.deps = sorted(set(deps) | set(lk.named))
        key = full_key(lk.base, dep_inputs(lk.deps))
        entry = self.entry_dir(key)
        if not entry.is_dir():
            return lk, None
        check_private(entry, "cache entry")
        with _Lock(entry / ".lock", fcntl.LOCK_SH):
            hit = self._verify(entry, key)
            if hit is not None:
                _held.append(_Lock(entry / ".inuse", fcntl.LOCK_SH))
        return lk, hit

    def _verify(self, entry: Path, key: str, *, report: bool = True) -> Hit | None:
        """The entry's Hit if the manifest and every artefact check out."""
        manifest = entry / f"pydyn_{key}.json"
        if not manifest.exists():
            return None   # never completed (a build was interrupted): rebuild quietly
        try:
            for p in [entry, *entry.iterdir()]:
                if p.name not in (".lock", ".inuse"):
                    check_private(p, "cache entry")
            doc = json.loads(manifest.read_bytes())
            body = doc["body"]
            if doc["sha256"] != _sha(_canonical(body)):
                return self._damage(entry, key, "manifest checksum mismatch", report)
            if body["format"] != FORMAT_VERSION or body["key"] != key:
                return self._damage(entry, key, "manifest of another key or format", report)
            for name, digest in body["artefacts"].items():
                try:
                    actual = _file_sha(entry / name)
                except FileNotFoundError:
                    return self._damage(entry, key, f"{name} is missing", report)
                if actual != digest:
                    return self._damage(entry, key, f"{name}: checksum mismatch", report)
            modules = {abi: entry / name for abi, name in body["modules"].items()}
            c_source = (entry / f"pydyn_{key}.c").read_text()
            program = program_from_json(body["program"], c_source)
        except CacheRefused:
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            return self._damage(entry, key, f"manifest unreadable ({type(exc).__name__})",
                                report)
        except OSError as exc:
            return self._damage(entry, key, f"unreadable ({exc.strerror})", report)
        for abi, libdirs in LIB_DIRS.items():
            if abi in modules and not all((entry / d / f"pydyn_{key}.so").exists()
                                          for d in libdirs):
                link_lib_dirs(entry, key, modules)
        try:
            os.utime(manifest)   # last use, for the LRU eviction
        except OSError:
            pass
        return Hit(program, ModuleSet(entry, key, modules, from_cache=True),
                   body["site_count"], body["sites"],
                   [ScriptWarning.from_json(w) if isinstance(w, dict) else w
                    for w in body["warnings"]],
                   body["verbose_lines"])

    def _damage(self, entry: Path, key: str, reason: str, report: bool) -> Hit | None:
        if report and key not in self._damaged:
            self.warn(f"cache entry {entry} is damaged ({reason}); rebuilding it")
        self._damaged.add(key)
        return None

    # -- store --------------------------------------------------------------------
    def store(self, lk: Lookup, deps: Iterable[str], program: Any, required: set[str],
              defines: Sequence[str], warnings: Sequence[ScriptWarning | str],
              verbose_lines: Sequence[str] = ()) -> ModuleSet:
        """Build the modules into their entry (or take the one a concurrent run built)."""
        plans = list(getattr(program, "plans", []))
        base = lk.base
        lk.deps = sorted(set(deps) | set(lk.deps) | set(lk.named))
        dep_keys = dep_inputs(lk.deps)
        key = full_key(base, dep_keys)
        index_dir = self.root / "index"
        index_dir.mkdir(mode=0o700, exist_ok=True)
        _write_atomic(index_dir / f"{lk.script_hash}.json",
                      json.dumps({"points": lk.points, "uses_library": lk.uses_library,
                                  "uses_target": lk.uses_target, "deps": lk.deps}))
        entry = self.entry_dir(key)
        entry.mkdir(mode=0o700, exist_ok=True)
        check_private(entry, "cache entry")
        with _Lock(entry / ".lock", fcntl.LOCK_EX):
            hit = self._verify(entry, key, report=key not in self._damaged)
            if hit is not None and required <= set(hit.modules.modules):
                _held.append(_Lock(entry / ".inuse", fcntl.LOCK_SH))
                return hit.modules
            for stale in entry.glob("*.tmp*"):
                stale.unlink(missing_ok=True)
            (entry / f"pydyn_{key}.json").unlink(missing_ok=True)
            store = self.root / RUNTIME_STORE
            if store.exists():
                check_private(store, "runtime object store")
            modules = build_modules(program.c_source, key, entry, required, defines,
                                    runtime_store=store, warn=self.warn)
            _tighten(entry)
            artefacts = {p.name: _file_sha(p) for p in
                         [entry / f"pydyn_{key}.c", entry / "pd_shm.h",
                          *modules.modules.values()]}
            inputs = [*base, *dep_keys]
            body = {
                "format": FORMAT_VERSION, "key": key, "created": time.time(),
                "inputs": [{"name": i.label, "sha256": i.digest, "value": i.note}
                           for i in inputs],
                "deps": lk.deps,
                "artefacts": artefacts,
                "modules": {abi: p.name for abi, p in modules.modules.items()},
                "required": sorted(required),
                "program": program_to_json(program),
                "site_count": len(program.sites),
                "sites": [_site_json(s, plans[i] if i < len(plans) else None)
                          for i, s in enumerate(program.sites)],
                "warnings": [w.to_json() if isinstance(w, ScriptWarning) else w
                             for w in warnings],      # printed again on each hit
                "verbose_lines": list(verbose_lines),
            }
            _write_atomic(entry / f"pydyn_{key}.hash", hash_log(inputs, key, artefacts))
            _write_atomic(entry / f"pydyn_{key}.json",
                          json.dumps({"body": body, "sha256": _sha(_canonical(body))},
                                     indent=1))
            _held.append(_Lock(entry / ".inuse", fcntl.LOCK_SH))
        self.evict(keep=key)
        return ModuleSet(entry, key, modules.modules, from_cache=False)

    # -- eviction -------------------------------------------------------------------
    def _entries(self) -> list[tuple[float, int, Path]]:
        out = []
        for d in self.root.iterdir():
            # 16 hex digits: an entry of the cache before keys (pydyn 0.1), kept until evicted
            if len(d.name) not in (16, KEY_LEN) or not _is_hex(d.name) or not d.is_dir() \
                    or d.is_symlink():
                continue
            size = 0
            for dirpath, _dirs, files in os.walk(d):
                for name in files:
                    try:
                        size += os.lstat(os.path.join(dirpath, name)).st_size
                    except OSError:
                        pass
            manifest = d / f"pydyn_{d.name}.json"
            try:
                used = manifest.stat().st_mtime
            except OSError:
                used = d.stat().st_mtime
            out.append((used, size, d))
        return sorted(out)

    def evict(self, keep: str | None = None, limit: int | None = None) -> tuple[int, int]:
        """Remove least recently used entries until the total fits; (removed, busy kept)."""
        limit = self.size_limit if limit is None else limit
        removed = busy = 0
        with _Lock(self.root / ".lock", fcntl.LOCK_EX):
            entries = self._entries()
            total = sum(size for _, size, _ in entries)
            for _used, size, d in entries:
                if total <= limit:
                    break
                if d.name == keep:
                    continue
                if self._remove(d):
                    total -= size
                    removed += 1
                else:
                    busy += 1
        return removed, busy

    def _remove(self, d: Path) -> bool:
        try:
            lock = _Lock(d / ".lock", fcntl.LOCK_EX, blocking=False)
        except BlockingIOError:
            return False
        except OSError:
            return False
        try:
            try:
                inuse = _Lock(d / ".inuse", fcntl.LOCK_EX, blocking=False)
            except BlockingIOError:
                return False
            inuse.release()
            trash = self.root / f".trash.{d.name}.{os.getpid()}"
            try:
                os.rename(d, trash)
            except OSError as exc:
                if exc.errno == errno.ENOENT:
                    return True
                raise
            _rmtree(trash)
            return True
        finally:
            lock.release()

    def clean(self) -> tuple[int, int]:
        """--clean-cache: every entry not in use, the index, the compiler memo and the
        precompiled runtime."""
        removed, busy = self.evict(limit=-1)
        _rmtree(self.root / "index")
        _rmtree(self.root / RUNTIME_STORE)
        (self.root / "compilers.json").unlink(missing_ok=True)
        for trash in self.root.glob(".trash.*"):
            _rmtree(trash)
        return removed, busy


def open_cache(root: Path, size_mib: float = DEFAULT_SIZE_MIB,
               warn: Warn | None = None) -> ModuleCache | None:
    """The cache at `root`, or None (after one warning) if it is not safely ours."""
    cache = ModuleCache(root, int(size_mib * (1 << 20)), warn)
    try:
        cache.open()
    except CacheRefused as exc:
        cache.warn(f"{exc}; not using the module cache")
        return None
    return cache


def build_private(program: Any, required: set[str], defines: Sequence[str],
                  keep: bool = False) -> ModuleSet:
    """--disable-cache (or a refused cache): build in a fresh 0700 temporary directory,
    removed when pydyn exits unless `keep` (-p4 prints the paths)."""
    import atexit
    import tempfile
    out = Path(tempfile.mkdtemp(prefix="pydyn-"))
    if not keep:
        atexit.register(_rmtree, out)
    return build_modules(program.c_source, program.checksum_hex, out, required, defines)


def _canonical(body: Any) -> str:
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


def hash_log(inputs: Sequence[KeyInput], key: str, artefacts: dict[str, str]) -> str:
    width = max(len(i.label) for i in inputs) + 1
    lines = ["# pydyn module cache: the key is the first 32 hex digits of the sha256",
             "# of the lines 'NAME: HASH' below, in this order.",
             *(f"{i.label + ':':<{width}} {i.digest}" + (f"  # {i.note}" if i.note else "")
               for i in inputs),
             f"{'key:':<{width}} {key}",
             "# artefacts (sha256):",
             *(f"{name}: {digest}" for name, digest in sorted(artefacts.items()))]
    return "\n".join(lines) + "\n"


def forbid_elf_parsing() -> None:
    """PYDYN_DEBUG_NO_ELF=1: any ELF parse (pyelftools) in this process is an error,
    which proves that a cache hit reads no ELF file beyond its build-id notes."""
    from elftools.elf.elffile import ELFFile

    def refuse(self: object, stream: Any, *args: object, **kw: object) -> None:
        raise PydynError(f"{NO_ELF_ENV} is set, but pydyn parsed the ELF file "
                         f"{getattr(stream, 'name', stream)}")

    ELFFile.__init__ = refuse  # type: ignore[method-assign]
