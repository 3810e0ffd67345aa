"""What a new user brings: SystemTap's example scripts' idioms (systemtap.examples'
process/, profiling/, general/, memory/) and the usual one-liners, run on Debian's own
programs (coreutils, dash, python3.11, PostgreSQL 15, libc with libc6-dbg's DWARF).
Each one here once broke on them:

- `@count`/`@sum` of a statistic array element never added to is 0 (fntimes.stp
  guards `@max` with it), not an "empty aggregate" error;
- `if (@defined($mem))` decided per site (last_100_frees.stp, mutex-contention.stp:
  one probe on a libc with DWARF and one without), its dead branch never typed;
- `print_ubacktrace_brief()` (graphcall.stp);
- `.library("GLOB")` over the libraries the program loads, `.plt("NAME").return`
  and `target_set_pid()` (ltrace.stp, whythefail.stp, eventcount.stp);
- process.end of a process leaving by `_exit` (dash, every `sh -c`) or replaced by
  an exec;
- pp() and pn() of a wildcard point name the mark or function that fired;
- a new script with backtraces on a large program reads its unwind table from the
  cache instead of decoding every FDE again.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from cbuild import run_pydyn

from pydyn.launcher.elf.unwind import UNWIND_FORMAT
from pydyn.launcher.factstore import binary_key, decode, encode

LIBC = "/lib/x86_64-linux-gnu/libc.so.6"
LIBC32 = "/usr/lib32/libc.so.6"
PY = "/usr/bin/python3.11"
POSTGRES = Path("/usr/lib/postgresql/15/bin")
LS = "/usr/bin/ls"


def need(*paths: str) -> None:
    for p in paths:
        if not (Path(p).exists() or shutil.which(p)):
            pytest.skip(f"{p} is not installed")


def need_libc_dwarf() -> None:
    need(LIBC)
    if not list(Path("/usr/lib/debug/.build-id").glob("*/*.debug")):
        pytest.skip("libc's DWARF is not installed (apt-get install libc6-dbg)")


def ok(res: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in res.stderr, res.stderr
    assert res.returncode == 0, res.stderr[-3000:]
    assert "ERROR" not in res.stderr, res.stderr[-3000:]
    return res.stdout


def test_count_of_an_element_never_added_is_zero(cache: Path) -> None:
    """fntimes.stp's shape: per function, report only once @count passes a threshold,
    reading @max only then; a function's first return finds no element."""
    need_libc_dwarf()
    script = ("global times\n"
              f'probe process("{LIBC}").function("malloc").return, '
              f'process("{LIBC}").function("free").return {{\n'
              "  t = gettimeofday_ns() - @entry(gettimeofday_ns())\n"
              "  if (@count(times[ppfunc()]) >= 5 && t > @max(times[ppfunc()]) * 1000)\n"
              '    printf("slow %s\\n", ppfunc())\n'
              '  if (@sum(times["never"]) != 0) println("bad sum")\n'
              "  times[ppfunc()] <<< t\n}\n"
              'probe end { foreach (f+ in times) printf("%s %d\\n", f, @count(times[f])) }')
    out = ok(run_pydyn(cache, "-e", script, "-c", f"{LS} -l /usr/bin", timeout=120))
    counts = dict(ln.split() for ln in out.splitlines() if ln.startswith(("malloc", "free")))
    assert int(counts["malloc"]) > 100 and int(counts["free"]) > 10, out[-2000:]
    assert "bad sum" not in out
    # an element nothing was ever added to: @count and @sum 0, @avg an error
    res = run_pydyn(cache, "-w", "-e", 'global s probe begin { s[1] <<< 1; '
                    'printf("%d %d\\n", @count(s[2]), @sum(s[2])); println(@avg(s[2])) }')
    assert res.stdout == "0 0\n", res.stdout + res.stderr
    assert "ERROR: empty aggregate near identifier 'println'" in res.stderr, res.stderr
    assert res.returncode == 1


def test_defined_is_decided_per_libc(cache: Path) -> None:
    """One probe on the 64-bit libc (DWARF from libc6-dbg) and the 32-bit one (none):
    the 64-bit sites take the @defined branch and read $mem, as stap's derived probes
    do; a probe on the 32-bit libc alone takes the other branch without an error."""
    need_libc_dwarf()
    need(LIBC32)
    script = ("global named, unnamed\n"
              f'probe process("{LIBC}").function("free"), '
              f'process("{LIBC32}").function("free") {{\n'
              "  if (@defined($mem)) { if ($mem) named++ } else unnamed++\n}\n"
              'probe end { printf("named %d unnamed %d\\n", named, unnamed) }')
    out = ok(run_pydyn(cache, "-e", script, "-c", f"{LS} -R /usr/share/doc", timeout=120))
    m = re.search(r"named (\d+) unnamed (\d+)", out)
    assert m and int(m.group(1)) > 100 and m.group(2) == "0", out
    only32 = (f'global n probe process("{LIBC32}").function("free") '
              '{ if (@defined($mem)) n += $mem; else n++ } probe end { println(n) }')
    res = run_pydyn(cache, "-w", "-p4", "-e", only32, timeout=120)
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr


