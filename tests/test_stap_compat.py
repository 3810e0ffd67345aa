"""SystemTap language features pydyn takes from stap (bench/stap_testsuite.py measures the
rest): each runs in a probe on a real process, tests/progs/stap_compat.c built for -m64
and, where a toolchain exists, -m32."""

from __future__ import annotations

import datetime
import platform
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cbuild  # noqa: E402

PROG = Path(__file__).resolve().parent / "progs" / "stap_compat.c"


target = cbuild.abi_program_fixture(PROG, "compat")


def run(cache: Path, script: str, *args: str) -> tuple[int, str, str]:
    r = cbuild.run_pydyn(cache, "-e", script, *args)
    assert "Traceback" not in r.stderr, r.stderr
    return r.returncode, r.stdout, r.stderr


def test_alias_prologue_and_epilogue(cache: Path, target: Path) -> None:
    # `=` runs the alias's block before the user's, `+=` after it; one body: shared locals
    script = f'''global seen, after
probe tick = process("{target}").mark("tick") {{ twice = $arg1 * 2 }}
probe tick {{ seen += twice }}
probe word += process("{target}").mark("word") {{ after += mine }}
probe word {{ mine = $arg2 }}
probe end {{ printf("seen=%d after=%d\\n", seen, after) }}'''
    rc, out, err = run(cache, script, "-c", f"{target} 10 ab cde")
    assert rc == 0, err
    assert out.splitlines()[-1] == "seen=90 after=5"


def test_alias_suffix_and_several_definitions(cache: Path, target: Path) -> None:
    # `probe p.mark("tick")` on the alias `p` carries the suffix to its target; two `+=`
    # definitions of one name each give a probe, both running the user's block
    script = f'''global a, b, c, d
probe p = process("{target}") {{ }}
probe p.mark("done") {{ a += $arg1 }}
probe both += p.mark("tick") {{ b++ }}
probe both += p.mark("word") {{ c++ }}
probe both {{ d++ }}
probe end {{ printf("%d %d %d %d\\n", a, b, c, d) }}'''
    rc, out, err = run(cache, script, "-c", f"{target} 4 x y z")
    assert rc == 0, err
    assert out.splitlines()[-1] == "4 4 3 7"


def test_oneshot_runs_once_then_exits(cache: Path, target: Path) -> None:
    # oneshot is begin then exit(): the handler runs once, the session ends, end runs
    script = f'''global n
probe oneshot {{ printf("once %d\\n", n); n = 7 }}
probe process("{target}").mark("tick") {{ n++ }}
probe end {{ printf("end n=%d\\n", n) }}'''
    rc, out, err = run(cache, script, "-c", f"{target} 3")
    assert rc == 0, err
    assert out.splitlines()[0] == "once 0"
    assert out.splitlines()[-1].startswith("end n=")


def test_alias_cycle_is_an_error(cache: Path) -> None:
    rc, out, err = run(cache, "probe a = b { } probe b = a { } probe a { }")
    assert rc == 1
    assert "expands more than" in err and "error:" in err


def test_tapset_dir_functions_globals_aliases(cache: Path, target: Path, tmp_path: Path) -> None:
    # -I DIR: what the script uses of DIR's .stp files is taken (a function reaching
    # another function and a global, a probe alias on the target); the rest is not,
    # so an unused function that could not be typed does no harm
    lib = tmp_path / "tapsets"
    (lib / "sub").mkdir(parents=True)
    (lib / "a.stp").write_text("global scale = 3\n"
                               "function scaled(x) { return x * scale + one() }\n"
                               "function untyped(y) { return y }\n")
    (lib / "sub" / "b.stp").write_text(
        f'function one() {{ return 1 }}\nprobe ticks = process("{target}").mark("tick") {{ }}\n')
    script = "global t\nprobe ticks { t += scaled($arg1) }\nprobe end { printf(\"t=%d\\n\", t) }"
    rc, out, err = run(cache, script, "-I", str(lib), "-c", f"{target} 4")
    assert rc == 0, err
    assert out.splitlines()[-1] == "t=22"      # (0+1+2+3)*3 + 4
    # a file that does not parse is skipped with a warning naming it, as stap skips it
    (lib / "bad.stp").write_text("function broken( {")
    rc, out, err = run(cache, script, "-I", str(lib), "-c", f"{target} 4")
    assert rc == 0 and "bad.stp:1:" in err and "skipped" in err
    assert out.splitlines()[-1] == "t=22"


