"""The methods `dataclasses` generates, compiled once (launcher/methodcache.py): a
record made through the table behaves as one compiled from its source, the table
written by `build()` holds the launcher's records and reads back, and a damaged or
foreign table is not used."""

from __future__ import annotations

import dataclasses
import marshal
import subprocess
import sys
from pathlib import Path

import pytest

from pydyn.launcher import methodcache


@pytest.fixture
def table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "__pycache__" / "dataclass-methods.test.marshal"
    monkeypatch.setattr(methodcache, "_path", path)
    monkeypatch.setattr(methodcache, "_table", dict(methodcache._table))
    monkeypatch.setattr(methodcache, "_used", set())
    monkeypatch.setattr(methodcache, "_dirty", methodcache._dirty)   # as it was, after
    return path


def _record() -> type:
    @dataclasses.dataclass(frozen=True)
    class Rec:
        a: int
        b: tuple[int, ...] = ()
        c: list[int] = dataclasses.field(default_factory=list, hash=False)
    return Rec


def test_records_through_the_table_behave_as_compiled(table: Path) -> None:
    methodcache.install()     # as launcher/__init__.py did
    assert dataclasses.exec is methodcache._exec     # type: ignore[attr-defined]
    first = _record()
    compiled = set(methodcache._used)
    assert compiled, "dataclasses compiled nothing through the table"
    again = _record()        # the same texts: the code objects of the table
    assert methodcache._used == compiled
    for cls in (first, again):
        r = cls(1, (2,))
        assert r == cls(1, (2,)) and r != cls(2) and hash(r) == hash(cls(1, (2,)))
        assert repr(r).endswith(".Rec(a=1, b=(2,), c=[])") and r.c is not cls(1).c
        with pytest.raises(dataclasses.FrozenInstanceError):
            r.a = 3      # type: ignore[misc]
        with pytest.raises(TypeError):
            cls()        # type: ignore[call-arg]


def test_build_writes_a_table_that_reads_back(table: Path) -> None:
    res = subprocess.run([sys.executable, "-c", "import sys; from pathlib import Path; "
                          "from pydyn.launcher.methodcache import build; "
                          f"sys.exit(build(Path({str(table)!r})))"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    loaded = methodcache._load(table)
    assert len(loaded) >= 300          # the launcher has ~110 records, ~5 methods each
    assert any("def __init__(self,path:_type_path,provider:_type_provider," in k
               for k in loaded)                               # ProbeSite's


def test_a_damaged_or_foreign_table_is_not_used(table: Path) -> None:
    table.parent.mkdir()
    for raw in (b"", b"\x00garbage", marshal.dumps(["not", "a", "table"]),
                marshal.dumps({"def f(): pass": "not code"})):
        table.write_bytes(raw)
        assert methodcache._load(table) == {}
    code = marshal.dumps(compile("x = 1", "<string>", "exec"))
    table.write_bytes(marshal.dumps({"x = 1": code, 3: code, "y = 2": "not code"}))
    assert methodcache._load(table) == {"x = 1": code}


def test_a_damaged_entry_is_compiled(table: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    methodcache.install()
    text = "def __create_fn__():\n def f(self):\n  return 41 + 1\n return f"
    monkeypatch.setitem(methodcache._table, text, b"\x00not marshalled code")
    ns: dict[str, object] = {}
    methodcache._exec(text, {}, ns)
    assert ns["__create_fn__"]()(None) == 42      # type: ignore[operator]
    assert marshal.loads(methodcache._table[text]).co_name == "<module>"
