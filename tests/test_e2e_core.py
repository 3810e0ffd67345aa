"""End-to-end tests of the core pipeline on real processes: `pydyn SCRIPT -c CMD`.

Argument fetching is checked without hand-kept expectations: the C programs
(tests/progs/e2e_*.c) print the value of every mark argument themselves
(`expect TAG NAME V1 V2 ...`, TAG naming the build), the scripts print what
pydyn fetched (`got TAG NAME V1 V2 ...`), and the tests compare the two.  Every
pydyn run is a subprocess with a per-session module cache; builds share runs
(and scripts share modules) wherever a test allows, to keep the file fast.
"""

from __future__ import annotations

import re
import stat
import struct
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cbuild import PROGS, build_c, have_m32, run_pydyn, start_pydyn

from pydyn.launcher.elf.argspec import ArgKind
from pydyn.launcher.elf.stapsdt import ProbeSite, SiteScan, get_probe_sites

REPO = Path(__file__).resolve().parent.parent
TIMEOUT = 60

Run = Callable[..., subprocess.CompletedProcess[str]]


def lines_with(text: str, prefix: str) -> list[list[str]]:
    return sorted(line.split()[1:] for line in text.splitlines() if line.startswith(prefix))


def assert_clean_failure(res: subprocess.CompletedProcess[str]) -> None:
    assert res.returncode == 1, res
    assert "Traceback" not in res.stderr, res.stderr
    assert res.stdout == "", res.stdout


# --- 1. argument fetching, -m64/-m32 x -O0/-O2 -------------------------------------------

@dataclass(frozen=True)
class Flavour:
    id: str
    m32: bool
    opt: str
    flags: tuple[str, ...] = ()


FLAVOURS = [
    Flavour("m64-O0", False, "-O0"),
    Flavour("m64-O2", False, "-O2"),
    Flavour("m32-O0", True, "-O0"),
    Flavour("m32-O2", True, "-O2"),
    # Absolute operands: sym(,%reg,4) and, on i386, bare symbols instead of @GOTOFF.
    Flavour("m64-O2-nopie", False, "-O2", ("-fno-pie", "-no-pie")),
    Flavour("m32-O2-nopie", True, "-O2", ("-fno-pie", "-no-pie")),
]


def allowed_unsupported(flavour: Flavour, site: ProbeSite, i: int) -> bool:
    """The one operand a note cannot describe: an i386 64-bit value in a register pair."""
    spec = site.args[i]
    return flavour.m32 and spec.size == 8 and "4-byte register" in spec.error


def args_probes(flavour: Flavour, scan: SiteScan) -> str:
    """One probe per mark printing `got TAG NAME $arg1 ...` (`-` for an unreadable operand)."""
    probes = []
    for site in scan.sites:
        fmt, values = [], []
        for i, spec in enumerate(site.args):
            if spec.supported:
                fmt.append("%d")
                values.append(f", $arg{i + 1}")
            else:
                assert allowed_unsupported(flavour, site, i), (site.name, str(spec))
                fmt.append("-")
        probes.append(f'probe process("{scan.info.path}").mark("{site.name}") '
                      f'{{ printf("got {flavour.id} %s {" ".join(fmt)}\\n", $$name'
                      f'{"".join(values)}) }}')
    return "\n".join(probes) + "\n"


@dataclass(frozen=True)
class ArgsSession:
    scans: dict[str, SiteScan]     # flavour id -> the built program's notes
    result: subprocess.CompletedProcess[str]


@pytest.fixture(scope="module")
def args_session(tmp_path_factory: pytest.TempPathFactory, sdt_cflags: Any,
                 cache: Path) -> ArgsSession:
    """Every flavour built, and run one after the other in one session (one module build)."""
    tmp = tmp_path_factory.mktemp("args")
    scans: dict[str, SiteScan] = {}
    for flavour in FLAVOURS:
        if flavour.m32 and not have_m32():
            continue
        out = build_c([PROGS / "e2e_args.c", PROGS / "e2e_args_mem.c"], tmp / flavour.id,
                      m32=flavour.m32, opt=flavour.opt,
                      extra=(*flavour.flags, f'-DE2E_TAG="{flavour.id}"'))
        scans[flavour.id] = get_probe_sites(str(out))
    script = tmp / "args.stp"
    script.write_text("".join(args_probes(f, scans[f.id]) for f in FLAVOURS if f.id in scans))
    command = "; ".join(scan.info.path for scan in scans.values())
    return ArgsSession(scans, run_pydyn(cache, str(script), "-c", command))


