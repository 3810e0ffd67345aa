"""Regex sub-matches on a real process, m64 and m32: `s =~ "re"` then `matched(n)`,
`matched_str()` and `ngroups()` on strings the program passes to a <sys/sdt.h> mark
(tests/progs/regex_subjects.c).  The groups are POSIX's leftmost-longest ones, as
stap's tagged DFA gives them: where Python's `re` (leftmost-first) agrees the
expectation is its own, elsewhere it is written out.  Then the errors stap's tapset
gives (a group the pattern lacks, a failed match) and the search's limits, each an
error of the handler while the program runs on."""

from __future__ import annotations

import random
import re
import subprocess
from pathlib import Path

from cbuild import ERRORS_RUN_ON, PROGS, abi_program_fixture, build_c, run_pydyn

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


HARNESS = r"""
#include "pd_runtime.h"
#include <regex.h>
#include <stdarg.h>
#include <stdio.h>

void pd_error(struct pd_ctx *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    c->error = 1;
}
"""
HARNESS_MAIN = r"""
int main(void)
{
    static struct pd_ctx c;
    static int32_t caps[2 * 64];
    static struct pd_match m;
    m.caps = caps;
    c.match = &m;
    for (unsigned k = 0; k < sizeof progs / sizeof *progs; k++) {
        regex_t re;
        if (regcomp(&re, pats[k], REG_EXTENDED)) {
            printf("glibc refuses %s\n", pats[k]);
            continue;
        }
        for (unsigned s = 0; s < sizeof subj / sizeof *subj; s++) {
            regmatch_t pm[1];
            int g = regexec(&re, subj[s], 1, pm, 0) == 0;
            int d = (int)dfas[k](subj[s]);
            char buf[MAXSTRINGLEN];
            c.error = 0;
            pd_re_attempt(&c, progs[k], subj[s], d);
            if (d)
                pd_re_matched(&c, buf, 0);
            printf("%u %u %d %d", k, s, g, d);
            if (g)
                printf(" %d %d", (int)pm[0].rm_so, (int)pm[0].rm_eo);
            if (d && !c.error)
                printf(" %d %d", caps[0], caps[1]);
            printf("\n");
        }
        regfree(&re);
    }
    return 0;
}
"""


def _random_pattern(rnd: random.Random, depth: int = 0) -> str:
    """An ERE over a, b, c: groups, alternation (empty alternatives too), `* + ?`,
    bounds, `.`."""
    def atom() -> str:
        if depth < 3 and rnd.random() < 0.35:
            return "(" + _random_pattern(rnd, depth + 1) + ")"
        return rnd.choice("abc") if rnd.random() < 0.9 else "."

    def piece() -> str:
        a, r = atom(), rnd.random()
        lo = rnd.randint(0, 2)
        return a + ("*" if r < 0.15 else "+" if r < 0.25 else "?" if r < 0.35 else
                    f"{{{lo},{lo + rnd.randint(0, 2)}}}" if r < 0.4 else "")

    def cat() -> str:
        return "".join(piece() for _ in range(rnd.randint(0 if depth else 1, 3)))

    return "|".join(cat() for _ in range(1 if rnd.random() < 0.6 else rnd.randint(2, 3)))


def test_match_and_span_as_glibc(tmp_path: Path) -> None:
    """For random patterns and strings, linked with runtime/pd_regex.c: the DFA decides
    as glibc's regexec, and matched(0) is glibc's leftmost-longest span, the search
    within its limits.  (glibc's groups are no oracle: it takes an alternation's first
    fitting alternative, not the longest.)"""
    from pydyn.launcher.errors import SourceLocation
    from pydyn.launcher.translate.regex import compile_regex, regex_c, regex_groups_c
    from pydyn.shmlayout import render_c_header

    rnd = random.Random(1)
    patterns = sorted({_random_pattern(rnd) for _ in range(50)})
    subjects = ["".join(rnd.choice("abc") for _ in range(rnd.randint(0, 8)))
                for _ in range(40)]
    lines = [HARNESS]
    for k, p in enumerate(patterns):
        lines += regex_c(f"re_{k}", p, compile_regex(p.encode()), SourceLocation("t", 1, 1))
        lines += regex_groups_c(f"re_{k}", p.encode())
    lines += ["static const char *pats[] = {" + ",".join(f'"{p}"' for p in patterns) + "};",
              "static const struct pd_re_prog *progs[] = {"
              + ",".join(f"&re_{k}_prog" for k in range(len(patterns))) + "};",
              "static int64_t (*dfas[])(const char *) = {"
              + ",".join(f"re_{k}" for k in range(len(patterns))) + "};",
              "static const char *subj[] = {" + ",".join(f'"{s}"' for s in subjects) + "};",
              HARNESS_MAIN]
    (tmp_path / "pd_shm.h").write_text(render_c_header())
    (tmp_path / "h.c").write_text("\n".join(lines))
    runtime = Path(__file__).resolve().parent.parent / "runtime"
    exe = build_c([tmp_path / "h.c", runtime / "pd_regex.c"], tmp_path / "h", opt="-O1",
                  extra=["-I", str(tmp_path), "-I", str(runtime), "-Wno-unused-function"])
    out = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120).stdout
    rows = [ln.split() for ln in out.splitlines()]
    assert len(rows) == len(patterns) * len(subjects), out[:2000]
    matches = 0
    for row in rows:
        k, s = int(row[0]), int(row[1])
        what = f"{patterns[k]!r} on {subjects[s]!r}: {' '.join(row[2:])}"
        assert row[2] == row[3], f"match decision differs: {what}"
        if row[2] == "1":
            matches += 1
            assert row[4:6] == row[6:8], f"span differs: {what}"
    assert matches > 400, matches
