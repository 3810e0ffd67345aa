"""C header generator: ``python -m pydyn.shmlayout.gen_c OUT.h`` writes pd_shm.h.

The rendering lives in c_header.py so importing the package does not import
this module (runpy warns when ``-m`` runs a module that is already imported).
"""

from __future__ import annotations

import sys
from pathlib import Path

from .c_header import render_c_header

__all__ = ["main", "render_c_header"]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m pydyn.shmlayout.gen_c OUT.h", file=sys.stderr)
        return 2
    Path(args[0]).write_text(render_c_header())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
