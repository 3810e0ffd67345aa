"""Peer tools for pydyn's benchmarks: bpftrace, uftrace and Frida on the same binaries.

Interface (imported by bench/run.py and bench/startup.py; `bench/` is on
sys.path when those scripts run):

    usdt_count(tool, binary, mark, n)    -> Result   # probe counts hits of one USDT mark
    usdt_printf(tool, binary, mark, n)   -> Result   # probe prints $arg1 on every hit
    function_pair(tool, binary, func, n) -> Result   # entry + return probe on a function
    function_args(tool, binary, func, n, argv)    -> Result  # entry count, sum of returns
    function_latency(tool, binary, func, n, argv) -> Result  # entry-to-return time histogram
    startup(tool, binary, mark, n)       -> Result   # wall ms of one traced run (startup.py)

`tool` is "bpftrace", "uftrace" or "frida" (`TOOLS`).  `binary` follows the
contract of bench/bench.c: `BINARY N` executes the probed code N times and
prints `ns_per_hit X` (its own timing of the loop, so attach/startup is not
included).  `mark` is "provider:name" or just "name" (any provider); `func` is a
symbol name of `binary`.  The first three return the program's ns per
iteration under the tool; the cost per hit over bare is computed by the caller
from a bare run of the same binary.  A `Result` is a float with `.hits` (what
the tool counted or printed; must equal n), `.lost` (n - hits, when the tool
reported or we could count fewer) and `.note` (how it was measured).

A tool that cannot measure here raises `Unavailable(reason)`; callers print the
reason (the tool's own error text where it gave one).  Numbers are never made
up: every Result comes from one real run and carries the hits the tool saw, so a
caller prints `.lost` beside the time instead of trusting a lossy run.

Seen on this machine (Debian 12, kernel 6.x, root): bpftrace 0.17 attaches uprobes,
also in i386 binaries (it prints a harmless "failed to detach probe" at exit); Frida
17 cannot intercept the i386 site ("unable to intercept instruction"), uftrace
hangs on an i386 binary (refused up front); uftrace 0.13 `-E` SDT
events record only a handful of N hits (`.lost` says so), it has no per-hit print,
and `-P FUNC` needs a -pg, -finstrument-functions or -fpatchable-function-entry=5
build; Frida 17 needs the instruction-probe form of Interceptor.attach at a USDT
site (the listener form treats the site as a function entry and overwrites the
word at sp, corrupting the target).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

TOOLS = ("bpftrace", "uftrace", "frida")
TIMEOUT = 300


class Unavailable(Exception):
    """This tool cannot give this measurement here; str(exc) says why."""


class Result(float):
    """ns per iteration (startup: ms per run), with what the tool saw."""

    hits: int
    lost: int
    note: str

    def __new__(cls, value: float, hits: int, n: int, note: str = "") -> Result:
        r = super().__new__(cls, value)
        r.hits = hits
        r.lost = max(0, n - hits)
        r.note = note
        return r


def _split_mark(mark: str) -> tuple[str, str]:
    provider, _, name = mark.rpartition(":")
    return provider, name


def _ns_per_hit(stdout: str, what: str) -> float:
    m = re.search(r"ns_per_hit ([0-9.]+)", stdout)
    if not m:
        raise Unavailable(f"{what}: the program printed no ns_per_hit line: {stdout[-300:]!r}")
    return float(m.group(1))


def _first_error(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    errs = [ln for ln in lines if re.search(r"error|denied|not permitted|cannot|failed", ln,
                                            re.I)]
    return (errs or lines or ["no output"])[0][:300]


def _run(cmd: list[str], what: str, **kw: object) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT,
                              **kw)  # type: ignore[call-overload]
    except subprocess.TimeoutExpired as exc:
        raise Unavailable(f"{what}: no result within {TIMEOUT} s") from exc
    except OSError as exc:
        raise Unavailable(f"{what}: cannot start {cmd[0]}: {exc.strerror}") from exc


def _need(program: str) -> str:
    path = shutil.which(program)
    if path is None:
        raise Unavailable(f"{program} is not installed (Debian package {program})")
    return path


# -- bpftrace: kernel uprobes, eBPF handlers --------------------------------------------

def _bpftrace(binary: Path, n: int, probes: str, what: str,
              argv: tuple[str, ...] = ()) -> tuple[float, str]:
    """Run `binary n ARGV...` under a bpftrace program; (ns per hit, bpftrace's output)."""
    exe = _need("bpftrace")
    with tempfile.TemporaryDirectory(prefix="pydyn-peer-") as tmp:
        out = Path(tmp, "out")
        r = _run([exe, "-o", str(out), "-e", probes, "-c", " ".join([f"{binary} {n}", *argv])],
                 what)
        text = out.read_text(errors="replace") if out.exists() else ""
    if r.returncode != 0 or "ns_per_hit" not in r.stdout:
        raise Unavailable(f"{what}: bpftrace failed: {_first_error(r.stderr + text)}")
    return _ns_per_hit(r.stdout, what), text


def _bpftrace_usdt(binary: Path, mark: str) -> str:
    return f"usdt:{binary}:{_full_mark(binary, mark)}"


def _bpftrace_count(binary: Path, mark: str, n: int) -> Result:
    ns, text = _bpftrace(binary, n, f"{_bpftrace_usdt(binary, mark)} {{ @n = count(); }}",
                         "bpftrace usdt count")
    m = re.search(r"@n: (\d+)", text)
    return Result(ns, int(m.group(1)) if m else 0, n, "usdt probe, @n = count()")


def _bpftrace_printf(binary: Path, mark: str, n: int) -> Result:
    ns, text = _bpftrace(binary, n,
                         f'{_bpftrace_usdt(binary, mark)} {{ printf("hit %d\\n", arg0); }}',
                         "bpftrace usdt printf")
    hits = len(re.findall(r"^hit -?\d+$", text, re.M))
    lost = re.search(r"Lost (\d+) events", text)
    note = "printf to a file (-o)" + (f"; bpftrace: Lost {lost.group(1)} events" if lost else "")
    return Result(ns, hits, n, note)


def _bpftrace_kstats(binary: Path, mark: str, n: int) -> Result:
    ns, text = _bpftrace(binary, n, f"{_bpftrace_usdt(binary, mark)} {{ @s[tid] = stats(arg0); }}",
                         "bpftrace usdt keyed stats")
    m = re.search(r"@s\[\d+\]: count (\d+)", text)
    return Result(ns, int(m.group(1)) if m else 0, n, "usdt probe, @s[tid] = stats(arg0)")


def _bpftrace_calls(binary: Path, func: str, n: int, entry: str, ret: str, what: str,
                    note: str, argv: tuple[str, ...] = ()) -> Result:
    """A uprobe and a uretprobe on `func`, each counting (@e, @r) besides `entry`/`ret`
    (`ret` may start with a predicate); hits: the fewer of the two counts."""
    pred, _, body = ret.rpartition("{")
    ns, text = _bpftrace(binary, n, f"uprobe:{binary}:{func} {{ @e = count(); {entry} }} "
                         f"uretprobe:{binary}:{func} {pred}{{ @r = count(); {body} }}",
                         what, argv)
    e = re.search(r"@e: (\d+)", text)
    r = re.search(r"@r: (\d+)", text)
    hits = min(int(e.group(1)) if e else 0, int(r.group(1)) if r else 0)
    return Result(ns, hits, n, note)


def _bpftrace_pair(binary: Path, func: str, n: int) -> Result:
    return _bpftrace_calls(binary, func, n, "", "", "bpftrace uprobe+uretprobe",
                           "uprobe + uretprobe, count() each")


def _bpftrace_args(binary: Path, func: str, n: int, argv: tuple[str, ...]) -> Result:
    return _bpftrace_calls(binary, func, n, "", "@s = sum(retval);",
                           "bpftrace uprobe count + uretprobe sum(retval)",
                           "uprobe count(), uretprobe sum(retval)", argv)


def _bpftrace_latency(binary: Path, func: str, n: int, argv: tuple[str, ...]) -> Result:
    return _bpftrace_calls(binary, func, n, "@t[tid] = nsecs;",
                           "/@t[tid]/ { @lat = hist(nsecs - @t[tid]); delete(@t[tid]);",
                           "bpftrace entry-to-return hist",
                           "uprobe @t[tid] = nsecs, uretprobe hist(nsecs - @t[tid])", argv)


def _bpftrace_startup(binary: Path, mark: str, n: int) -> Result:
    t0 = time.perf_counter()
    _ns, text = _bpftrace(binary, n, f"{_bpftrace_usdt(binary, mark)} {{ @n = count(); }}",
                          "bpftrace startup")
    ms = (time.perf_counter() - t0) * 1000
    m = re.search(r"@n: (\d+)", text)
    return Result(ms, int(m.group(1)) if m else 0, n, "wall time of `bpftrace -e ... -c`")


# -- uftrace: libmcount (function entry/exit of -pg builds, SDT events) ----------------

def _uftrace(binary: Path, n: int, opts: list[str], what: str) -> tuple[float, Path, str]:
    """`uftrace record --force OPTS binary n` (--force: also builds without -pg);
    (ns per hit, the data directory the caller removes, uftrace's path)."""
    exe = _need("uftrace")
    with open(binary, "rb") as f:
        if f.read(5)[4:] == b"\x01":   # EI_CLASS: ELFCLASS32
            raise Unavailable(f"{what}: uftrace here has only a 64-bit libmcount; on a 32-bit "
                              "binary it hangs instead of tracing")
    data = Path(tempfile.mkdtemp(prefix="pydyn-peer-uftrace-"))
    r = _run([exe, "record", "--force", "-d", str(data), *opts, str(binary), str(n)], what)
    if r.returncode != 0 or "ns_per_hit" not in r.stdout:
        shutil.rmtree(data, ignore_errors=True)
        raise Unavailable(f"{what}: uftrace failed: {_first_error(r.stderr + r.stdout)}")
    return _ns_per_hit(r.stdout, what), data, exe


def _uftrace_count(binary: Path, mark: str, n: int) -> Result:
    full = _full_mark(binary, mark)
    ns, data, exe = _uftrace(binary, n, ["-E", full], "uftrace SDT event")
    try:
        dump = _run([exe, "dump", "-d", str(data)], "uftrace dump").stdout
    finally:
        shutil.rmtree(data, ignore_errors=True)
    hits = len(re.findall(rf"\b{re.escape(full)}\b", dump))
    return Result(ns, hits, n, "uftrace record -E PROVIDER:NAME (SDT event)"
                  + ("" if hits >= n else f"; uftrace recorded only {hits} of {n} events"))


def _uftrace_calls(binary: Path, func: str, n: int, record: list[str],
                   fields: str) -> tuple[float, str, str]:
    """`uftrace record -P FUNC RECORD...`, then the report line of func with `fields`
    (then its call count): (ns per hit, the fields' text, the calls)."""
    # -P patches the entry at run time: needs a -pg, -finstrument-functions or
    # -fpatchable-function-entry=5 build (or room for its patch); else it records nothing.
    ns, data, exe = _uftrace(binary, n, ["-P", func, *record], "uftrace function")
    try:
        report = _run([exe, "report", "-d", str(data), "-f", f"{fields}call", "-s", "call"],
                      "uftrace report").stdout
    finally:
        shutil.rmtree(data, ignore_errors=True)
    m = re.search(rf"^\s*(.*?)\s*(\d+)\s+{re.escape(func)}\s*$", report, re.M)
    if m is None:
        raise Unavailable(f"uftrace recorded no call of {func} in {binary}: its dynamic "
                          "patching (-P) needs a -pg, -finstrument-functions or "
                          "-fpatchable-function-entry=5 build, or room for its patch")
    return ns, m.group(1), m.group(2)


def _uftrace_pair(binary: Path, func: str, n: int, retval: bool = False) -> Result:
    # -R FUNC@retval records the return value with each exit.
    ret = ["-R", f"{func}@retval"] if retval else []
    ns, _, calls = _uftrace_calls(binary, func, n, ret, "")
    return Result(ns, int(calls), n, "uftrace record -P FUNC (entry+exit recorded)")


def _uftrace_latency(binary: Path, func: str, n: int) -> Result:
    """uftrace times every call by recording its entry and exit with their timestamps;
    the latencies come from those after the run (`uftrace report`)."""
    ns, avg, calls = _uftrace_calls(binary, func, n, [], "total-avg,")
    return Result(ns, int(calls), n, "uftrace record -P FUNC: each call's entry and exit "
                  f"timestamps, latencies from uftrace report (avg {avg})")


def _uftrace_printf(binary: Path, mark: str, n: int) -> Result:
    raise Unavailable("uftrace has no per-hit print action: it records events to a file and "
                      "prints them after the run (uftrace replay), so there is no printf "
                      "probe to compare")


def _uftrace_startup(binary: Path, mark: str, n: int) -> Result:
    t0 = time.perf_counter()
    r = _uftrace_count(binary, mark, n)
    return Result((time.perf_counter() - t0) * 1000, r.hits, n, "uftrace record + report")


# -- Frida: in-process JavaScript Interceptor --------------------------------------------

_FRIDA_JS = """
let hits = 0, buf = [];
const base = Process.mainModule.base;
function flush() { if (buf.length) { send({lines: buf.join('')}); buf = []; } }
Interceptor.attach(base.add(%(offset)d), %(handler)s);
Interceptor.attach(Module.getGlobalExportByName('exit'), { onEnter() {
    flush(); send({hits: hits}); recv('ack', () => {}).wait();
}});
"""
# A USDT site is not a function entry: the listener object form would treat [sp] as a return
# address (and overwrite it for onLeave); a plain function is Frida's instruction probe.
_FRIDA_COUNT = "function () { hits++; }"
# printf: lines are batched (one message per 1000 hits), Frida's cheapest output path.
_FRIDA_PRINTF = ("function () { hits++; buf.push('hit ' + this.context.%(reg)s.toInt32() "
                 "+ '\\n'); if (buf.length >= 1000) flush(); }")
# hits counts returns: each one implies its entry fired (the listener form: `func` is an entry).
_FRIDA_PAIR = "{ onEnter() { this.e = 1; }, onLeave() { hits += this.e; } }"


def _frida_module() -> object:
    try:
        import frida  # type: ignore[import-not-found]
    except ImportError as exc:
        raise Unavailable("frida is not installed (pip install 'pydyn[bench]')") from exc
    return frida


def _link_base(binary: Path) -> int:
    """Lowest PT_LOAD vaddr: Frida's module base corresponds to it."""
    from pydyn.launcher.elf.reader import get_elf_info
    return min(seg.vaddr for seg in get_elf_info(str(binary)).segments)


def _frida_run(binary: Path, n: int, offset: int, handler: str, what: str,
               out: Callable[[str], None] | None = None) -> tuple[float, int]:
    frida = _frida_module()
    stdout: list[str] = []
    hits: list[int] = []
    errors: list[str] = []
    try:
        device = frida.get_local_device()  # type: ignore[attr-defined]
        pid = device.spawn([str(binary), str(n)], stdio="pipe")
        session = device.attach(pid)
    except Exception as exc:   # frida raises its own hierarchy, reasons in the text
        raise Unavailable(f"{what}: frida cannot spawn/attach: {exc}") from exc
    done = threading.Event()
    script = session.create_script(_FRIDA_JS % {"offset": offset, "handler": handler})

    def on_message(msg: dict[str, object], data: object) -> None:
        if msg.get("type") == "error":
            errors.append(str(msg.get("description")))
            done.set()
            return
        payload = msg.get("payload")
        if isinstance(payload, dict):
            if "lines" in payload and out is not None:
                out(str(payload["lines"]))
            if "hits" in payload:
                hits.append(int(payload["hits"]))
                script.post({"type": "ack"})

    def on_output(pid: int, fd: int, data: bytes) -> None:
        if fd == 1 and data:
            stdout.append(data.decode(errors="replace"))

    device.on("output", on_output)
    session.on("detached", lambda *a: done.set())
    script.on("message", on_message)
    try:
        script.load()
        device.resume(pid)
    except Exception as exc:
        raise Unavailable(f"{what}: frida script failed: {exc}") from exc
    if not done.wait(TIMEOUT):
        device.kill(pid)
        raise Unavailable(f"{what}: no result within {TIMEOUT} s")
    if errors:
        raise Unavailable(f"{what}: frida script error: {errors[0]}")
    time.sleep(0.05)   # the last output callbacks arrive after detach
    return _ns_per_hit("".join(stdout), what), hits[0] if hits else 0


def _find_note(binary: Path, mark: str) -> Any:
    """The binary's first USDT note of `mark` ("provider:name", or "name" for any provider)."""
    from pydyn.launcher.elf.stapsdt import iter_stapsdt_notes
    provider, name = _split_mark(mark)
    for note in iter_stapsdt_notes(str(binary)):
        if note.name == name and provider in ("", note.provider):
            return note
    raise Unavailable(f"{binary}: no USDT mark {mark}")


def _full_mark(binary: Path, mark: str) -> str:
    note = _find_note(binary, mark)
    return f"{note.provider}:{note.name}"


def _usdt_offset(binary: Path, mark: str) -> int:
    return int(_find_note(binary, mark).pc) - _link_base(binary)


def _func_offset(binary: Path, func: str) -> int:
    from elftools.elf.elffile import ELFFile
    with open(binary, "rb") as f:
        elf = ELFFile(f)
        for sec in (".symtab", ".dynsym"):
            table = elf.get_section_by_name(sec)
            for sym in (table.get_symbol_by_name(func) or []) if table else []:
                if sym["st_info"]["type"] == "STT_FUNC" and sym["st_value"]:
                    return int(sym["st_value"]) - _link_base(binary)
    raise Unavailable(f"{binary}: no function {func}")


def _frida_count(binary: Path, mark: str, n: int) -> Result:
    ns, hits = _frida_run(binary, n, _usdt_offset(binary, mark), _FRIDA_COUNT,
                          "frida usdt count")
    return Result(ns, hits, n, "Interceptor.attach(site, probe function: hits++)")


def _frida_printf(binary: Path, mark: str, n: int) -> Result:
    reg = _usdt_arg_register(binary, mark)
    lines: list[str] = []
    ns, hits = _frida_run(binary, n, _usdt_offset(binary, mark), _FRIDA_PRINTF % {"reg": reg},
                          "frida usdt printf", lines.append)
    printed = sum(chunk.count("\n") for chunk in lines)
    return Result(ns, min(hits, printed), n,
                  "probe builds the line; sent to the host 1000 at a time")


def _usdt_arg_register(binary: Path, mark: str) -> str:
    """Frida's context name of the first USDT argument, which must be a plain register."""
    args = str(_find_note(binary, mark).args)
    m = re.fullmatch(r"-?\d+@%(\w+)", args.split()[0] if args else "")
    if m is None:
        raise Unavailable(f"{mark}: first argument {args!r} is not a register")
    return _FRIDA_REG.get(m.group(1), m.group(1))


# 32-bit names of the x86-64 registers map to the 64-bit context fields.
_FRIDA_REG = {"eax": "rax", "ebx": "rbx", "ecx": "rcx", "edx": "rdx", "esi": "rsi",
              "edi": "rdi", **{f"r{i}d": f"r{i}" for i in range(8, 16)}}


def _frida_pair(binary: Path, func: str, n: int) -> Result:
    ns, hits = _frida_run(binary, n, _func_offset(binary, func), _FRIDA_PAIR,
                          "frida function pair")
    return Result(ns, hits, n, "Interceptor.attach(func) { onEnter, onLeave }")


def _frida_startup(binary: Path, mark: str, n: int) -> Result:
    t0 = time.perf_counter()
    r = _frida_count(binary, mark, n)
    return Result((time.perf_counter() - t0) * 1000, r.hits, n,
                  "spawn + attach + script load + run (in this Python process)")


# -- dispatch -----------------------------------------------------------------------------

_Runner = Callable[[Path, str, int], Result]
_RUNNERS: dict[str, dict[str, _Runner]] = {
    "count": {"bpftrace": _bpftrace_count, "uftrace": _uftrace_count, "frida": _frida_count},
    "printf": {"bpftrace": _bpftrace_printf, "uftrace": _uftrace_printf,
               "frida": _frida_printf},
    "kstats": {"bpftrace": _bpftrace_kstats},
    "pair": {"bpftrace": _bpftrace_pair, "uftrace": _uftrace_pair, "frida": _frida_pair},
    "pair_ret": {"uftrace": lambda b, f, n: _uftrace_pair(b, f, n, retval=True)},
    "latency": {"uftrace": _uftrace_latency},
    "startup": {"bpftrace": _bpftrace_startup, "uftrace": _uftrace_startup,
                "frida": _frida_startup},
}


def _dispatch(kind: str, tool: str, binary: Path, what: str, n: int) -> Result:
    try:
        runner = _RUNNERS[kind][tool]
    except KeyError:
        if tool in TOOLS:
            raise Unavailable(f"{tool}: not compared for {kind}") from None
        raise ValueError(f"unknown tool {tool!r}; expected one of {', '.join(TOOLS)}") from None
    if os.geteuid() != 0 and tool == "bpftrace":
        raise Unavailable("bpftrace needs root (CAP_BPF, CAP_PERFMON)")
    return runner(Path(binary).resolve(), what, n)


def usdt_count(tool: str, binary: Path, mark: str, n: int) -> Result:
    """ns per iteration of `binary n` while `tool` counts every hit of `mark`."""
    return _dispatch("count", tool, binary, mark, n)


def usdt_printf(tool: str, binary: Path, mark: str, n: int) -> Result:
    """ns per iteration while `tool` prints the mark's first argument on every hit."""
    return _dispatch("printf", tool, binary, mark, n)


def usdt_kstats(tool: str, binary: Path, mark: str, n: int) -> Result:
    """ns per iteration while `tool` keeps a statistic of the mark's argument per thread."""
    return _dispatch("kstats", tool, binary, mark, n)


def function_pair(tool: str, binary: Path, func: str, n: int) -> Result:
    """ns per iteration while `tool` probes entry and return of `func`."""
    return _dispatch("pair", tool, binary, func, n)


def function_args(tool: str, binary: Path, func: str, n: int,
                  argv: tuple[str, ...] = ()) -> Result:
    """ns per iteration of `binary n ARGV` while `tool` counts `func`'s entries and sums
    its return values (bpftrace; uftrace records each return value with -R and sums
    nothing, without ARGV; Frida is not compared)."""
    if tool == "uftrace" and not argv:
        return _dispatch("pair_ret", tool, binary, func, n)
    if tool != "bpftrace":
        raise Unavailable(f"{tool}: not compared for function arguments")
    _dispatch_check(tool)
    return _bpftrace_args(Path(binary).resolve(), func, n, argv)


def function_latency(tool: str, binary: Path, func: str, n: int,
                     argv: tuple[str, ...] = ()) -> Result:
    """ns per iteration while `tool` keeps a histogram of `func`'s entry-to-return time
    (uftrace, without ARGV: records the timestamps; the latencies come after the run)."""
    if tool == "uftrace" and not argv:
        return _dispatch("latency", tool, binary, func, n)
    if tool != "bpftrace":
        raise Unavailable(f"{tool}: not compared for function latency")
    _dispatch_check(tool)
    return _bpftrace_latency(Path(binary).resolve(), func, n, argv)


def _dispatch_check(tool: str) -> None:
    _need(tool)
    if os.geteuid() != 0 and tool == "bpftrace":
        raise Unavailable("bpftrace needs root (CAP_BPF, CAP_PERFMON)")


def startup(tool: str, binary: Path, mark: str, n: int) -> Result:
    """Wall ms of one whole run of `binary n` under `tool` counting `mark`."""
    return _dispatch("startup", tool, binary, mark, n)


def main() -> int:
    """`python bench/peers.py BINARY MARK N`: each tool's count and printf on one binary."""
    if len(sys.argv) != 4:
        print(main.__doc__, file=sys.stderr)
        return 2
    binary, mark, n = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    for tool in TOOLS:
        for name, fn in (("count", usdt_count), ("printf", usdt_printf)):
            try:
                r = fn(tool, binary, mark, n)
                print(f"{tool:9} {name:7} {float(r):10.1f} ns/iter  hits {r.hits}/{n}  "
                      f"{r.note}")
            except Unavailable as exc:
                print(f"{tool:9} {name:7} unavailable: {exc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