@pytest.fixture(params=FLAVOURS, ids=[f.id for f in FLAVOURS])
def flavour(request: pytest.FixtureRequest, args_session: ArgsSession) -> Flavour:
    flavour: Flavour = request.param
    if flavour.id not in args_session.scans:
        pytest.skip("no -m32 toolchain (gcc-multilib)")
    return flavour


def test_args_session_is_clean(args_session: ArgsSession) -> None:
    assert (args_session.result.returncode, args_session.result.stderr) == (0, "")


def test_mark_arguments_match_the_program(args_session: ArgsSession, flavour: Flavour) -> None:
    out = args_session.result.stdout
    expected = {line[1]: line[2:] for line in lines_with(out, f"expect {flavour.id} ")}
    got = [line[1:] for line in lines_with(out, f"got {flavour.id} ")]
    names = sorted(s.name for s in args_session.scans[flavour.id].sites)
    assert sorted(expected) == names               # every mark printed its values ...
    assert sorted(g[0] for g in got) == names      # ... and fired exactly once
    for name, *values in got:
        assert len(values) == len(expected[name]), name
        # `-`: an operand the note cannot describe (checked by args_probes).
        want = ["-" if v == "-" else w for v, w in zip(values, expected[name], strict=True)]
        assert (name, values) == (name, want)
    if not flavour.m32:
        assert all("-" not in g for g in got)


def test_operand_shapes_cover_registers_constants_memory(args_session: ArgsSession,
                                                         flavour: Flavour) -> None:
    """The marks really exercise the operand forms (guards against a compiler change)."""
    scan = args_session.scans[flavour.id]
    specs = [a for s in scan.sites for a in s.args]
    assert {ArgKind.CONST, ArgKind.MEM} <= {a.kind for a in specs}
    assert any(a.kind is ArgKind.CONST and a.text.split("@", 1)[1].startswith("$")
               for a in specs)
    mem = {s.name: s for s in scan.sites}["mem"]
    assert all(a.kind is ArgKind.MEM for a in mem.args)
    assert any(a.segment for a in mem.args)        # the __thread variable
    if flavour.opt == "-O2":
        regs = [a.text for a in specs if a.kind is ArgKind.REG]
        assert any(re.search(r"@%[re]", t) for t in regs), regs
        assert any(a.index >= 0 for a in specs)    # arr[i]: base + index * scale


# --- 2. the example ------------------------------------------------------------------

@pytest.fixture(scope="session")
def example_dir(tmp_path_factory: pytest.TempPathFactory, sdt_cflags: Any) -> Path:
    """A directory with examples/bin/counter built from examples/src/counter.c."""
    root = tmp_path_factory.mktemp("example")
    (root / "examples" / "bin").mkdir(parents=True)
    build_c(REPO / "examples" / "src" / "counter.c", root / "examples" / "bin" / "counter")
    return root


EXAMPLE_OUT = ["counter: 1000 ticks, sum 499500", "hits=1000 total=499500"]


def test_example_count_stp(cache: Path, example_dir: Path) -> None:
    res = run_pydyn(cache, str(REPO / "examples" / "count.stp"), "-c",
                    "./examples/bin/counter 1000", cwd=example_dir)
    assert (res.returncode, res.stderr) == (0, "")
    assert sorted(res.stdout.splitlines()) == EXAMPLE_OUT
    assert res.stdout.splitlines()[-1] == "hits=1000 total=499500"


def test_example_count_inline(cache: Path, example_dir: Path) -> None:
    script = (REPO / "examples" / "count.stp").read_text()
    res = run_pydyn(cache, "-e", script, "-c", "./examples/bin/counter 1000", cwd=example_dir)
    assert (res.returncode, res.stderr) == (0, "")
    assert res.stdout.splitlines().count("hits=1000 total=499500") == 1
    assert sorted(res.stdout.splitlines()) == EXAMPLE_OUT


