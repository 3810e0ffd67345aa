"""Autocast: a value keeps the DWARF type it was read with through locals, `&@cast`,
`?:` and script function returns, and suffixes on it (`->m`, `[i]`) resolve on that
type, as stap's exp_type_dwarf; @cast of compiled headers in probes without a
binary (begin, timers, functions), read in the launcher.  The values are checked
against what the program prints of itself, m64 and m32."""

from __future__ import annotations

from pathlib import Path

import pytest
from cbuild import build_c, run_pydyn

PROG = r"""
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/sdt.h>
#include <sys/socket.h>
#include <sys/un.h>

struct node { int v; struct node *next; char name[8]; };
struct node n2 = { 22, 0, "two" };
struct node n1 = { 11, &n2, "one" };

__attribute__((noinline)) int walk(struct node *p)
{
    int s = 0;
    for (; p; p = p->next)
        s += p->v;
    return s;
}

int main(void)
{
    struct sockaddr_un sun;
    memset(&sun, 0, sizeof sun);
    sun.sun_family = AF_UNIX;
    strcpy(sun.sun_path, "/tmp/ac");
    DTRACE_PROBE2(ac, mark, &n1, &sun);
    printf("prog v=%d next=%d name1=%d fam=%d path1=%d off=%d sum=%d nextname1=%d\n", n1.v,
           n1.next->v, n1.name[1], sun.sun_family, sun.sun_path[1],
           (int)offsetof(struct node, name), walk(&n1), n1.next->name[1]);
    printf("prog2 size=%d ptrsz=%d\n", (int)sizeof(struct node), (int)sizeof(void *));
    return 0;
}
"""

SCRIPT = r"""
function node_of(p) { return & @cast(p, "struct node", "%(exe)s") }
probe process("%(exe)s").function("walk") {
    q = $p                        # a parameter's pointer type, kept by the local
    nm = q->next->name            # an array member: its address, typed
    printf("local v=%%d next=%%d name1=%%d\n", q->v, q->next->v, (nm)[1])
    nx = q->next
    printf("chain %%d %%d\n", nx->v, (nx = q)->next->v)
}
probe process("%(exe)s").mark("mark") {
    n = & @cast($arg1, "struct node")          # the probe's binary
    printf("cast v=%%d next=%%d name1=%%d\n", n->v, (n->next)->v, n->name[1])
    printf("paren %%d\n", (& @cast($arg1, "struct node"))->next->v)
    s = & @cast($arg2, "sockaddr_un", "<sys/un.h>")    # compiled for the process's ABI
    printf("hdr fam=%%d path1=%%d\n", s->sun_family, (s->sun_path)[1])
    printf("func %%d\n", node_of($arg1)->next->v)     # a function's typed return
    printf("pretty %%s %%s\n", s->sun_path$, n->next$$)
    printf("ternary %%d\n", (randint(2) ? n : n->next)->v > 0)
    printf("size=%%d ptrsz=%%d\n", @cast_sizeof("struct node"),
           @cast_module_sizeof("<stdint.h>", "uintptr_t"))
}
"""


@pytest.mark.parametrize("abi", ["m64", "m32"])
def test_autocast_on_a_real_process(cache: Path, tmp_path: Path, abi: str) -> None:
    src = tmp_path / "ac.c"
    src.write_text(PROG)
    exe = build_c(src, tmp_path / "ac", m32=abi == "m32", extra=("-g",))
    res = run_pydyn(cache, "-e", SCRIPT % {"exe": exe}, "-c", str(exe))
    assert res.returncode == 0, res.stderr
    out = res.stdout
    prog = next(line for line in out.splitlines() if line.startswith("prog "))
    want = dict(kv.split("=") for kv in prog.split()[1:])
    assert f"local v={want['v']} next={want['next']} name1={want['nextname1']}\n" in out, out
    assert f"chain {want['next']} {want['next']}\n" in out, out
    assert f"cast v={want['v']} next={want['next']} name1={want['name1']}\n" in out, out
    assert f"paren {want['next']}\n" in out, out
    assert f"hdr fam={want['fam']} path1={want['path1']}\n" in out, out
    assert f"func {want['next']}\n" in out, out
    assert "ternary 1\n" in out, out
    assert 'pretty "/tmp/ac" {.v=22, .next=0x0, .name="two"}\n' in out, out
    prog2 = next(line for line in out.splitlines() if line.startswith("prog2 "))
    assert prog2[len("prog2 "):] + "\n" in out, out
    assert "ERROR" not in res.stderr, res.stderr


