"""Regex sub-matches on a real process, m64 and m32: `s =~ "re"` then `matched(n)`,
`matched_str()` and `ngroups()` on strings the program passes to a <sys/sdt.h> mark
(tests/progs/regex_subjects.c).  The groups are POSIX's leftmost-longest ones, as
stap's tagged DFA gives them: where Python's `re` (leftmost-first) agrees the
expectation is its own, elsewhere it is written out.  Then the errors stap's tapset
gives (a group the pattern lacks, a failed match) and the search's limits, each an
error of the handler while the program runs on."""

from __future__ import annotations

import re
from pathlib import Path

from cbuild import ERRORS_RUN_ON, PROGS, abi_program_fixture, run_pydyn

target = abi_program_fixture(PROGS / "regex_subjects.c", "regex_subjects")

# (pattern, subjects): Python's re finds the same groups (a group that took no part
# is "" in stap, None in Python)
AGREES = [
    ("([a-z]+)=([0-9]+)", ["key=42", "x: foo=7;", "nothing here"]),
    ("^(GET|POST) (/[^ ]*)( HTTP/1\\.[01])?$",
     ["GET /index.html HTTP/1.1", "POST /form", "PUT /x"]),
    ("(([0-9]+)\\.([0-9]+))", ["v1.25", "release 10.0.3"]),       # nested
    ("a(x)?b", ["ab", "zaxb"]),                                      # optional
    ("(foo)|(bar)", ["bar", "foo", "baz"]),                          # alternation
    ("(ab)+c", ["xxababc"]),                                         # last iteration
    ("([0-9]{2,3})([0-9]*)", ["12345", "7"]),                        # bounds
    ("^/([^/]*)/(.*)$", ["/etc/hosts", "/usr/lib/x86_64-linux-gnu/libc.so.6"]),
    ("(a|b)*c", ["abababbac"]),
    ("(x)(y)?(z)", ["xz"]),
]
# (pattern, subject, groups): leftmost-longest, each group left to right the longest
# it can be while the whole stays the longest (Python's re gives other groups here)
POSIX = [
    ("(long|longer)", "longer", ["longer", "longer"]),
    ("a*|b", "baaab", ["b"]),
    ("(a|ab)(c|bcd)(d*)", "abcd", ["abcd", "ab", "c", "d"]),
    ("(a|ab)(bc|c)", "abc", ["abc", "ab", "c"]),
    ("(wee|week)(knights|night)", "weeknights", ["weeknights", "wee", "knights"]),
    ("(.*)(.*)", "xyz", ["xyz", "xyz", ""]),
    ("(a*)a*a", "aaa", ["aaa", "aa"]),
    ("(a+|b)*", "ab", ["ab", "b"]),
    ("(x|xy)(z|yz)?w", "xyzw", ["xyzw", "xy", "z"]),
    ("(^|foo)bar", "bar", ["bar", ""]),
    ("[[:alpha:]]+([[:digit:]]+)", "__eth10__", ["eth10", "10"]),   # no [: :] in re
]


def stap_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def subjects_file(tmp_path: Path, rows: list[tuple[int, str]]) -> Path:
    path = tmp_path / "subjects"
    path.write_text("".join(f"{k}\t{s}\n" for k, s in rows))
    return path


def groups_script(exe: Path, patterns: list[str]) -> str:
    """A handler testing subject j against pattern k, printing `j|ngroups|g0|g1...` from
    a function (stap's state is the handler's: a function it calls sees it)."""
    tests = "\n  else ".join(
        f'if ($arg1 == {k}) {{ if (s =~ {stap_string(p)}) show($arg2) '
        'else printf("%d|nomatch\\n", $arg2) }' for k, p in enumerate(patterns))
    return ('function show(j) {\n  out = sprintf("%d|%d", j, ngroups())\n'
            '  for (i = 0; i < ngroups(); i++) out .= "|" . matched(i)\n'
            '  if (matched_str() != matched(0)) out .= "|matched_str differs"\n'
            '  println(out)\n}\n'
            f'probe process("{exe}").mark("subject") {{\n  s = user_string($arg3)\n  {tests}\n}}\n')


def expected_line(j: int, groups: list[str] | None) -> str:
    if groups is None:
        return f"{j}|nomatch"
    return "|".join([str(j), str(len(groups)), *groups])