# --- 3. printf, pid(), exit() and the programs of 7. ------------------------------------

FAULT_BODY = 'printf("before\\n"); printf("bad %d\\n", user_long_error($arg1)); printf("after\\n")'
FMT = "%s|%d %u %x|%d %u %x|%d %u %x|%%"


def mark_probe(binary: Path, mark: str, body: str) -> str:
    return f'probe process("{binary}").mark("{mark}") {{ {body} }}\n'


@dataclass(frozen=True)
class Misc:
    bins: dict[str, Path]       # "m64"/"m32" -> e2e_misc built with that tag
    script: Path                # probes for all of them: one module build for every run
    cache: Path


@pytest.fixture(scope="module")
def misc(tmp_path_factory: pytest.TempPathFactory, sdt_cflags: Any, cache: Path) -> Misc:
    tmp = tmp_path_factory.mktemp("misc")
    bins = {tag: build_c(PROGS / "e2e_misc.c", tmp / tag, m32=tag == "m32",
                         extra=(f'-DE2E_TAG="{tag}"',))
            for tag in ("m64", "m32") if tag == "m64" or have_m32()}
    text = ""
    for tag, path in bins.items():
        text += mark_probe(path, "fmt", f'printf("got {tag} fmt {FMT}\\n", user_string($arg1),'
                           ' $arg2, $arg2, $arg2, $arg3, $arg3, $arg3,'
                           f' $arg4, $arg4, $arg4); printf("got-pid {tag} %d\\n", pid())')
        text += mark_probe(path, "stop", f'printf("stopping {tag}\\n"); exit()')
        text += mark_probe(path, "after_stop", 'printf("after-stop fired\\n")')
        text += mark_probe(path, "right_after_stop", 'printf("right-after-stop fired\\n")')
        text += mark_probe(path, "fault", FAULT_BODY)
        text += mark_probe(path, "after_fault", 'printf("after-fault fired\\n")')
        text += mark_probe(path, "right_after_fault", 'printf("right-after-fault fired\\n")')
    text += 'probe end { printf("end ran\\n") }\n'
    script = tmp / "misc.stp"
    script.write_text(text)
    return Misc(bins, script, cache)


def test_printf_conversions_and_pid(cache: Path, misc: Misc) -> None:
    res = run_pydyn(cache, str(misc.script), "-c",
                    "; ".join(f"{p} fmt" for p in misc.bins.values()))
    assert (res.returncode, res.stderr) == (0, "")
    out = res.stdout.splitlines()
    for tag in misc.bins:
        (want,) = [line.split(" ", 1)[1] for line in out if line.startswith(f"expect {tag} ")]
        assert [line.split(" ", 1)[1] for line in out if line.startswith(f"got {tag} ")] == [want]
        assert "|-1 18446744073709551615 ffffffffffffffff|129 129 81|" in want
        (pid,) = lines_with(res.stdout, f"pid {tag} ")
        assert lines_with(res.stdout, f"got-pid {tag} ") == [pid]
    assert out[-1] == "end ran"


def target_alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][:1] != "Z"
    except (OSError, IndexError):
        return False


@dataclass(frozen=True)
class ExitRun:
    returncode: int
    stdout: str
    stderr: str
    target_alive_at_exit: bool      # was the -c command still running when pydyn exited?


