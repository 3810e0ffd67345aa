"""Target variables whose DWARF location is an expression the runtime evaluates
(launcher/elf/dwarf_expr.py): a computed value (`DW_OP_stack_value` over `breg`,
or over `fbreg` + `DW_OP_deref` on i386), a value in two register pieces
(`DW_OP_piece`, i386), `DW_OP_entry_value` where the entry's register is
reused (read from what a hidden entry probe kept), and `DW_OP_fbreg` over a
location-list frame base (strict DWARF 2).  tests/progs/dwarf_exprs.c at
-O2, m64 and m32; each test first checks, with `pydyn -L -v` or readelf, that
gcc really emitted the form at the probed line, then compares the probe's
values with what the program prints itself."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from cbuild import BUILDS, PROGS, build_c, builder, run_pydyn

SRC = PROGS / "dwarf_exprs.c"
LINES = {m: next(i for i, ln in enumerate(SRC.read_text().splitlines(), 1)
                 if f"/* {m} */" in ln) for m in ("COMPUTED", "PIECES")}
ARG = 5
ABIS = ["m64", "m32"]   # build_c skips m32 without a -m32 toolchain
Progs = Callable[[str], Path]


@pytest.fixture(scope="module")
def progs(tmp_path_factory: pytest.TempPathFactory) -> Progs:
    one = builder(SRC, tmp_path_factory.mktemp("dwexpr"), "dx")
    return lambda abi: one(next(b for b in BUILDS if b.id == f"{abi}-O2"))


def pydyn(cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_pydyn(cache, *args, timeout=120)


def locations(cache: Path, exe: Path, line: int) -> dict[str, str]:
    """What `-L -v` says each variable's location is at the line."""
    res = pydyn(cache, "-L", "-v", f'process("{exe}").statement("*@dwarf_exprs.c:{line}")')
    assert res.returncode == 0, res.stderr
    m = re.search(r'locations="([^"]*)"', res.stdout)
    assert m, res.stdout
    out: dict[str, str] = {}
    for part in re.split(r" (?=\w+=)", m.group(1)):
        name, _, where = part.partition("=")
        out[name] = where
    return out


def own(exe: Path) -> dict[str, int]:
    """The values the program prints itself."""
    res = subprocess.run([str(exe), str(ARG)], capture_output=True, text=True, timeout=30)
    return {k: int(v) for k, v in re.findall(r"(\w+)=(-?\d+)", res.stdout)}


def probe_values(cache: Path, exe: Path, line: int, names: str) -> dict[str, int]:
    fmt = " ".join(f"{n}=%d" for n in names.split())
    args = ", ".join(f"${n}" for n in names.split())
    script = (f'probe process("{exe}").statement("*@dwarf_exprs.c:{line}") '
              f'{{ printf("at {fmt}\\n", {args}) }}')
    res = pydyn(cache, "-e", script, "-c", f"{exe} {ARG}")
    assert res.returncode == 0, res.stderr
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("at ")]
    assert len(lines) == 1, res.stdout
    return {k: int(v) for k, v in re.findall(r"(\w+)=(-?\d+)", lines[0])}


@pytest.mark.parametrize("abi", ABIS)
def test_computed_value(progs: Progs, cache: Path, abi: str) -> None:
    exe = progs(abi)
    loc = locations(cache, exe, LINES["COMPUTED"])
    assert "DW_OP_stack_value" in loc["y"], loc
    if abi == "m32":   # y = 2 * *(CFA + 0) + 7: the parameter's stack slot, dereferenced
        assert loc["y"].startswith("DW_OP_fbreg DW_OP_deref"), loc
    else:              # y = 2 * rdi + 7
        assert loc["y"].startswith("DW_OP_breg"), loc
    want = own(exe)
    assert want["x"] == 100 + 2 + ARG
    assert probe_values(cache, exe, LINES["COMPUTED"], "x y") == \
        {"x": want["x"], "y": want["y"]}


