"""`@defined(x) ? a : b` is decided when the script is translated, as stap decides it in
pass 2: the branch not taken is neither typed nor compiled, so it may name a member or
variable the probe does not have.  stap's @choose_defined(a, b) macro is built on it.
m64 and m32, -O0."""

from __future__ import annotations

from pathlib import Path

import pytest
from cbuild import build_c, run_pydyn

PROG = r"""
#include <stdio.h>
struct s { long a; long b; };
__attribute__((noinline)) long f(struct s *p, long k) { return p->a + k; }
int main(void)
{
    struct s x = {40, 2};
    long t = 0;
    for (int i = 0; i < 3; i++)
        t += f(&x, i);
    printf("%ld\n", t);
    return 0;
}
"""


@pytest.mark.parametrize("abi", ["m64", "m32"])
def test_the_branch_not_taken_may_name_what_is_not_there(cache: Path, tmp_path: Path,
                                                         abi: str) -> None:
    src = tmp_path / "cd.c"
    src.write_text(PROG)
    exe = build_c(src, tmp_path / "cd", m32=abi == "m32", opt="-O0", extra=("-g",))
    script = f"""probe process("{exe}").function("f") {{
    printf("%d %d %d %s\\n", @choose_defined($p->a, 7), @choose_defined($p->nosuch, 9),
           @choose_defined($nothere, $k), !@defined($k) ? $nothere$ : "k")
}}"""
    res = run_pydyn(cache, "-e", script, "-c", str(exe))
    assert res.returncode == 0, res.stderr
    assert sorted(res.stdout.splitlines()) == ["123", "40 9 0 k", "40 9 1 k", "40 9 2 k"], \
        res.stdout
    # a condition that is not @defined alone still types both branches
    res = run_pydyn(cache, "-p2", "-e", f'probe process("{exe}").function("f") '
                    '{ println($k > 0 ? $p->nosuch : 1) }')
    assert res.returncode == 1 and "nosuch" in res.stderr, res.stderr