def test_set_global_on_the_command_line(cache: Path, target: Path) -> None:
    script = f'''global step = 1, label = "none"
probe process("{target}").mark("tick") {{ n += step }}
global n
probe end {{ printf("%s %d\\n", label, n) }}'''
    rc, out, err = run(cache, script, "-G", "step=10", "-G", "label=ten", "-c", f"{target} 3")
    assert rc == 0, err
    assert out.splitlines()[-1] == "ten 30"
    rc, out, err = run(cache, script, "-G", "nosuch=1")
    assert rc == 1 and "no global 'nosuch'" in err


def test_stap_command_line_options(cache: Path, target: Path) -> None:
    # what stap runs with under its testsuite: accepted, or refused as stap refuses
    script = f'probe process("{target}").mark("done") {{ printf("done %d\\n", $arg1) }}'
    rc, out, err = run(cache, script, "--runtime=dyninst", "-u", "-w", "-b", "-m", "mod_1",
                       "-D", "SOME_MACRO", "-D", "OTHER=2", "--compatible=4.0",
                       "-c", f"{target} 2")
    assert rc == 0, err
    assert out.splitlines()[-1] == "done 2"
    for bad, message in ((["-m", "x^y"], "a module name"),
                         (["-e", "probe end { }"], "-e given more than once"),
                         (["-c", str(target), "-x", "1"], "exclude each other"),
                         (["-s", "0"], "power of two"),
                         (["--runtime=kernel"], "invalid choice")):
        rc, out, err = run(cache, "probe begin { }", "-p1", *bad)
        assert rc != 0 and message in err, (bad, err)


def test_suppress_handler_errors_keeps_the_session(cache: Path, target: Path) -> None:
    # without the option the first error ends the session; with it every tick runs
    script = f'''global n, hits
probe process("{target}").mark("tick") {{ hits++; if ($arg1 % 2) n = 1 / 0 }}
probe end {{ printf("hits=%d n=%d\\n", hits, n) }}'''
    rc, out, err = run(cache, script, "--suppress-handler-errors", "-c", f"{target} 6")
    assert out.splitlines()[-1] == "hits=6 n=0"
    assert "Number of errors: 3" in err


def test_warnings_as_errors_and_suppressed(cache: Path, target: Path) -> None:
    script = (f'global unused\nprobe process("{target}").mark("done") '
              '{ x = 1; println("done") }')
    rc, out, err = run(cache, script, "-p2")
    assert rc == 0 and "WARNING" in err
    rc, out, err = run(cache, script, "-p2", "-w")
    assert rc == 0 and "WARNING" not in err
    rc, out, err = run(cache, script, "-p2", "-W")
    assert rc == 1 and "-W makes warnings errors" in err
    rc, out, err = run(cache, script, "-p2", "-w", "-W")   # -w: no warning to make an error
    assert rc == 0 and "WARNING" not in err, err


def test_pass2_checks_types(cache: Path, target: Path) -> None:
    script = f'probe process("{target}").mark("tick") {{ x = "s"; x = $arg1; println(x) }}'
    rc, out, err = run(cache, script, "-p2")
    assert rc == 1 and "type mismatch" in err


def test_printd_needs_two_values(cache: Path) -> None:
    rc, out, err = run(cache, 'probe begin { printd(",", 1) }', "-p1")
    assert rc == 1 and "at least two values" in err


def _stap_welford(values: list[int], shift: int = 0) -> tuple[int, int]:
    """(running avg_s, variance_s) as stap's __stp_stat_add keeps them (32-bit delta,
    C division truncating toward zero)."""
    def cdiv(a: int, b: int) -> int:
        q = abs(a) // abs(b)
        return q if (a >= 0) == (b >= 0) else -q
    avg_s, m2, var_s = values[0] << shift, 0, 0
    for count, v in enumerate(values[1:], start=2):
        delta = ((v << shift) - avg_s + 2**31) % 2**32 - 2**31
        avg_s += cdiv(delta, count)
        m2 += delta * ((v << shift) - avg_s)
        var_s = cdiv(m2, count - 1)
    return avg_s, var_s


