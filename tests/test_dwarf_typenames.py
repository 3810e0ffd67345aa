"""`-L` lists a function's variables as `$name:type` with the types spelled as stap
spells them (dwarf_wrappers.cxx): qualifiers after the type (`char const*`), function
pointers with their modifiers between the return and the parameter types
(`int (**) (struct foo const*, ...)`, `int (* const) (void)`), `va_list`, unions,
enums, typedefs of anonymous structs, arrays as `[]`, an array parameter as the
pointer C makes of it.  tests/progs/dwarf_types.c, m64 and m32 at -O0 and -O2.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from cbuild import BUILDS, PROGS, Build, builder, run_pydyn

SRC = PROGS / "dwarf_types.c"

PARAMS = ("$s:char const* $cb:int (*) (int, char) $fn:void (*) (void) "
          "$pp:int (**) (struct foo const*, ...) $v:int volatile $rp:int* restrict "
          "$an:anon_t $un:union u $en:enum e $cf:struct foo const* $vp:void* $buf:char* "
          "$cfp:int (* const) (void)")


@pytest.fixture(scope="module")
def progs(tmp_path_factory: pytest.TempPathFactory) -> Callable[[Build], Path]:
    return builder(SRC, tmp_path_factory.mktemp("dwtypes"), "dt")


@pytest.mark.parametrize("b", BUILDS, ids=[b.id for b in BUILDS])
def test_listing_spells_types_as_stap(progs: Callable[[Build], Path], cache: Path,
                                      b: Build) -> None:
    exe = progs(b)
    res = run_pydyn(cache, "-L", f'process("{exe}").function("types")')
    assert res.returncode == 0, res.stderr
    head = f'process("{exe}").function("types@{SRC}:9") '
    assert res.stdout.startswith(head), res.stdout
    listed = res.stdout[len(head):].rstrip("\n")
    # -O2 keeps some locals nowhere at the entry: -L leaves those out, as stap
    if b.opt == "-O0":
        assert listed == PARAMS + " $ap:va_list $arr:int[] $x:int", listed
    else:
        assert listed.startswith(PARAMS + " $"), listed
