"""`--json`: every stdout line is a JSON record of the documented shape."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cbuild import build_c, run_pydyn

QUIET_C = r"""
#include <sys/sdt.h>
int main(void) {
    for (long i = 1; i <= 4; i++) DTRACE_PROBE1(jsn, tick, i);
    return 0;
}
"""

SCRIPT = r"""
global x, name, alpha, phi, empty, lat, lin, seen
probe process("BIN").mark("tick") {
    alpha["one", $arg1] = $arg1 * 10; phi <<< $arg1; lat <<< $arg1; lin <<< $arg1
    seen[$arg1] = 1
    if ($arg1 > 4) empty <<< $arg1   # never fed (`if (0)` pass 2 folds away, the global too)
}
probe end {
    x = 5; name = "it's \"q\""
    printf("ticks=%d\n", @count(lat)); print(@hist_log(lat)); print(@hist_linear(lin, 0, 4, 2))
    printf("x=%#x\n", 5)   # the same text as x's report line, but a printf
    warn("careful"); foreach (k in seen) printf("k%d\n", k)
    z = 0; printf("%d\n", 1 / z)
}
"""

SHAPES: dict[str, Any] = {"header": dict, "printf": str, "error": str, "warning": str,
                          "map": dict, "stats": dict, "hist": dict}


@pytest.fixture(scope="module")
def quiet(tmp_path_factory: pytest.TempPathFactory, sdt_cflags: object) -> Path:
    d = tmp_path_factory.mktemp("json")
    (d / "q.c").write_text(QUIET_C)
    return build_c(d / "q.c", d / "quiet")


def records(stdout: str) -> list[dict[str, Any]]:
    out = []
    for line in stdout.splitlines():
        rec = json.loads(line)
        assert set(rec) == {"type", "data"}, rec
        assert isinstance(rec["data"], SHAPES[rec["type"]]), rec
        out.append(rec)
    return out


def test_json_records(quiet: Path, cache: Path) -> None:
    r = run_pydyn(cache, "--json", "-e", SCRIPT.replace("BIN", str(quiet)), "-c", str(quiet))
    assert r.returncode == 1, r.stderr      # the division by zero is an error
    recs = records(r.stdout)
    assert recs[0] == {"type": "header", "data": {"version": recs[0]["data"]["version"],
                                                  "schema": 1}}
    assert isinstance(recs[0]["data"]["version"], str)
    assert [x["type"] for x in recs].count("header") == 1
    by: dict[str, list[Any]] = {}
    for rec in recs[1:]:
        by.setdefault(rec["type"], []).append(rec["data"])
    assert by["printf"] == ["ticks=4\n", "x=0x5\n", "k1\n", "k2\n", "k3\n", "k4\n"]
    assert by["warning"] == ["careful"]
    assert len(by["error"]) == 1 and "division by 0" in by["error"][0]
    log, lin = by["hist"]
    assert log == {"kind": "log", "buckets": [{"value": 1, "count": 1},
                                              {"value": 2, "count": 2},
                                              {"value": 4, "count": 1}]}
    assert lin == {"kind": "linear", "lo": 0, "hi": 4, "step": 2, "underflow": 0,
                   "overflow": 0, "buckets": [{"value": 0, "count": 1},
                                              {"value": 2, "count": 2},
                                              {"value": 4, "count": 1}]}
    maps = by["map"]
    assert {"name": "x", "key": [], "value": 5} in maps
    assert {"name": "name", "key": [], "value": "it's \"q\""} in maps
    assert [m for m in maps if m["name"] == "alpha"] == [
        {"name": "alpha", "key": ["one", k], "value": k * 10} for k in (4, 3, 2, 1)]
    assert by["stats"] == [
        {"name": "phi", "key": [], "count": 4, "min": 1, "max": 4, "sum": 10, "avg": 2},
        {"name": "empty", "key": [], "count": 0}] or by["stats"] == [
        {"name": "empty", "key": [], "count": 0},
        {"name": "phi", "key": [], "count": 4, "min": 1, "max": 4, "sum": 10, "avg": 2}]
    assert "Traceback" not in r.stderr


def test_json_cache_hit_keeps_report_tags(quiet: Path, cache: Path) -> None:
    script = 'global n probe begin { n = 7; printf("n=%#x\\n", 7) }'
    first = records(run_pydyn(cache, "--json", "-e", script).stdout)
    second = records(run_pydyn(cache, "--json", "-e", script).stdout)   # from the manifest
    for recs in (first, second):
        assert recs[1:] == [{"type": "printf", "data": "n=0x7\n"},
                            {"type": "map", "data": {"name": "n", "key": [], "value": 7}}]