@pytest.fixture(scope="module")
def exit_runs(cache: Path, misc: Misc, tmp_path_factory: pytest.TempPathFactory
              ) -> dict[str, ExitRun]:
    """The exit() script run on each e2e_misc build, at the same time."""
    tmp = tmp_path_factory.mktemp("exit")
    run_pydyn(cache, "-p4", str(misc.script))      # build once, not in both runs at the same time
    runs = {}
    for tag, path in misc.bins.items():
        # Files, not pipes: the target outlives pydyn and would hold a pipe open.
        with open(tmp / f"{tag}.out", "w") as out, open(tmp / f"{tag}.err", "w") as err:
            runs[tag] = start_pydyn(misc.cache, str(misc.script), "-c", f"{path} exit",
                                    stdout=out, stderr=err, start_new_session=False)
    # As each pydyn exits, look whether its target (3 s from its `stop` mark) still runs.
    alive_at_exit: dict[str, bool] = {}
    targets: list[int] = []
    deadline = time.monotonic() + TIMEOUT
    try:
        while len(alive_at_exit) < len(runs) and time.monotonic() < deadline:
            for tag, proc in runs.items():
                if tag not in alive_at_exit and proc.poll() is not None:
                    (pid,) = lines_with((tmp / f"{tag}.out").read_text(), f"pid {tag} ")
                    targets.append(int(pid[1]))
                    alive_at_exit[tag] = target_alive(targets[-1])
            time.sleep(0.01)
        while any(map(target_alive, targets)) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        for proc in runs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return {tag: ExitRun(proc.returncode, (tmp / f"{tag}.out").read_text(),
                         (tmp / f"{tag}.err").read_text(), alive_at_exit.get(tag, False))
            for tag, proc in runs.items()}


def test_exit_ends_the_session_early(exit_runs: dict[str, ExitRun]) -> None:
    """exit() ends the session at once; the -c command runs on with its probes inert."""
    for tag, run in exit_runs.items():
        assert run.returncode == 0, run.stderr
        assert "Traceback" not in run.stderr and "ERROR" not in run.stderr
        assert "SIGTERM" not in run.stderr
        assert run.target_alive_at_exit, f"{tag}: the target was stopped with the session"
        lines = run.stdout.splitlines()
        assert f"stopping {tag}" in lines and "end ran" in lines
        assert lines[-1] == "target done"                   # ran on to its end ...
        assert "after-stop fired" not in lines              # ... with its probes inert


def test_no_probe_runs_right_after_exit(exit_runs: dict[str, ExitRun]) -> None:
    for tag, run in exit_runs.items():
        assert f"stopping {tag}" in run.stdout.splitlines()
        assert "right-after-stop fired" not in run.stdout.splitlines(), tag


# --- 4. a dangling note ----------------------------------------------------------------

@pytest.fixture(scope="module")
def dangling(tmp_path_factory: pytest.TempPathFactory, sdt_cflags: Any) -> Path:
    """e2e_dangling with the `unused` note's pc outside the code (patched to 0 if needed)."""
    tmp = tmp_path_factory.mktemp("dangling")
    built = build_c(PROGS / "e2e_dangling.c", tmp / "built",
                    extra=("-ffunction-sections", "-Wl,--gc-sections"))
    scan = get_probe_sites(str(built))
    if any(s.name == "unused" for s in scan.skipped):
        return built
    (unused,) = [s for s in scan.sites if s.name == "unused"]
    raw = bytearray(built.read_bytes())
    # A 64-bit note's descriptor: pc, base, semaphore (8 bytes each), provider, name, args.
    at = raw.find(b"pydyn_e2e\0unused\0") - 24
    assert struct.unpack_from("<Q", raw, at)[0] == unused.pc
    raw[at:at + 8] = bytes(8)
    out = tmp / "e2e_dangling"
    out.write_bytes(bytes(raw))
    out.chmod(0o755)
    return out


def test_dangling_note_is_skipped_with_a_warning(cache: Path, dangling: Path) -> None:
    res = run_pydyn(cache, "-e", mark_probe(dangling, "*", 'printf("got %s %d\\n", $$name, $arg1)'),
                    "-c", str(dangling))
    assert res.returncode == 0, res.stderr
    warnings = [line for line in res.stderr.splitlines() if line]
    assert len(warnings) == 1, res.stderr
    assert "warning" in warnings[0] and "unused" in warnings[0] and "skipped" in warnings[0]
    assert str(dangling) in warnings[0]
    assert lines_with(res.stdout, "got ") == [["used", "1"], ["used", "2"], ["used", "3"]]
    assert "dangling: done" in res.stdout.splitlines()


# --- 5. bad scripts ------------------------------------------------------------------

@dataclass(frozen=True)
class BadScript:
    id: str
    text: str          # {bin}: the counter example binary (marks tick/1 arg, done/2 args)
    line: int
    col: int
    message: str
    hint: str = ""