def test_print_ubacktrace_brief_on_python(cache: Path) -> None:
    """graphcall.stp's call: one `name+0xoff` line a frame (a bare address where the
    stripped interpreter names nothing)."""
    need(PY)
    script = (f'probe process("{PY}").function("PyList_Append") '
              '{ print_ubacktrace_brief(); println("--"); exit() }')
    out = ok(run_pydyn(cache, "-e", script, "-c", f"{PY} -c pass", timeout=120))
    frames = out.split("--\n")[0].splitlines()
    assert frames[0] == "PyList_Append+0x0", out
    assert len(frames) > 3 and all(re.fullmatch(r"(\w+\+0x[0-9a-f]+|0x[0-9a-f]+)", f)
                                   for f in frames), out
    assert "Py_BytesMain+0x" in out, out


def test_library_glob_plt_return_and_target_set(cache: Path, tmp_path: Path) -> None:
    """ltrace.stp's points on ls: `.library("*").plt` over the libraries ls loads (not
    the first file some library directory holds), `.plt("NAME").return` at the
    caller's return, and target_set_pid() for the command and what it starts."""
    need(LS)
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "c").mkdir()
    script = ("global calls, rets, libs, outside\n"
              f'probe process("{LS}").plt("opendir") {{ calls++ }}\n'
              f'probe process("{LS}").plt("opendir").return {{ if ($return) rets++ }}\n'
              f'probe process("{LS}").library("*").plt {{ libs++ }}\n'
              f'probe process("{LS}").library("libsel*").function("is_selinux_enabled") '
              "{ if (!target_set_pid(pid())) outside++ }\n"
              'probe end { printf("opendir %d %d libplt %d outside %d\\n", calls, rets, '
              "libs, outside) }\n")
    out = ok(run_pydyn(cache, "-e", script, "-c",
                       f"sh -c '{LS} -R {tmp_path} > /dev/null; true'", timeout=120))
    m = re.search(r"opendir (\d+) (\d+) libplt (\d+) outside (\d+)", out)
    assert m, out
    calls, rets, libplt, outside = map(int, m.groups())
    assert calls == rets == 4, out   # ls -R opens the directory, a, a/b and c
    assert libplt > 0 and outside == 0, out
    res = run_pydyn(cache, "-e", f'probe process("{LS}").library("libnothere*").'
                    'function("*") { next }', "-c", LS)
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
    assert ('library("libnothere*") matches none of the' in res.stderr
            and "hint: it loads libselinux.so.1" in res.stderr), res.stderr


def test_process_end_of_a_shell_that_calls_exit_directly(cache: Path) -> None:
    """dash leaves by _exit: no destructor runs, and yet every process of `sh -c` gets
    its process.end, and target_set_pid() holds for each."""
    need("sh", LS)
    script = ("global b, e, inset\n"
              "probe process.begin { b[pid()] = execname(); "
              "if (target_set_pid(pid())) inset++ }\n"
              'probe process.end { e[pid()] = execname() }\n'
              'probe end { foreach (p in b) printf("%s %d\\n", b[p], p in e); '
              'printf("inset %d\\n", inset) }')
    out = ok(run_pydyn(cache, "-e", script, "-c",
                       f"sh -c 'sh -c \"{LS} / > /dev/null; true\"; true'", timeout=120))
    lines = [ln.split() for ln in out.splitlines() if not ln.startswith("inset")]
    names = sorted(name for name, _ in lines)   # pydyn's own sh -c for the line, maybe
    assert names[0] == "ls" and names.count("sh") in (2, 3) and len(names) <= 4, out
    assert all(ended == "1" for _, ended in lines), out
    assert f"inset {len(lines)}" in out, out
    # an exec ends the image it replaces; a PATH search's failed tries end nothing; a
    # process("PATH").end that fired is no object "no process loaded" at the exit
    script = ('probe process.begin { printf("begin %d %s\\n", pid(), execname()) } '
              'probe process.end { printf("end %d %s\\n", pid(), execname()) } '
              f'probe process("{LS}").end {{ printf("ls-end %d\\n", pid()) }}')
    res = run_pydyn(cache, "-e", script, "-c", "sh -c 'exec ls / > /dev/null'", timeout=120)
    out = ok(res)
    assert "WARNING" not in res.stderr, res.stderr
    assert len([ln for ln in out.splitlines() if ln.startswith("ls-end ")]) == 1, out
    out = "".join(ln + "\n" for ln in out.splitlines() if not ln.startswith("ls-end "))
    events = [ln.split() for ln in out.splitlines()]
    ls_pid = next(pid for _, pid, name in events if name == "ls")
    assert [(e, n) for e, pid, n in events if pid == ls_pid] == [
        ("begin", "sh"), ("end", "sh"), ("begin", "ls"), ("end", "ls")], out