def test_variance_in_stap_integer_arithmetic(cache: Path, target: Path) -> None:
    # a statistic alone: total variance around the exact average (_stp_stat_get), with a
    # bit shift; an array entry: the running variance as stap's pmap copy gives it
    values = [i * i % 37 for i in range(25)]
    script = f'''global s, t, k
probe process("{target}").mark("tick") {{
  v = $arg1 * $arg1 % 37; s <<< v; t <<< v; k[$arg1 % 2] <<< v }}
probe end {{ printf("%d %d %d %d\\n", @variance(s), @variance(t, 5), @variance(k[0]),
                    @variance(k[1])) }}'''
    rc, out, err = run(cache, script, "-c", f"{target} 25")
    assert rc == 0, err

    def whole(shift: int) -> int:
        avg_s, var_s = _stap_welford(values, shift)
        n = len(values)
        exact = (sum(values) << shift) // n
        return ((n * (avg_s - exact) ** 2 + (n - 1) * var_s) // (n - 1)) >> (2 * shift)
    want = [whole(0), whole(5), _stap_welford(values[0::2])[1], _stap_welford(values[1::2])[1]]
    assert out.splitlines()[-1] == " ".join(map(str, want))


def test_begin_and_end_get_ten_times_the_statement_budget(cache: Path, target: Path) -> None:
    # MAXACTION_INTERRUPTIBLE (MAXACTION * 10): 3,000 statements run in begin and end,
    # the same loop in a probe on the target exceeds MAXACTION (1,000)
    loop = "for (i = 0; i < 1500; i++) n++"
    script = f'''probe begin {{ {loop}; printf("begin %d\\n", n) }}
probe process("{target}").mark("done") {{ {loop}; printf("mark %d\\n", n) }}
probe end {{ {loop}; printf("end %d\\n", n) }}'''
    # (the mark's error within MAXERRORS: the session is not in stap's error state,
    # its end probe runs)
    rc, out, err = run(cache, script, "-D", "MAXERRORS=1", "-c", f"{target} 1")
    assert "MAXACTION exceeded" in err
    assert [ln for ln in out.splitlines() if ln[:1] in "bme"][-2:] == ["begin 1500", "end 1500"]
    rc, out, err = run(cache, script, "-D", "MAXACTION_INTERRUPTIBLE=2000", "-c", f"{target} 1")
    assert "MAXACTION exceeded" in err and "begin 1500" not in out


def test_tapset_functions_in_a_probe(cache: Path, target: Path) -> None:
    # runtime/pd_tapset.c and launcher/script/tapset.py, each called in a probe on the
    # target with the mark's values
    script = f'''probe process("{target}").mark("word") {{
  s = user_string($arg1)
  printf("%d %d %d|%s|%s|%s|%s|%s\\n", stringat(s, 1), strpos(s, "c"), strtol(" 1", 10),
         ctime($arg2 * 100000000), errno_str($arg2), errno_str(-$arg2), string_quoted(s),
         text_strn(s, 0, 0))
  print_char(stringat(s, 0)); print_char(10)
  printf("%x %x %x %x %d %d\\n", ntohs($arg2), ntohl($arg2), ntohll($arg2), big_endian2($arg2),
         little_endian2($arg2 + 0x10000), arch_bytes())
  r = randint($arg2); printf("rand ok %d\\n", r >= 0 && r < $arg2)
  printf("[%s]\\n", sprintd(",", $arg2, s))
}}'''
    rc, out, err = run(cache, script, "-c", f"{target} 0 abc")
    assert rc == 0, err
    when = datetime.datetime.fromtimestamp(300000000, datetime.UTC)
    assert out.splitlines()[-5:] == [
        f'98 2 0|{when:%a %b %e %H:%M:%S %Y}|ESRCH|ESRCH|"abc"|abc', "a",
        "300 3000000 300000000000000 300 3 8", "rand ok 1", "[3,abc]"]
    rc, out, err = run(cache, f'probe process("{target}").mark("word") {{ '
                              'println(stringat(user_string($arg1), 9)) }', "-c", f"{target} 0 ab")
    assert rc == 1 and "Position out of bounds" in err


def test_argv_and_indent_from_the_tapset(cache: Path, target: Path) -> None:
    script = f'''probe process("{target}").mark("tick") {{
  printf("%s%d %s/%s\\n", indent($arg1 ? -1 : 1), argc, argv[1], argv[2])
}}'''
    rc, out, err = run(cache, script, "one", "-G", "argv_2=two", "-c", f"{target} 2")
    assert rc == 0, err
    lines = out.splitlines()[-2:]
    assert [ln.split(":", 1)[1] for ln in lines] == ["1 one/two", "1 one/two"]
    assert all(ln.split(":")[0].strip().isdigit() for ln in lines)


@pytest.mark.parametrize("script, message", [
    ("probe end { break }", "'break' outside a loop"),
    ("function f() { continue } probe begin { while (1) f() }", "'continue' outside a loop"),
    ("probe a.* = begin { }", "an alias name cannot have wildcards"),
    ("probe begin { println(" + ", ".join(str(i) for i in range(33)) + ") }",
     "at most 32 values"),
    ("probe timer.hz(100).randomize(5) { }", "cannot be randomized"),
    ("global a probe begin { a[1] = 1; foreach (k in a @sum +) println(k) }",
     "sorts an array of statistics"),
    ("global a probe begin { a[1] = 1; foreach (k in a) a[k]++ }",
     "variable 'a' modified during 'foreach' iteration"),
    ("global a function f() { a[2] = 1 } function g() { f() }\n"
     "probe begin { a[1] = 1; foreach (k in a) g() }",
     "variable 'a' modified during 'foreach' iteration"),
])
def test_semantic_errors_stap_reports(cache: Path, script: str, message: str) -> None:
    rc, out, err = run(cache, script, "-p2")
    assert rc == 1 and message in err and "error:" in err, err


def test_arrays_of_more_than_nine_indexes_translate_and_do_not_build(cache: Path,
                                                                      target: Path) -> None:
    # as stap, whose maps are C templates of at most 9 keys: -p3 translates the script,
    # the build refuses it (stap's gcc does), naming the array; nine keys run
    wide = "a[1,2,3,4,5,6,7,8,9,10]"
    script = f'global a probe process("{target}").mark("done") {{ {wide} = 1 }}'
    rc, out, err = run(cache, script, "-p3")
    assert rc == 0 and "pd_mapdesc md_a" in out, err
    for args in (("-p4",), ("-c", f"{target} 1")):
        rc, out, err = run(cache, script, *args)
        assert rc == 1 and "error: array 'a' has 10 indexes: a map holds at most 9" in err, err
    script = (f'global a probe process("{target}").mark("done") '
              '{ a[1,2,3,4,5,6,7,8,$arg1] = 1 } probe end { foreach ([k1, k2, k3, k4, k5, k6, '
              'k7, k8, k] in a) println(k) }')
    rc, out, err = run(cache, script, "-c", f"{target} 3")
    assert rc == 0 and out.splitlines()[-1] == "3", err


def test_reading_and_deleting_while_iterating_is_allowed(cache: Path, target: Path) -> None:
    script = f'''global a, n
probe process("{target}").mark("tick") {{ a[$arg1] = $arg1 }}
probe end {{ foreach (k in a) {{ n += a[k]; delete a[k] }} printf("%d %d\\n", n, [1] in a) }}'''
    rc, out, err = run(cache, script, "-c", f"{target} 4")
    assert rc == 0, err
    assert out.splitlines()[-1] == "6 0"


def test_user_string_with_a_default(cache: Path, target: Path) -> None:
    # user_string(addr, default) and user_string_n(addr, n, default): the default for
    # an address that cannot be read, instead of an error
    script = f'''probe process("{target}").mark("word") {{
  printf("%s|%s|%s|%s\\n", user_string($arg1, "bad"), user_string(8, "bad"),
         user_string_n($arg1, 2, "bad"), user_string_n(8, 2, "worse"))
}}'''
    rc, out, err = run(cache, script, "-c", f"{target} 0 hello")
    assert rc == 0, err
    assert out.splitlines()[-1] == "hello|bad|he|worse"


def test_const_operator(cache: Path, target: Path) -> None:
    # @const("C expression") in guru mode, compiled in the probed process's ABI;
    # --skip-badvars defines STP_SKIP_BADVARS
    script = f'''probe process("{target}").mark("done") {{
  printf("%d %d\\n", @const("sizeof(long)"), @const("STP_SKIP_BADVARS")) }}'''
    rc, out, err = run(cache, script, "-g", "--skip-badvars", "-c", f"{target} 1")
    assert rc == 0, err
    assert out.splitlines()[-1] == ("4 1" if target.name.endswith("m32") else "8 1")
    rc, out, err = run(cache, script, "-p1")
    assert rc == 1 and "@const is only allowed in guru mode" in err


def test_foreach_over_histogram_buckets(cache: Path, target: Path) -> None:
    # foreach (count = bucket in @hist_log(s)) and @hist_linear(s, ...)[bucket], with
    # stap's bucket numbers (log: 64 holds 0; linear: 0 is the underflow)
    script = f'''global s, k
probe process("{target}").mark("tick") {{ s <<< $arg1; k[$arg1 % 2] <<< $arg1 * 10 }}
probe end {{
  foreach (n = b in @hist_log(s)) if (n) printf("log %d:%d\\n", b, n)
  foreach (b in @hist_linear(k[1], 0, 100, 20) limit 4)
    printf("lin %d:%d\\n", b, @hist_linear(k[1], 0, 100, 20)[b])
  printf("out of range %d\\n", @hist_log(s)[500])
}}'''
    rc, out, err = run(cache, script, "-c", f"{target} 6")
    assert rc == 0, err
    # ticks 0..5: 0 -> 64, 1 -> 65, 2..3 -> 66, 4..5 -> 67; k[1] holds 10, 30, 50
    assert out.splitlines()[-9:] == ["log 64:1", "log 65:1", "log 66:2", "log 67:2",
                                     "lin 0:0", "lin 1:1", "lin 2:1", "lin 3:1",
                                     "out of range 0"]


def test_regex_match_in_a_probe(cache: Path, target: Path) -> None:
    # =~ / !~ compiled to DFA tables at translate time, matched against the target's
    # strings in the probe
    script = f'''probe process("{target}").mark("word") {{
  s = user_string($arg1)
  printf("%s %d %d %d %d\\n", s, s =~ "^[a-z]+[0-9]{{2,3}}$", s !~ "x", s =~ "(ab|cd)+e",
         s =~ "[[:upper:]]")
}}'''
    rc, out, err = run(cache, script, "-c", f"{target} 0 abc12 ab1234 cdabe Xyz")
    assert rc == 0, err
    assert out.splitlines()[-4:] == ["abc12 1 1 0 0", "ab1234 0 1 0 0", "cdabe 0 1 1 0",
                                     "Xyz 0 1 0 1"]
    rc, out, err = run(cache, 'probe begin { println("a" =~ "a{2") }', "-p2")
    assert rc == 1 and "bad regular expression" in err


@pytest.mark.parametrize("pattern", [
    "abc", "^abc$", "a(b|cd)*e", "[^0-9]+$", "^(a|b){2,3}c?$", "x+y*z?", "[[:digit:]]{3}",
    "(^a|b$)", "a.c", "[a\\-z]", "^$", "(ab){0,2}c",
])
def test_regex_dfa_matches_like_python(pattern: str) -> None:
    from pydyn.launcher.translate.regex import compile_regex
    dfa = compile_regex(pattern.encode())
    for text in ["", "abc", "xabcx", "ae", "abcdbe", "aab", "abac", "ac", "a-z", "12",
                 "x", "yz", "xyz", "123", "ababc", "abababc", "b", "ba", "a.c", "aXc"]:
        py_pattern = pattern.replace("[[:digit:]]", "[0-9]")
        assert dfa.search(text.encode()) == bool(re.search(py_pattern, text)), (pattern, text)


def test_unused_functions_are_elided_unless_u(cache: Path, target: Path) -> None:
    # a function no probe calls is dropped before typing (its parameter needs no type),
    # one reached through another is kept; -u keeps every function, as stap's -u
    script = f'''function unused(x) {{ return x }}
function helper(y) {{ return y + 1 }}
function used() {{ return helper(41) }}
probe process("{target}").mark("done") {{ printf("%d\\n", used()) }}'''
    rc, out, err = run(cache, script, "-c", f"{target} 1")
    assert rc == 0, err
    assert out.splitlines()[-1] == "42"
    rc, out, err = run(cache, script, "-u", "-p2")
    assert rc == 1 and "unresolved type for parameter 'x'" in err


def test_errno_p_isdigit_uarch_bytes_indent_depth(cache: Path, target: Path) -> None:
    script = f'''probe process("{target}").mark("word") {{
  s = user_string($arg1)
  printf("%d %d %d %d %d ", errno_p(-$arg2), errno_p(0), isdigit(s), uarch_bytes(),
         thread_indent_depth(1))
  printf("%d\\n", thread_indent_depth(-1))
}}'''
    rc, out, err = run(cache, script, "-c", f"{target} 0 7up")
    assert rc == 0, err
    assert out.splitlines()[-1] == f"3 0 1 {4 if target.name.endswith('m32') else 8} 0 0"


def test_a_second_interrupt_does_not_cut_end_short(cache: Path, tmp_path: Path) -> None:
    # stap_run's way: SIGINT once the start line is out; here a second one arrives while
    # the end probe runs: the end probe still completes and the session still ends
    import os
    import signal
    import subprocess
    import time
    script = ('probe begin { println("started") } probe timer.s(60) { }\n'
              'probe end { for (i = 0; i < 20000000; i++) ; println("end done") }')
    env = dict(os.environ, PYDYN_CACHE_DIR=str(cache))
    cmd = [sys.executable, "-m", "pydyn.launcher.cli", "-D", "MAXACTION=100000000",
           "-e", script]
    subprocess.run([*cmd[:-2], "-p4", "-e", script], env=env, capture_output=True, timeout=180)
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    assert p.stdout is not None
    assert p.stdout.readline() == "started\n"
    p.send_signal(signal.SIGINT)
    time.sleep(0.05)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert "Traceback" not in err, err
    assert out.splitlines()[-1:] == ["end done"], (out, err)



@pytest.mark.parametrize("op", ["@kderef(4, p)", "@perf(\"x\")"])
def test_kernel_only_at_operators_parse_then_are_refused(cache: Path, op: str) -> None:
    # stap parses them whatever the runtime: -p1 accepts the script, -p2 names the operator
    script = f"probe begin {{ x = {op}; println(x) }}"
    rc, out, err = run(cache, script, "-g", "-p1")
    assert rc == 0, err
    rc, out, err = run(cache, script, "-g", "-p2")
    name = op.split("(")[0]
    assert rc == 1 and f"1:19: error: '{name}' is not supported" in err, err


@pytest.mark.parametrize("op, message", [
    ("@kderef(4, p)", "using @kderef operator not permitted; need stap -g"),
    ("@kregister(0)", "using @kregister operator not permitted; need stap -g"),
    ("@uderef(p, 4)", "expected a literal number (register or size)"),
    ("@perf(1)", "expected a literal string naming a perf counter"),
    ('@perf("")', "expected non-empty string"),
])
def test_kernel_only_at_operators_parse_errors(cache: Path, op: str, message: str) -> None:
    rc, out, err = run(cache, f"probe begin {{ x = {op} }}", "-p1")
    assert rc == 1 and message in err, err


def test_text_strn_bounds_the_output_and_escapes_utf8(cache: Path, target: Path) -> None:
    # the length bounds the result, quotes and a closing `"...` included; an escape
    # that would be cut is dropped whole; a UTF-8 sequence is one \uXXXX escape
    script = f'''probe process("{target}").mark("word") {{
  s = user_string($arg1)
  printf("%s|%s|%s|%s|%s\\n", text_str(s), text_strn(s, 8, 1), text_strn(s, 12, 1),
         text_strn(s, 3, 0), text_strn(s, 0, 1))
}}'''
    rc, out, err = run(cache, script, "-c", f"{target} 0 h\u00e9llo\x01x")
    assert rc == 0, err
    assert out.splitlines()[-1] == ('h\\u00E9llo\\001x|"h"...|"h\\u00E9"...|h|'
                                    '"h\\u00E9llo\\001x"')


def test_tapset_file_probes_come_with_a_function_taken(cache: Path, target: Path,
                                                      tmp_path: Path) -> None:
    # as stap takes a whole tapset file: calling one of its functions brings its begin
    # probe; a file nothing is taken from brings nothing
    lib = tmp_path / "tapsets"
    lib.mkdir()
    (lib / "used.stp").write_text('function twice(x) { return 2 * x }\n'
                                  'probe begin { println("used file") }\n')
    (lib / "unused.stp").write_text('function other() { return 0 }\n'
                                    'probe begin { println("unused file") }\n')
    script = f'probe process("{target}").mark("done") {{ println(twice($arg1)) }}'
    rc, out, err = run(cache, script, "-I", str(lib), "-c", f"{target} 4")
    assert rc == 0, err
    assert "used file" in out.splitlines() and "unused file" not in out
    assert out.splitlines()[-1] == "8"


def test_uderef_reads_the_probed_process(cache: Path, target: Path) -> None:
    # @uderef(SIZE, addr): SIZE bytes at addr, unsigned; an unreadable address is an error
    script = f'''probe process("{target}").mark("word") {{
  printf("%x %x %x %x %d\\n", @uderef(1, $arg1), @uderef(2, $arg1), @uderef(4, $arg1),
         @uderef(8, $arg1), @uderef(1, $arg1 + 8))
  try {{ println(@uderef(4, 8)) }} catch (msg) {{ println(msg) }}
}}'''
    rc, out, err = run(cache, script, "-c", f"{target} 0 ABCDEFGH\u00e9")
    assert rc == 0, err
    assert out.splitlines()[-2:] == ["41 4241 44434241 4847464544434241 195",
                                     "user memory read fault at 0x8 (4 bytes)"]
    rc, out, err = run(cache, 'probe begin { println(@uderef(3, 0)) }', "-p2")
    assert rc == 1 and "1:31: error: @uderef reads 1, 2, 4 or 8 bytes" in err, err


X86_64_DWARF_REGS = ("rax rdx rcx rbx rsi rdi rbp rsp r8 r9 r10 r11 r12 r13 r14 r15 "
                     "rip").split()
I386_DWARF_REGS = "eax ecx edx ebx esp ebp esi edi eip".split()


@pytest.mark.skipif(platform.machine() != "x86_64", reason="x86 DWARF register numbers")
def test_uregister_reads_registers_by_dwarf_number(cache: Path, target: Path) -> None:
    # @uregister(N) is the register of DWARF number N (stap's user_regset numbering, the
    # instruction pointer last), unsigned at the process's word size; past the last one,
    # where no register context is (begin), and for every @kregister: stap's register
    # access fault, which try/catch takes
    checks = []
    for n, name in enumerate(X86_64_DWARF_REGS):
        same = f"@uregister({n}) == u_register(\"{name}\")"
        if n < len(I386_DWARF_REGS):
            same = (f"@uregister({n}) == u_register(w ? \"{I386_DWARF_REGS[n]}\" "
                    f": \"{name}\")")
            checks.append(f"  ok += {same}")
        else:
            checks.append(f"  if (!w) ok += {same}")
    body = "\n".join(checks)
    script = f'''global errors
probe begin {{
  try {{ println(@uregister(0)) }} catch (msg) {{ println("begin: ", msg) errors++ }}
  try {{ println(@kregister(0)) }} catch (msg) {{ println("kernel: ", msg) errors++ }}
}}
probe process("{target}").mark("done") {{
  w = uarch_bytes() == 4
  ok = 0
{body}
  printf("regs %d pc %d\\n", ok, (w ? @uregister(8) : @uregister(16)) == uaddr())
  try {{ println(w ? @uregister(9) : @uregister(17)) }} catch (msg) {{ println("past: ", msg) }}
  try {{ println(@kregister(0)) }} catch (msg) {{ println("kernel: ", msg) errors++ }}
}}
probe end {{ printf("errors %d\\n", errors) }}'''
    rc, out, err = run(cache, script, "-g", "-c", f"{target} 1")
    assert rc == 0, err
    fault = "register access fault [man error::fault]"
    nregs = len(I386_DWARF_REGS) if target.name.endswith("m32") else len(X86_64_DWARF_REGS)
    assert out.splitlines() == [f"begin: {fault}", f"kernel: {fault}", f"regs {nregs} pc 1",
                                f"past: {fault}", f"kernel: {fault}", "errors 3"], out
    # an uncaught one is a counted error naming the operator
    rc, out, err = run(cache, "probe oneshot { println(@uregister(3)) }")
    assert rc == 1 and f"ERROR: {fault} near operator '@uregister'" in err, err


def test_embedded_c_memory_macros_of_stap(cache: Path, target: Path) -> None:
    # stap's kread/kwrite (its dyninst runtime's: the probed process's memory), uread,
    # and DEREF_FAULT/CATCH_DEREF_FAULT in a guru function: a fault is the call's error
    script = f'''
function peek:long (addr:long) %{{
  STAP_RETVALUE = kread((const uint8_t *)(uintptr_t)STAP_ARG_addr); CATCH_DEREF_FAULT();
%}}
function poke:long (addr:long, v:long) %{{
  kwrite((uint8_t *)(uintptr_t)STAP_ARG_addr, STAP_ARG_v); CATCH_DEREF_FAULT();
%}}
function same_pointer:long () %{{
  const void *p = &systemtap_module_init; STAP_RETVALUE = (uread(&p) == p);
%}}
function bad:long () %{{ STAP_RETVALUE = uread((uint32_t *)8); CATCH_DEREF_FAULT(); %}}
probe process("{target}").mark("word") {{
  poke($arg1, 90)
  printf("%d %s %d\\n", peek($arg1 + 1), user_string($arg1), same_pointer())
  try {{ bad() }} catch (msg) {{ println(msg) }}
  try {{ poke(8, 1) }} catch (msg) {{ println(msg) }}
}}'''
    rc, out, err = run(cache, script, "-g", "-c", f"{target} 0 abc")
    assert rc == 0, err
    assert out.splitlines()[-3:] == ["98 Zbc 1", "read fault [man error::fault] at 0x8",
                                     "user memory write fault at 0x8 (1 bytes)"], out


def test_fp_strings_are_stap_s_digits(cache: Path, target: Path) -> None:
    # string_to_fp and fp_to_string compute as stap's softfloat runtime does, one double
    # operation at a time (also in a 32-bit process): 1e18 and more print their first
    # digits and eN; fraction digits are cut, the last rounded by the next
    script = f'''probe process("{target}").mark("done") {{
  println(fp_to_string(string_to_fp("89898298323423423423987293485342893.00000001"), 10))
  println(fp_to_string(string_to_fp("9223372036854775807"), 0))
  println(fp_to_string(string_to_fp("-0.00001"), 8), " ",
          fp_to_string(string_to_fp("2.5e-3"), 4), " ",
          fp_to_string(string_to_fp("1.5E2"), 1), " ", fp_to_string(string_to_fp("0.66666"), 3))
  try {{ println(string_to_fp("1.5x")) }} catch (msg) {{ println(msg) }}
}}'''
    rc, out, err = run(cache, script, "-c", f"{target} 1")
    assert rc == 0, err
    assert out.splitlines()[-4:] == ["898982983234234624.0000000000e17", "922337203685477760e1",
                                     "-0.00001000 0.0025 150.0 0.667", "invalid format"], out


def test_shift_by_a_literal_count_of_zero_or_less_is_the_value(cache: Path, target: Path) -> None:
    # stap folds `x << -2` (a literal count of 0 or less) to x; a count computed at run
    # time is taken modulo 64
    script = f'''probe process("{target}").mark("done") {{
  n = $arg1 - 3
  printf("%d %d %d %d %d\\n", $arg1 << -2, -4096 >> -3, $arg1 << 0, $arg1 << n, 1 << (n + 64))
}}'''
    rc, out, err = run(cache, script, "-c", f"{target} 1")
    assert rc == 0, err
    assert out.splitlines()[-1] == f"1 -4096 1 {1 << 62} {1 << 62}", out


def test_w_drops_warn_output_and_suppress_time_limits_lifts_maxaction(cache: Path,
                                                                      target: Path) -> None:
    # -w: the script's warn() is not printed (stap's dyninst runtime drops it);
    # --suppress-time-limits (only with -g): no MAXACTION, as stap's
    # STAP_SUPPRESS_TIME_LIMITS_ENABLE
    script = f'''probe process("{target}").mark("done") {{
  warn("careful")
  for (i = 0; i < 5000; i++) {{ }}
  println(i)
}}'''
    rc, out, err = run(cache, script, "-c", f"{target} 1")
    assert rc == 1 and "WARNING: careful" in err and "MAXACTION exceeded" in err, err
    rc, out, err = run(cache, script, "-w", "-g", "--suppress-time-limits", "-c", f"{target} 1")
    assert rc == 0 and out.splitlines()[-1] == "5000", err
    assert "careful" not in err, err
    rc, out, err = run(cache, script, "--suppress-time-limits", "-p1")
    assert rc == 1 and "--suppress-time-limits requires guru mode (-g)" in err, err


def test_parameter_typed_by_its_body_in_an_uncalled_function(cache: Path, target: Path) -> None:
    # -u keeps a function nobody calls: its parameter's type comes from its body
    script = f'''function quoted(s) {{ return "<" . s . ">" }}
function scaled(n) {{ return n * 3 }}
probe process("{target}").mark("done") {{ println($arg1) }}'''
    rc, out, err = run(cache, script, "-u", "-c", f"{target} 2")
    assert rc == 0, err
    assert out.splitlines()[-1] == "2"


def test_assignments_to_unread_locals_are_elided_before_typing(cache: Path, target: Path) -> None:
    # stap drops `x = e` (and `s <<< e`) to a local nothing reads before it infers types,
    # keeping `e` for its side effects: the local takes no type, so no mismatch
    script = f'''global n
function bump() {{ n++; return n }}
probe process("{target}").mark("tick") {{
  unused = "text"; unused = bump(); stat <<< $arg1
  deleted = 1; delete deleted     # the delete keeps the assignment that types it
}}
probe end {{ println(n) }}'''
    rc, out, err = run(cache, script, "-c", f"{target} 3")
    assert rc == 0, err
    assert out.splitlines()[-1] == "3"
    assert "Eliding assignment to 'unused'" in err and "Eliding assignment to 'stat'" in err
    rc, out, err = run(cache, script, "-u", "-p2")    # -u: nothing elided
    assert rc == 1 and "'stat' is not a global statistic" in err, err