BAD_SCRIPTS = [
    BadScript("syntax", "probe begin {\n    x = 1 +\n}\n", 3, 1, "expected an expression"),
    BadScript("unknown-probe-point", "global n\nprobe bgein { n = 1 }\n", 2, 7,
              "unknown probe point 'bgein'", "did you mean begin?"),
    BadScript("unknown-function", "probe begin {\n    nosuchfn(1)\n}\n", 2, 5,
              "unresolved function 'nosuchfn'"),
    # x is read: stap elides assignments to a local nothing reads before typing
    BadScript("type-mismatch", 'probe begin {\n    x = 1\n    x = "s"\n    println(x)\n}\n', 3, 5,
              "type mismatch"),
    BadScript("arg-out-of-range",
              'probe process("{bin}").mark("done") {{\n    printf("%d\\n", $arg5)\n}}\n', 2, 20,
              "'$arg5' is not available", ""),
    BadScript("no-such-mark", 'probe process("{bin}").mark("tik") {{ }}\n', 1, 7,
              """probe point 'process("{bin}").mark("tik")' matches no mark""",
              "did you mean tick?"),
]


def write_bad(bad: BadScript, tmp_path: Path, example_dir: Path) -> tuple[Path, str]:
    """The script written to a file, and the message expected."""
    counter = example_dir / "examples" / "bin" / "counter"
    text = bad.text.format(bin=counter) if "{bin}" in bad.text else bad.text
    path = tmp_path / f"{bad.id}.stp"
    path.write_text(text)
    return path, bad.message.replace("{bin}", str(counter))


@pytest.mark.parametrize("bad", BAD_SCRIPTS, ids=[b.id for b in BAD_SCRIPTS])
def test_bad_script_is_reported_at_its_place(cache: Path, tmp_path: Path, example_dir: Path,
                                             bad: BadScript) -> None:
    path, message = write_bad(bad, tmp_path, example_dir)
    res = run_pydyn(cache, str(path), "-c", str(example_dir / "examples" / "bin" / "counter"))
    assert_clean_failure(res)
    head, source, caret, *rest = res.stderr.splitlines()
    assert head.startswith(f"{path}:{bad.line}:{bad.col}: error: "), res.stderr
    assert message in head
    src_line = path.read_text().splitlines()[bad.line - 1]
    assert source.strip() == src_line.strip()
    # The caret sits under column `col` of the source line as printed (same indentation).
    indent = len(source) - len(source.lstrip())
    lead = len(src_line) - len(src_line.lstrip())
    assert caret.rstrip("~") == " " * (indent - lead + bad.col - 1) + "^"
    if bad.hint:
        assert rest and bad.hint in rest[0]


# --- 6. bad targets ------------------------------------------------------------------