@pytest.mark.parametrize("abi", ABIS)
def test_register_pieces(progs: Progs, cache: Path, abi: str) -> None:
    exe = progs(abi)
    loc = locations(cache, exe, LINES["PIECES"])
    if abi == "m32":   # the 64-bit w in eax:edx after wide() returns
        assert re.fullmatch(r"DW_OP_reg\d DW_OP_piece DW_OP_reg\d DW_OP_piece", loc["w"]), loc
    want = own(exe)["w"]
    assert want >> 32 == 0x12345678 and want & 0xffffffff == 0x9abcdef0 + 2
    assert probe_values(cache, exe, LINES["PIECES"], "w") == {"w": want}


def test_entry_value_kept(progs: Progs, cache: Path) -> None:
    """x86-64: `a` came in rdi, which wide() reuses; after it DWARF only says
    "rdi's value at the entry", which a hidden probe on the entry kept."""
    exe = progs("m64")
    dump = subprocess.run(["readelf", "--debug-dump=loc", str(exe)], capture_output=True,
                          text=True, timeout=30).stdout
    assert "DW_OP_entry_value: (DW_OP_reg5 (rdi)); DW_OP_stack_value" in dump
    assert locations(cache, exe, LINES["PIECES"])["a"] == "DW_OP_entry_value DW_OP_stack_value"
    assert probe_values(cache, exe, LINES["PIECES"], "a") == {"a": own(exe)["w"]}


@pytest.mark.parametrize(("abi", "line", "var", "what"), [
    ("m64", "COMPUTED", "y", "computed value"),
    ("m32", "PIECES", "w", "noncontiguous object"),
])
def test_address_of_a_value(progs: Progs, cache: Path, abi: str, line: str, var: str,
                            what: str) -> None:
    exe = progs(abi)
    script = (f'probe process("{exe}").statement("*@dwarf_exprs.c:{LINES[line]}") '
              f'{{ printf("%d\\n", &${var}) }}')
    res = pydyn(cache, "-e", script, "-c", f"{exe} {ARG}")
    assert res.returncode == 1
    assert f"error: cannot take address of {what}" in res.stderr, res.stderr


@pytest.mark.parametrize("abi", ABIS)
def test_vars_list(progs: Progs, cache: Path, abi: str) -> None:
    """`$$vars`/`$$locals` read the computed, pieced and entry values too."""
    exe = progs(abi)
    want = own(exe)
    script = (f'probe process("{exe}").statement("*@dwarf_exprs.c:{LINES["COMPUTED"]}") '
              '{ printf("c %s|%s\\n", $$vars, $$locals) } '
              f'probe process("{exe}").statement("*@dwarf_exprs.c:{LINES["PIECES"]}") '
              '{ printf("p %s\\n", $$vars) }')
    res = pydyn(cache, "-e", script, "-c", f"{exe} {ARG}")
    assert res.returncode == 0, res.stderr
    a = f"{want['w']:#x}"
    assert f"c x={want['x']:#x} y={want['y']:#x}|y={want['y']:#x}\n" in res.stdout, res.stdout
    assert f"p a={a} w={want['w']:#x}\n" in res.stdout, res.stdout


@pytest.mark.parametrize("abi", ABIS)
def test_fbreg_over_a_frame_base_list(progs: Progs, cache: Path, abi: str,
                                      tmp_path: Path) -> None:
    """Strict DWARF 2 has no DW_OP_call_frame_cfa: gcc gives each function's frame
    base as a location list of `breg`s (sp, then the frame pointer), and `fbreg`
    is relative to the entry at the pc."""
    exe = build_c(SRC, tmp_path / f"dx2-{abi}", m32=abi == "m32", opt="-O0",
                  extra=("-g", "-gdwarf-2", "-gstrict-dwarf"))
    info = subprocess.run(["readelf", "--debug-dump=info", str(exe)], capture_output=True,
                          text=True, timeout=30).stdout
    assert re.search(r"DW_AT_frame_base\s*:.*\(location list\)", info), info[:2000]
    assert "DW_OP_call_frame_cfa" not in info
    loc = locations(cache, exe, LINES["COMPUTED"])
    assert loc["x"] == "DW_OP_fbreg" and loc["y"] == "DW_OP_fbreg", loc
    want = own(exe)
    assert probe_values(cache, exe, LINES["COMPUTED"], "x y") == \
        {"x": want["x"], "y": want["y"]}