def test_mixed_types_make_a_plain_long(cache: Path, tmp_path: Path) -> None:
    """Two different DWARF types given to one local: it is a long, `->` on it an error."""
    res = run_pydyn(cache, "-p2", "-e", r"""probe begin {
    s = randint(2) ? 0 : 1
    if (s) x = & @cast(0, "sockaddr_un", "<sys/un.h>")
    else x = & @cast(0, "struct stat", "<sys/stat.h>")
    println(x->sun_family)
}""")
    assert res.returncode == 1, res.stderr
    assert "different DWARF types" in res.stderr and "Traceback" not in res.stderr, res.stderr
    res = run_pydyn(cache, "-p2", "-e", "probe begin { x = 5; println(x->y) }")
    assert res.returncode == 1
    assert "carries no DWARF type" in res.stderr, res.stderr


def test_header_cast_in_begin_and_timer(cache: Path) -> None:
    """No process binary: the types come from the headers (compiled for the launcher's
    ABI, which runs begin and timers); `&...->m` reads nothing; a read of address 0 is
    the handler's counted error, not a crash."""
    res = run_pydyn(cache, "-e", r"""
probe begin {
    sun = & @cast(0, "sockaddr_un", "<sys/un.h>")
    printf("off=%d\n", & sun->sun_path[3])
}
probe timer.ms(10) {
    println(@cast(0, "struct stat", "<sys/stat.h>")->st_size)
    exit()
}""")
    assert "off=5\n" in res.stdout, res.stdout + res.stderr   # sun_family is 2 bytes
    assert "user memory read fault at 0x30 (8 bytes)" in res.stderr, res.stderr
    assert "Number of errors: 1" in res.stderr and "Traceback" not in res.stderr, res.stderr


def test_no_autocast_before_2_6(cache: Path) -> None:
    """stap parses suffixes on an ordinary value from 2.6 on."""
    for expr in ("& x", "x ->m", "f(1) [0]"):
        res = run_pydyn(cache, "-p1", "--compatible=2.5", "-e",
                        f"probe begin {{ ( {expr} ) }}")
        assert res.returncode == 1, (expr, res.stderr)
        assert "error:" in res.stderr and "Traceback" not in res.stderr, res.stderr
    res = run_pydyn(cache, "-p1", "-e", "probe begin { ( x ->m ) }")
    assert res.returncode == 0, res.stderr


def test_an_unused_autocast_is_elided(cache: Path) -> None:
    """A @cast or autocast statement that only reads is dropped before types, as stap's
    pass 2 drops it: a bogus member there is a warning, not an error (-u keeps it)."""
    script = ('probe begin { foo->no->such; @cast(0, "sockaddr_un", "<sys/un.h>")->nope; '
              'print("x") }')
    res = run_pydyn(cache, "-p2", "-e", script)
    assert res.returncode == 0, res.stderr
    # the second statement's warning repeats the first's message: held back, counted
    assert res.stderr.count("Eliding side-effect-free expression") == 1, res.stderr
    assert res.stderr.endswith("Number of similar warning messages suppressed: 1.\n")
    res = run_pydyn(cache, "-p2", "-u", "-e", script)
    assert res.returncode == 1 and "unable to find member 'nope'" in res.stderr, res.stderr


@pytest.mark.parametrize("abi", ["m64", "m32"])
def test_guru_writes_through_an_autocast(cache: Path, tmp_path: Path, abi: str) -> None:
    """`x->m = v` in guru mode stores the member's size where the read would load (the
    program prints what it then holds); without -g it is stap's error."""
    src = tmp_path / "ac.c"
    src.write_text(PROG)
    exe = build_c(src, tmp_path / "ac", m32=abi == "m32", extra=("-g",))
    script = f"""probe process("{exe}").mark("mark") {{
    n = & @cast($arg1, "struct node")
    printf("old %d\\n", n->next->v = 77)
    @cast($arg2, "sockaddr_un", "<sys/un.h>")->sun_path[1] = 88
}}"""
    res = run_pydyn(cache, "-g", "-e", script, "-c", str(exe))
    assert res.returncode == 0, res.stderr
    assert "old 77\n" in res.stdout and " next=77 " in res.stdout, res.stdout + res.stderr
    assert " path1=88 " in res.stdout, res.stdout
    res = run_pydyn(cache, "-p2", "-e", script)
    assert res.returncode == 1 and "write not permitted; need stap -g" in res.stderr, \
        res.stderr