def test_pp_of_a_wildcard_names_what_fired(cache: Path) -> None:
    """eventcount.stp keys its counts by pn(): a mark("*") or function("PyList_*") is
    expanded to the mark or function that fired, as stap's derived probes are named
    (pp() of a mark is the statement at its address; python3 has no DWARF, so its
    functions are named without @FILE:LINE)."""
    need(PY)
    script = ("global m, f\n"
              f'probe process("{PY}").mark("*") {{ m[pp(), pn()]++ }}\n'
              f'probe process("{PY}").function("PyList_Append*") {{ f[pp()]++ }}\n'
              'probe end { foreach ([a, b] in m) printf("%s|%s\\n", a, b); '
              'foreach (a in f) printf("%s\\n", a) }')
    out = ok(run_pydyn(cache, "-e", script, "-c", f"{PY} -c 'def g(): pass\ng()'",
                       timeout=120))
    assert any(re.fullmatch(rf'process\("{PY}"\)\.statement\(0x[0-9a-f]+\)\|'
                            rf'process\("{PY}"\)\.mark\("function__entry"\)', ln)
               for ln in out.splitlines()), out
    assert f'process("{PY}").function("PyList_Append")' in out.splitlines(), out
    assert '("*")' not in out and "Append*" not in out, out


def test_backtraces_of_a_large_program_reuse_its_unwind_table(cache: Path) -> None:
    """The unwind table of postgres (~17,000 FDEs) is decoded once per binary: a new
    script with print_ubacktrace on it reads it back from the cache."""
    postgres = str(POSTGRES / "postgres")
    need(postgres)

    def new_script(n: int) -> str:
        res = run_pydyn(cache, "-p3", "-e", f'probe process("{postgres}").'
                        f'function("pg_parse_query") {{ print_ubacktrace(); println({n}) }}',
                        timeout=300)
        assert res.returncode == 0, res.stderr
        assert "pd_cfa_0[] = {{0x" in res.stdout, res.stdout[:2000]
        return res.stdout

    new_script(1)
    key = binary_key(postgres, f"unwind table {UNWIND_FORMAT}")
    stored = [cache / "objfacts" / f"{key}.facts"]
    assert stored[0].exists(), os.listdir(cache / "objfacts")
    # the stored table, its first name changed: the next script must print that name
    header, arrays = decode(stored[0].read_bytes())
    header.pop("arrays")
    first = header["names"][0]
    header["names"][0] = "pydyn_from_the_store"
    stored[0].write_bytes(encode(header, arrays))
    out = new_script(2)
    assert '"pydyn_from_the_store"' in out and f'"{first}"' not in out, out[:2000]


WHYTHEFAIL = """global specs, counts
probe process("LIBC").function("opendir").call { specs[tid()] = speculation(); counts["entry"]++ }
probe process("LIBC").statement("opendir@*:*") {
  file = tokenize(pp(), "@"); file = tokenize("", "@")
  speculate(specs[tid()], sprintf("%s %s\\n", ppfunc(), tokenize(file, "\\"")))
}
probe process("LIBC").function("opendir").return {
  if ($return == 0) { printf("failed %s\\n", $return$); commit(specs[tid()]); counts["hit"]++ }
  else { discard(specs[tid()]); counts["miss"]++ }
}
probe end { foreach (k+ in counts) printf("%s %d\\n", k, counts[k]) }
"""
LISTDIRS = ("import os\ntry: os.listdir('/etc/hostname')\nexcept OSError: pass\n"
            "os.listdir('/')\n")


def test_speculation_over_every_line_of_a_libc_function(cache: Path, tmp_path: Path) -> None:
    """whythefail.stp's shape: every line of opendir (`"opendir@*:*"`, pp() naming each
    FILE:LINE), its trace kept with speculate() and printed by commit() only for the
    call that failed (`$return$`), discarded for the others; the tapset's own globals
    are no part of the exit report."""
    need_libc_dwarf()
    need(PY)
    (tmp_path / "w.py").write_text(LISTDIRS)
    out = ok(run_pydyn(cache, "-e", WHYTHEFAIL.replace("LIBC", LIBC), "-c",
                       f"{PY} {tmp_path}/w.py", timeout=180))
    lines = out.splitlines()
    assert lines.count("failed 0") == 1, out     # the interpreter's own opendirs succeed
    trace = lines[lines.index("failed 0") + 1:]
    trace = trace[:next(i for i, t in enumerate(trace) if t.startswith("entry "))]
    assert len(trace) >= 3 and all(re.fullmatch(r"opendir \S*opendir\.c:\d+", t)
                                   for t in trace), out
    counts = dict(ln.split() for ln in lines[-3:])
    assert counts["hit"] == "1" and int(counts["miss"]) >= 1, out
    assert int(counts["entry"]) == int(counts["miss"]) + 1, out
    assert "__spec" not in out, out
