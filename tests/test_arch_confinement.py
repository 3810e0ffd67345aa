"""Per-arch runtime code stays in runtime/arch/<arch>/, chosen in one place (pd_arch.h),
and every build-time default is defined once, in pd_config.h; patch planning chooses by
machine in plan/__init__.py alone."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from cbuild import run_pydyn

from pydyn.shmlayout import render_c_header

ROOT = Path(__file__).resolve().parent.parent
RUNTIME = ROOT / "runtime"
PLAN = ROOT / "launcher" / "plan"
A64_CC = "aarch64-linux-gnu-gcc"
MACHINE_MACROS = re.compile(r"\b__(x86_64|i386|aarch64|ILP32|amd64|arm)__\b")


def _arch_neutral_files() -> list[Path]:
    return sorted(p for p in RUNTIME.glob("*") if p.suffix in (".c", ".h", ".S"))


@pytest.mark.unit
def test_only_pd_arch_h_tests_the_machine() -> None:
    tests = {p.name: [n for n, line in enumerate(p.read_text().splitlines(), 1)
                      if MACHINE_MACROS.search(line)]
             for p in _arch_neutral_files()}
    assert {name: lines for name, lines in tests.items() if lines} == {
        "pd_arch.h": [7, 9, 11]}


@pytest.mark.unit
def test_every_arch_has_a_cpu_h_naming_its_regs_h() -> None:
    text = (RUNTIME / "pd_arch.h").read_text()
    chosen = re.findall(r'#include "arch/([a-z0-9_]+)/cpu.h"', text)
    assert sorted(chosen) == ["aarch64", "i386", "x86_64"]
    for arch in chosen:
        cpu = (RUNTIME / "arch" / arch / "cpu.h").read_text()
        assert f'#define PD_ARCH_REGS_H "arch/{arch}/regs.h"' in cpu


def _defaults(text: str) -> list[str]:
    """Names given a value under `#ifndef NAME`: build-time defaults -D may override."""
    return re.findall(r"^#ifndef (\w+)\n#define \1[ \t]+\S", text, re.MULTILINE)


@pytest.mark.unit
def test_build_time_defaults_are_in_pd_config_h_only() -> None:
    layout = set(re.findall(r"^#define (\w+)", render_c_header(), re.MULTILINE))
    config = set(_defaults((RUNTIME / "pd_config.h").read_text()))
    assert {"MAXACTION", "STUCK_CONTEXT_MS", "PD_LOCK_WAIT_NS", "PD_LOCK_SPINS"} <= config
    elsewhere = {}
    for p in [*_arch_neutral_files(), *sorted((RUNTIME / "arch").rglob("*.[chS]"))]:
        if p.name == "pd_config.h":
            continue
        names = [n for n in _defaults(p.read_text())
                 if re.match(r"(PD_|MAX|STP_|STUCK_)", n) and n not in layout
                 and n != "PD_FAST_MARK_CC"]   # an arch hook's default, not a setting
        if names:
            elsewhere[str(p.relative_to(RUNTIME))] = names
    assert elsewhere == {}


@pytest.mark.unit
def test_only_plan_init_chooses_by_machine() -> None:
    """The arch modules (x86.py with objfacts.py, aarch64.py) may name their machines;
    the rest of plan/ leaves the choice to plan/__init__.py's table."""
    switch = re.compile(r"\.machine\s*(==|!=|in\b|not in\b)")
    shared = [p for p in sorted(PLAN.glob("*.py"))
              if p.name not in ("__init__.py", "x86.py", "objfacts.py", "aarch64.py")]
    assert shared and all(switch.search(p.read_text()) is None for p in shared), shared


def test_an_aarch64_return_probe_keeps_the_return_address_swap(
        tmp_path: Path, cache: Path) -> None:
    """plan/__init__.py, not returns.py, sends an aarch64 function's `.return` to the
    return-address swap (an x86 one gets its exits planned: test_func_exits.py)."""
    cc = shutil.which(A64_CC)
    if cc is None:
        pytest.skip(f"no {A64_CC}")
    src = tmp_path / "f.c"
    src.write_text("int f(int x) { return x * 3 + 1; }\n"
                   "int main(int argc, char **argv) { (void)argv; return f(argc); }\n")
    exe = tmp_path / "f"
    subprocess.run([cc, "-O2", "-o", str(exe), str(src)], check=True)
    res = run_pydyn(cache, "-u", "-p2", "-e",
                    f'probe process("{exe}").function("f").return {{ }}')
    assert res.returncode == 0, res.stderr
    assert "    returns: hijack: aarch64 keeps the return-address swap" in \
        res.stdout.splitlines(), res.stdout
