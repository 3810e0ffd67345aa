"""The methods `dataclasses` writes for pydyn's records, compiled once and kept beside
the launcher's bytecode.

A dataclass compiles its `__init__`, `__repr__`, `__eq__`, ... from source text when
the class is made: ~0.5 ms a class, some 60 ms of every new script's start for the
launcher's ~110 records (most of the time `dataclasses` takes).  The text depends only
on the class's fields and options, never on a run, so its code object is as reusable as
a module's: `install()` (run before any record is made: launcher/__init__.py) has
`dataclasses` compile through a table of code objects by source text, read from
`__pycache__/dataclass-methods.<python tag>.marshal` next to this file, and the table
is written back at exit when this process compiled a text not in it.

What is stored is what `compile` makes of the text, looked up by the whole text: a
table from another Python (another tag) or a damaged one is not read, and a text it
lacks is compiled as `dataclasses` would.  It lives where Python keeps the launcher's
own bytecode, with the same trust, and is not written where Python would write no
bytecode (`-B`, PYTHONDONTWRITEBYTECODE, a read-only install); written to a temporary
and renamed, concurrent runs leave one whole table.
"""

from __future__ import annotations

import atexit
import builtins
import marshal
import os
import sys
from pathlib import Path
from types import CodeType
from typing import Any

MAX_ENTRIES = 4096       # texts kept (more: the table starts again from this run's)

# source text -> its code, marshalled: read whole, each unmarshalled when used (one
# marshal.load of the code objects themselves takes 5 times as long)
_table: dict[str, bytes] = {}
_used: set[str] = set()
_dirty = False
_path: Path | None = None


def table_path() -> Path | None:
    """Beside this module's bytecode (sys.pycache_prefix honoured)."""
    from importlib.util import cache_from_source
    try:
        pyc = Path(cache_from_source(__file__))
    except NotImplementedError:     # no cache tag
        return None
    return pyc.parent / f"dataclass-methods.{sys.implementation.cache_tag}.marshal"


def _load(path: Path) -> dict[str, bytes]:
    try:
        with open(path, "rb") as f:
            raw = marshal.load(f)
    except (OSError, EOFError, ValueError, TypeError):
        return {}
    if not isinstance(raw, dict):
        return {}
    return {k: v for k, v in raw.items() if isinstance(k, str) and isinstance(v, bytes)}


def _exec(source: Any, globals_: Any = None, locals_: Any = None, /) -> None:
    """`dataclasses`' exec: a source text is compiled at most once per table."""
    global _dirty
    if not isinstance(source, str):
        builtins.exec(source, globals_, locals_)
        return
    code: Any = None
    raw = _table.get(source)
    if raw is not None:
        try:
            code = marshal.loads(raw)
        except (EOFError, ValueError, TypeError):
            pass
    if not isinstance(code, CodeType):
        # as exec would: no flags of this module (its `from __future__`)
        code = compile(source, "<string>", "exec", 0, dont_inherit=True)
        _table[source] = marshal.dumps(code)
        _dirty = True
    _used.add(source)
    builtins.exec(code, globals_, locals_)


def install() -> None:
    """Have `dataclasses` compile through the table, now if it is imported, else when it
    is: a cache hit imports no `dataclasses` (tests/test_startup.py) and reads no
    table."""
    module = sys.modules.get("dataclasses")
    if module is not None:
        _patch(module)
    elif not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


def _patch(dataclasses: Any) -> None:
    global _path
    if getattr(dataclasses, "exec", None) is _exec:
        return
    _path = table_path()
    if _path is not None:
        _table.update(_load(_path))
    dataclasses.exec = _exec
    atexit.register(save)


class _Finder:
    """Finds `dataclasses` as the other finders do, and patches it once loaded."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "dataclasses":
            return None
        sys.meta_path.remove(self)
        from importlib.machinery import PathFinder
        spec = PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            loader: Any = _PatchingLoader(spec.loader)
            spec.loader = loader
        return spec


class _PatchingLoader:
    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self.loader.exec_module(module)
        _patch(module)

    def __getattr__(self, name: str) -> Any:     # get_source, is_package, ...
        return getattr(self.loader, name)


def save(fresh: bool = False) -> None:
    """Write the table back if this process compiled a text it lacked (and Python
    writes bytecode); `fresh`: this process's texts only, written in any case."""
    global _dirty
    if _path is None or not (fresh or (_dirty and not sys.dont_write_bytecode)):
        return
    _dirty = False
    keep = _table if len(_table) <= MAX_ENTRIES and not fresh else \
        {k: _table[k] for k in _used}
    tmp = _path.with_name(f"{_path.name}.{os.getpid()}.tmp")
    try:
        _path.parent.mkdir(exist_ok=True)
        with open(tmp, "wb") as f:
            marshal.dump(keep, f)
        os.replace(tmp, _path)
    except OSError:
        try:
            tmp.unlink()
        except OSError:
            pass


def build(path: Path | None = None) -> int:
    """The table of every record of the launcher, made again (make py-install, beside
    compileall: the environment may forbid writing bytecode at run time), at `path`
    (else where runs read it).  In a process that has imported none of the launcher's
    modules besides this one."""
    global _path
    import dataclasses
    import importlib
    import pkgutil

    import pydyn.launcher
    import pydyn.shmlayout
    _patch(dataclasses)      # now, not at the first record: `path` stays
    if path is not None:
        _path = path
    for pkg in (pydyn.launcher, pydyn.shmlayout):
        for mod in pkgutil.walk_packages(pkg.__path__, f"{pkg.__name__}."):
            if mod.name.endswith("__main__"):
                continue
            try:
                importlib.import_module(mod.name)
            except Exception as exc:  # noqa: BLE001 - an optional dependency may be missing
                print(f"methodcache: {mod.name} not imported: {exc}", file=sys.stderr)
    save(fresh=True)
    print(f"{_path}: {len(_used)} methods", file=sys.stderr)
    return 0
