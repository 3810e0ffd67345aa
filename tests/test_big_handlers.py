"""A handler of many statements (translate/emit.py outline_statements): each statement
is counted by a call and a long array store is one call, so the C stays small a
statement and gcc's time grows with the statements, not faster.  Same results as the
inline form: values, MAXACTION, the order the value and the key are evaluated in."""

from __future__ import annotations

from pathlib import Path

from cbuild import run_pydyn

N = 300


def _script(n: int, extra: str = "") -> str:
    return ("global a, order\nfunction v(x) { order .= sprintf(\"v%d \", x); return x }\n"
            "function k(x) { order .= sprintf(\"k%d \", x); return x }\n"
            "probe begin {\n" + "".join(f"  a[{i}] = {i * 3};\n" for i in range(n, 0, -1)) +
            "  a[k(7)] = v(8)\n" + extra +
            "  s = 0; foreach (i in a) s += a[i]\n"
            "  printf(\"n=%d s=%d a7=%d order=%s\\n\", n_of(), s, a[7], order)\n"
            "  exit()\n}\nfunction n_of() { m = 0; foreach (i in a) m++; return m }\n")


def test_many_statements_run_as_the_inline_form(tmp_path: Path, cache: Path) -> None:
    res = run_pydyn(cache, "-p3", "-e", _script(N))
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("pd_action(c, ") >= N and "pd_map_set_i64(c, " in res.stdout
    small = run_pydyn(cache, "-p3", "-e", _script(3))
    assert small.returncode == 0 and "pd_action(c, " not in small.stdout, small.stderr
    for n in (N, 3):
        res = run_pydyn(cache, "-e", _script(n))
        assert res.returncode == 0, res.stderr
        want = sum(i * 3 for i in range(1, n + 1)) - (21 if n >= 7 else 0) + 8
        count = n if n >= 7 else n + 1
        assert f"n={count} s={want} a7=8 order=v8 k7 \n" in res.stdout, res.stdout


def test_maxaction_counts_every_statement(tmp_path: Path, cache: Path) -> None:
    # a begin probe gets ten times MAXACTION (stap's MAXACTION_INTERRUPTIBLE): N // 20
    # allows half of the N statements
    res = run_pydyn(cache, "-D", f"MAXACTION={N // 20}", "-e", _script(N))
    assert "MAXACTION exceeded" in res.stderr, res.stderr