def test_groups_as_python_and_posix(tmp_path: Path, target: Path, cache: Path) -> None:
    patterns = [p for p, _ in AGREES] + [p for p, _, _ in POSIX]
    rows: list[tuple[int, str]] = []
    want: list[str] = []
    for k, (pattern, subjects) in enumerate(AGREES):
        for s in subjects:
            m = re.search(pattern, s)
            groups = None if m is None else [m[0], *(g or "" for g in m.groups())]
            want.append(expected_line(len(rows), groups))
            rows.append((k, s))
    for k, (_, s, groups) in enumerate(POSIX, len(AGREES)):
        want.append(expected_line(len(rows), groups))
        rows.append((k, s))
    data = subjects_file(tmp_path, rows)
    res = run_pydyn(cache, "-e", groups_script(target, patterns), "-c", f"{target} {data}")
    assert res.returncode == 0, res.stderr
    got = [ln for ln in res.stdout.splitlines() if ln[:1].isdigit()]
    assert got == want, res.stdout
    assert f"done {len(rows)}" in res.stdout


def test_string_kept_and_groups_cleared(tmp_path: Path, target: Path, cache: Path) -> None:
    """matched() reads the copy =~ took (the variable changed since), a later =~ with
    fewer groups replaces the earlier one's, and `!~` records its match too."""
    data = subjects_file(tmp_path, [(0, "abc")])
    script = (f'probe process("{target}").mark("subject") {{\n'
              '  s = user_string($arg3)\n'
              '  if (s =~ "a(b)(c)") { s = "changed"; printf("1 %d %s %s\\n", ngroups(), '
              'matched(1), matched(2)) }\n'
              '  if ("xa" =~ "a") printf("2 %d %s\\n", ngroups(), matched(0))\n'
              '  if (!("q-r" !~ "(q)-(r)")) printf("3 %s%s\\n", matched(2), matched(1))\n}')
    res = run_pydyn(cache, "-e", script, "-c", f"{target} {data}")
    assert res.returncode == 0, res.stderr
    assert [ln for ln in res.stdout.splitlines() if ln[:1].isdigit()] == \
        ["1 3 b c", "2 1 a", "3 rq"], res.stdout


def test_errors_as_stap(tmp_path: Path, target: Path, cache: Path) -> None:
    """A group the pattern lacks, a negative one, groups of a failed match and
    matched() in a handler that ran no =~: each the handler's error with stap's
    message; the program runs to its end."""
    data = subjects_file(tmp_path, [(0, "ab"), (1, "ab"), (2, "zz"), (3, "zz"), (4, "ab")])
    script = (f'probe process("{target}").mark("subject") {{\n'
              '  s = user_string($arg3)\n'
              '  if ($arg1 == 0 && s =~ "(a)(b)") println(matched(3))\n'
              '  if ($arg1 == 1 && s =~ "(a)(b)") println(matched(-1))\n'
              '  if ($arg1 == 2 && !(s =~ "(a)(b)")) println(matched(1))\n'
              '  if ($arg1 == 3 && !(s =~ "(a)(b)")) println(ngroups())\n'
              '  if ($arg1 == 4) println(matched_str())\n'
              '}')
    res = run_pydyn(cache, *ERRORS_RUN_ON, "-e", script, "-c", f"{target} {data}")
    assert "done 5" in res.stdout, res.stdout + res.stderr
    for msg in ("Attempted to get nonexistent subexpression 3",
                "Attempted to get nonexistent subexpression -1",
                "Attempted to get subexpression 1 from failed match",
                "Attempted to get subexpression count from failed match",
                "Attempted to get nonexistent subexpression 0"):
        assert f"ERROR: {msg} near" in res.stderr, res.stderr
    assert "Number of errors: 5" in res.stderr, res.stderr


def test_search_limits_are_errors(tmp_path: Path, target: Path, cache: Path) -> None:
    """A search over its step budget or its frames is an error of the handler (the
    =~ itself still answers); with the defaults the same search succeeds."""
    subject = "ab" * 100 + "c"
    data = subjects_file(tmp_path, [(0, subject)])
    script = (f'probe process("{target}").mark("subject") {{\n'
              '  s = user_string($arg3)\n'
              '  if (s =~ "(a|b)*c") { println("matched"); println(matched(1)) }\n}')
    res = run_pydyn(cache, "-e", script, "-c", f"{target} {data}")
    assert res.returncode == 0 and "matched\nb\n" in res.stdout, res.stdout + res.stderr
    for limit in ("PD_RE_STEPS=50", "PD_RE_FRAMES=20"):
        res = run_pydyn(cache, "-D", limit, "-e", script, "-c", f"{target} {data}")
        name = limit.split("=")[0]
        assert f"regex sub-match search over its limit {name}" in res.stderr, res.stderr
        assert "matched\n" in res.stdout and "done 1" in res.stdout, res.stdout
