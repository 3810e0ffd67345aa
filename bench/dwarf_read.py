"""How long pydyn takes to find one function's DWARF in a big debug file.

`python bench/dwarf_read.py [BINARY [FUNCTION...]]` (default: the machine's
libc with Debian's libc6-dbg installed; fopen, malloc, qsort): the lookup of
the debug file, the first function (opens the file, reads .debug_aranges,
parses one compilation unit), each further one, and with `--full` a pyelftools
walk of every DIE for comparison.  Wall seconds; docs/performance.md has results.
"""

from __future__ import annotations

import subprocess
import sys
import time

from pydyn.launcher.elf.debuginfo import find_debug_file
from pydyn.launcher.elf.dwarf import get_dwarf


def symbols(path: str) -> dict[str, int]:
    out = subprocess.run(["nm", "-D", "--defined-only", path], capture_output=True,
                         text=True, check=True).stdout
    addrs = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3:
            addrs.setdefault(parts[2].split("@")[0], int(parts[0], 16))
    return addrs


def main() -> None:
    args = [a for a in sys.argv[1:] if a != "--full"]
    binary = args[0] if args else "/lib/x86_64-linux-gnu/libc.so.6"
    names = args[1:] or ["fopen", "malloc", "qsort"]
    addrs = symbols(binary)
    t0 = time.perf_counter()
    lookup = find_debug_file(binary)
    t1 = time.perf_counter()
    print(f"debug file {lookup.path}: found in {t1 - t0:.3f} s")
    t2 = time.perf_counter()
    info = get_dwarf(binary)
    print(f"open (sections decompressed, DWARF set up): {time.perf_counter() - t2:.3f} s")
    for name in names:
        t = time.perf_counter()
        func = info.function_at(addrs[name])
        dt = time.perf_counter() - t
        params = " ".join(f"{p.name}:{p.type_name}" for p in func.params) if func else "-"
        print(f"{name}: {dt:.3f} s  ({params})")
    print(f"total from the start: {time.perf_counter() - t0:.3f} s")
    if "--full" in sys.argv:
        t = time.perf_counter()
        cus = dies = 0
        for cu in info.dwarf.iter_CUs():
            cus += 1
            dies += sum(1 for _ in cu.iter_DIEs())
        print(f"full walk: {cus} CUs, {dies} DIEs in {time.perf_counter() - t:.1f} s")


if __name__ == "__main__":
    main()
