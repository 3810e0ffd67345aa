"""SystemTap tapset functions on a real process, -m64 and -m32 (tests/progs/stap_tapset3.c):
returnval(), returnstr(), return_str(), raise(), system(), each as stap's tapset
documents it."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cbuild  # noqa: E402

PROG = Path(__file__).resolve().parent / "progs" / "stap_tapset3.c"


target = cbuild.abi_program_fixture(PROG, "tapset3")


def run(cache: Path, *args: str) -> tuple[int, str, str]:
    r = cbuild.run_pydyn(cache, *args)
    assert "Traceback" not in r.stderr, r.stderr
    return r.returncode, r.stdout, r.stderr


def is_m32(target: Path) -> bool:
    return target.name.endswith("m32")


def test_returnval_returnstr_return_str(cache: Path, target: Path) -> None:
    # at a return, returnval() is the return register as the process's long; returnstr
    # names a negated errno value, else prints it in decimal, hex or octal at that width
    script = f'''probe process("{target}").function("result").return {{
  printf("%d|%s|%s|%s|%s|%s\\n", returnval(), returnstr(1), returnstr(2), returnstr(3),
         return_str(2, $return), return_str(3, returnval()))
}}'''
    rc, out, err = run(cache, "-e", script, "-c", f"{target} -2 255 -5000")
    assert rc == 0, err
    neg = "0xffffec78|037777766170" if is_m32(target) else \
        "0xffffffffffffec78|01777777777777777766170"
    assert out.splitlines() == [
        "-2|-2 (ENOENT)|-2 (ENOENT)|-2 (ENOENT)|-2 (ENOENT)|-2 (ENOENT)",
        "255|255|0xff|0377|0xff|0377",
        f"-5000|-5000|{neg}|0xffffffffffffec78|01777777777777777766170",
    ]


def test_returnval_without_registers_is_an_error(cache: Path) -> None:
    # a begin probe runs in the launcher: no registers; returnstr() says N/A there
    rc, out, err = run(cache, "-e",
                       'probe begin { println(returnstr(1)); println(returnval()) }')
    assert rc == 1
    assert out.splitlines() == ["N/A"]
    assert "returnval() not defined in this context begin" in err


def test_raise_signals_the_probed_thread_after_the_handler(cache: Path, target: Path) -> None:
    # the target's own SIGUSR1 handler runs once per raise(), after the probe's handler
    # (which still prints); guru C can name the signal, as in stap
    script = f'''probe process("{target}").mark("text") {{
  raise(%{{ SIGUSR1 %}}); println("raised"); raise(10)
}}
probe process("{target}").mark("done") {{ printf("caught=%d\\n", $arg2) }}'''
    rc, out, err = run(cache, "-g", "-e", script, "-c", f"{target} 1")
    assert rc == 0, err
    assert out.splitlines() == ["raised", "caught=1"]
    # a signal number out of range is the handler's error, as send_sig's -EINVAL
    rc, out, err = run(cache, "-g", "-e", script.replace("raise(10)", "raise(0)"),
                       "-c", f"{target} 1")
    assert rc == 1 and "raise/send_sig error -22" in err


def test_raise_needs_guru_mode_and_spares_the_launcher(cache: Path) -> None:
    rc, out, err = run(cache, "-e", "probe begin { raise(12) }")
    assert rc == 1 and "raise() sends a signal to the probed thread: only in guru mode" in err
    # in a begin probe the thread is pydyn's: SIGUSR2 (staprun's -S signal) is ignored
    rc, out, err = run(cache, "-g", "-e", 'probe begin { raise(%{ SIGUSR2 %}); '
                       'println("begin") } probe timer.ms(100) { exit() } '
                       'probe end { println("end") }')
    assert rc == 0, err
    assert out.splitlines() == ["begin", "end"]


def test_system_runs_after_the_handler(cache: Path, target: Path) -> None:
    # the command runs in the background once the handler's output is out; a failing
    # command is its own business (its stderr passes through)
    script = f'''probe process("{target}").mark("done") {{
  system(sprintf("echo sum=%d pid=%d", $arg1, pid()))
  printf("handler %d\\n", pid())
  system("exit 3")
}}
probe end {{ system("echo at-end") }}'''
    rc, out, err = run(cache, "-e", script, "-c", f"{target} 4 5")
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("handler ")
    assert sorted(lines[1:]) == ["at-end", f"sum=9 pid={lines[0].split()[1]}"]


def test_options_and_script_arguments_intermix(cache: Path, tmp_path: Path) -> None:
    # stap's getopt permutes: options may follow the script and its arguments
    script = tmp_path / "args.stp"
    script.write_text('probe begin { printf("%s %s %s\\n", @1, @2, '
                      '%( guru_mode == 1 %? "guru" %: "-" %)) exit() }\n')
    rc, out, err = run(cache, str(script), "one", "-g", "two", "--runtime=dyninst")
    assert rc == 0, err
    assert out.splitlines() == ["one two guru"]


def test_tapset_macros_and_a_one_bucket_linear_histogram(cache: Path, target: Path) -> None:
    # stap's library macros @prints/@printsN and @try_assign, and @hist_linear with
    # lo == hi: one bucket between the underflow and overflow rows
    script = f'''global s, a, h
probe process("{target}").function("result") {{
  s <<< $arg1; a[$arg1 % 2, "k"] <<< $arg1; h <<< $arg1
}}
probe end {{
  @prints(s); @prints2(a)
  @try_assign(v, 100 / (@count(s) - 4), -1); @try_assign(w, 100 / @count(s), -1)
  printf("v=%d w=%d\\n", v, w)
  print(@hist_linear(h, 3, 3, 1))
}}'''
    rc, out, err = run(cache, "-e", script, "-c", f"{target} 3 3 5 2")
    assert rc == 0, err
    assert out.splitlines() == [
        "@count=4 @min=2 @max=5 @sum=13 @avg=3",
        "[1,k] @count=3 @min=3 @max=5 @sum=11 @avg=3",
        "[0,k] @count=1 @min=2 @max=2 @sum=2 @avg=2",
        "v=-1 w=25",
        "value |-------------------------------------------------- count",
        "   <3 |@                                                  1",
        "    3 |@@                                                 2",
        "   >3 |@                                                  1",
        "",
    ]


def test_macro_libraries_of_a_tapset_directory(cache: Path, tmp_path: Path) -> None:
    # -I DIR: the macros of its .stpm files (after their conditionals) may be invoked,
    # a script's own @define hides one; a file that is not only macros is skipped
    # with a warning, as stap skips it
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "a.stpm").write_text(
        "%( 1 == 1 %?\n@define twice(x) %( (@x * 2) %)\n%:\n@define gone %( 0 %)\n%)\n"
        "@define three %( 3 %)\n")
    (tmp_path / "lib" / "b.stpm").write_text("@define other %( 1 %)\nprobe\n")
    lib = str(tmp_path / "lib")
    rc, out, err = run(cache, "-I", lib, "-e", "@define three %( 4 %)\n"
                       "probe begin { println(@twice(21), @three) exit() }")
    assert rc == 0, err
    assert out.splitlines() == ["424"]
    assert "unexpected token in library macro file" in err and "b.stpm skipped" in err
    for name in ("gone", "other"):
        rc, out, err = run(cache, "-I", lib, "-p1", "-e", f"probe begin {{ println(@{name}) }}")
        assert rc == 1 and f"'@{name}'" in err, err


def test_compatible_1_2_pointer_format(cache: Path, target: Path) -> None:
    # --compatible=1.2: stap's old %p, the process's unsigned long zero-padded to the
    # pointer's digits (a width W pads to W - 2, further only left-justified); newer
    # versions print %p as %#x
    script = f'''probe process("{target}").function("result") {{
  printf("%s %p|%14pX|%-14pX|%.1p\\n", "v", $arg1, $arg1, $arg1, $arg1)
  println(sprintf("%6p", $arg1))
}}'''
    rc, out, err = run(cache, "--compatible=1.2", "-e", script, "-c", f"{target} 255 -2")
    assert rc == 0, err
    if is_m32(target):
        assert out.splitlines() == [
            "v 0x000000ff|    0x000000ffX|0x0000000000ffX|0x000000ff", "0x00ff",
            "v 0xfffffffe|    0xfffffffeX|0x0000fffffffeX|0xfffffffe", "0xfffffffe"]
    else:
        assert out.splitlines() == [
            "v 0x00000000000000ff|0x0000000000ffX|0x0000000000ffX|0x00000000000000ff",
            "0x00ff",
            "v 0xfffffffffffffffe|0xfffffffffffffffeX|0xfffffffffffffffeX|0xfffffffffffffffe",
            "0xfffffffffffffffe"]
    rc, out, err = run(cache, "-e", script, "-c", f"{target} 255")
    assert rc == 0, err
    assert out.splitlines()[0] == "v 0xff|          0xffX|0xff          X|0xff"


def test_concatenated_string_literals_fold(cache: Path) -> None:
    # "foo" . "bar" is the literal "foobar", as stap folds it: the same C, the same module
    script = 'probe oneshot { println($1, "x" . "y" . "z") }'
    one = cbuild.run_pydyn(cache, "-p3", "-e", script, '"foobar"')
    two = cbuild.run_pydyn(cache, "-p3", "-e", script, '"foo" . "bar"')
    assert one.returncode == two.returncode == 0, one.stderr + two.stderr
    assert one.stdout == two.stdout and '"xyz"' in one.stdout


def test_embedded_string_pragma_and_pure_zero_fold(cache: Path, target: Path) -> None:
    # guru C marked /* string */ is a string; 0 * a /* pure */ one folds to 0 before
    # any C is written, so its text never reaches the compiler
    script = f'''probe process("{target}").function("result") {{
  printf("%s %d\\n", %{{ /* string */ "emb" %}}, 0 * %{{ /* pure */ NOT C AT ALL %}} + $arg1)
}}'''
    rc, out, err = run(cache, "-g", "-e", script, "-c", f"{target} 7")
    assert rc == 0, err
    assert out.splitlines() == ["emb 7"]


def test_statement_calling_a_pure_embedded_function_is_elided(cache: Path, target: Path) -> None:
    # a statement that only calls a /* pure */ guru function is dropped, and then the
    # function (whose C would not compile) with it; one whose value is used stays;
    # -u keeps everything, as stap's
    script = f'''function bad() %{{ /* pure */
#error "not elided"
%}}
function twice:long(x:long) %{{ /* pure */ STAP_RETVALUE = STAP_ARG_x * 2; %}}
probe process("{target}").function("result") {{
  bad(); twice(1); if ($arg1 > 0) {{ bad() }}
  println(twice($arg1))
}}'''
    rc, out, err = run(cache, "-g", "-e", script, "-c", f"{target} 21")
    assert rc == 0, err
    assert out.splitlines() == ["42"]
    rc, out, err = run(cache, "-g", "-u", "-p4", "-e", script)
    assert rc == 1 and "not elided" in err


def test_a_tapset_that_does_not_parse_is_skipped_with_a_warning(cache: Path,
                                                                 tmp_path: Path) -> None:
    # as stap: a broken -I tapset file is a warning (-W: the error, -w: silent) and
    # the others still serve; tapset files may invoke library macros
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "bad.stp").write_text("probe foo = .bar {}\n")
    (lib / "good.stp").write_text("function plus_one(x) { return @one + x }\n")
    (lib / "one.stpm").write_text("@define one %( 1 %)\n")
    script = "probe begin { println(plus_one(41)) exit() }"
    rc, out, err = run(cache, "-I", str(lib), "-e", script)
    assert rc == 0, err
    assert out.splitlines() == ["42"]
    assert "bad.stp:1:13: expected a probe point but found '.': tapset" in err
    rc, out, err = run(cache, "-I", str(lib), "-W", "-e", script)
    assert rc == 1 and "bad.stp skipped" in err and out == ""
    rc, out, err = run(cache, "-I", str(lib), "-w", "-e", script)
    assert rc == 0 and "WARNING" not in err and out.splitlines() == ["42"]