@pytest.fixture(scope="module")
def bad_targets(tmp_path_factory: pytest.TempPathFactory, sdt_cflags: Any) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("targets")
    src = tmp / "hello.c"
    src.write_text('#include <stdio.h>\nint main(void) { puts("hi"); return 0; }\n')
    static = tmp / "static_hello"
    res = subprocess.run(["gcc", "-static", "-O2", str(src), "-o", str(static)],
                         capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(f"cannot link a static program: {res.stderr.strip()[:200]}")
    text = tmp / "not_elf"
    text.write_text("hello, I am text\n")
    text.chmod(text.stat().st_mode | stat.S_IXUSR)
    # An executable text file is a bad probe point, not a bad -c command: a shell runs
    # it with sh (tests/test_robust_session.py::test_script_as_the_command).
    return {"static": static, "text": text, "missing": tmp / "missing_program", "dir": tmp}


@pytest.mark.parametrize("which,reason", [
    ("static", "statically linked"),
    ("missing", "no such file"),
    ("dir", "is a directory"),
])
def test_bad_command_target(cache: Path, bad_targets: dict[str, Path], which: str,
                            reason: str) -> None:
    path = bad_targets[which]
    res = run_pydyn(cache, "-e", 'probe begin { printf("hi\\n") }', "-c", f"{path} arg")
    assert_clean_failure(res)
    (line,) = res.stderr.splitlines()
    assert str(path) in line and reason in line


@pytest.mark.parametrize("point,reason", [
    ('process("pydyn-e2e-missing-program")', "no such program in PATH"),
    ('process("/nonexistent/pydyn-e2e")', "no such file"),
])
def test_missing_process_in_probe_point(cache: Path, tmp_path: Path, point: str,
                                        reason: str) -> None:
    path = tmp_path / "missing.stp"
    path.write_text(f'probe begin {{ }}\nprobe {point}.mark("x") {{ }}\n')
    res = run_pydyn(cache, str(path))
    assert_clean_failure(res)
    head, source, caret, *_ = res.stderr.splitlines()
    assert head.startswith(f"{path}:2:7: error: ") and reason in head, res.stderr
    assert point.split('"')[1] in head
    assert source.strip() == path.read_text().splitlines()[1]
    assert caret.strip().rstrip("~") == "^"   # ^~~~ under the probe point


def test_text_file_in_probe_point(cache: Path, bad_targets: dict[str, Path]) -> None:
    res = run_pydyn(cache, "-e", f'probe process("{bad_targets["text"]}").mark("x") {{ }}')
    assert_clean_failure(res)
    assert res.stderr.startswith("<input>:1:7: error: ") and "not an ELF file" in res.stderr


# --- 7. errors in probes ----------------------------------------------------------------

@pytest.fixture(scope="module")
def fault_run(cache: Path, misc: Misc) -> subprocess.CompletedProcess[str]:
    """A probe reading the bad address 1, with the default MAXERRORS=0."""
    return run_pydyn(cache, str(misc.script), "-c", f"{misc.bins['m64']} fault")


def test_error_is_reported_and_counted(fault_run: subprocess.CompletedProcess[str],
                                       misc: Misc) -> None:
    res = fault_run
    assert res.returncode == 1
    assert "Traceback" not in res.stderr
    errors = [line for line in res.stderr.splitlines() if line.startswith("ERROR: ")]
    assert len(errors) == 1, res.stderr
    # stap's shape: ERROR: MESSAGE near identifier 'user_long_error' at FILE:LINE:COL (the
    # call) in probe PP.
    text = misc.script.read_text().splitlines()
    (lineno,) = [i + 1 for i, line in enumerate(text)
                 if f'"{misc.bins["m64"]}").mark("fault")' in line]
    col = text[lineno - 1].index("user_long_error(") + 1
    assert errors[0] == ("ERROR: user memory read fault at 0x1 (8 bytes) near identifier "
                         f"'user_long_error' at {misc.script}:{lineno}:{col} in probe "
                         f'process("{misc.bins["m64"]}").mark("fault")')
    assert "WARNING: Number of errors: 1, skipped probes: 0" in res.stderr.splitlines()
    out = res.stdout.splitlines()
    assert "before" in out and "after" not in out   # the handler stopped at the error ...
    assert not [line for line in out if line.startswith("bad")]  # ... its statement too
    assert "end ran" not in out   # stap's error state (MAXERRORS=0): no end probe


def test_target_runs_on_after_the_session_ends_on_error(
        fault_run: subprocess.CompletedProcess[str]) -> None:
    out = fault_run.stdout.splitlines()
    assert "after-fault fired" not in out           # MAXERRORS=0: the session ended ...
    assert out[-1] == "target done"                 # ... and the target ran on
    assert "SIGTERM" not in fault_run.stderr


def test_no_probe_runs_right_after_the_ending_error(
        fault_run: subprocess.CompletedProcess[str]) -> None:
    assert "before" in fault_run.stdout.splitlines()
    assert "right-after-fault fired" not in fault_run.stdout.splitlines()


def test_maxerrors_lets_the_session_run_on(cache: Path, misc: Misc,
                                          fault_run: subprocess.CompletedProcess[str]) -> None:
    # Same script as fault_run, whose module (built without -D) is in the session cache:
    # the -D must reach the module all the same.
    res = run_pydyn(cache, "-D", "MAXERRORS=1", str(misc.script), "-c", f"{misc.bins['m64']} fault")
    assert res.returncode == 1
    out = res.stdout.splitlines()
    assert "right-after-fault fired" in out and "after-fault fired" in out
    assert "target done" in out
    assert "WARNING: Number of errors: 1, skipped probes: 0" in res.stderr.splitlines()
    assert "SIGTERM" not in res.stderr
