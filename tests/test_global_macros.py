"""stap's STAP_GLOBAL_GET_NAME / STAP_GLOBAL_SET_NAME in guru C (`-g`): a global named
in a `pragma:read` / `pragma:write` comment is read and written by the script's own
C, from a guru function and from `%{ %}` in a handler; a scalar or an array (the keys
first), long or string; a value of the wrong C type does not compile.  Checked on a
real process, m64 and m32."""

from __future__ import annotations

from pathlib import Path

from cbuild import PROGS, abi_program_fixture, run_pydyn

target = abi_program_fixture(PROGS / "error_chain.c", "global_macros")

SCRIPT = """\
global hits, names[10], total, last = ""
function count(n:long) %{
  /* pragma:read:hits */ /* pragma:write:hits */ /* pragma:write:names */
  STAP_GLOBAL_SET_hits(STAP_GLOBAL_GET_hits() + 1);
  STAP_GLOBAL_SET_names(STAP_ARG_n, "tick", STAP_ARG_n * 10);
%}
function value_of:long(n:long) %{
  /* pragma:read:names */
  STAP_RETURN(STAP_GLOBAL_GET_names(STAP_ARG_n, "tick"));
%}
probe process("EXE").mark("tick") {
  count($arg1)
  %{ /* pragma:write:last */ STAP_GLOBAL_SET_last("seen") %}
  total += %{ /* pragma:read:names */ STAP_GLOBAL_GET_names(2, "tick") %}
}
probe end {
  printf("hits=%d total=%d last=%s %d %d\\n", hits, total, last,
         names[1, "tick"], value_of(2))
}
"""


def test_global_macros_read_and_write(target: Path, cache: Path) -> None:
    res = run_pydyn(cache, "-g", "-e", SCRIPT.replace("EXE", str(target)),
                    "-c", str(target))
    assert res.returncode == 0, res.stderr
    # hit 2 reads names[2] after count(2) wrote it: 20; hits 0 and 1 read 0
    assert res.stdout == "hits=3 total=20 last=seen 10 20\n", res.stdout + res.stderr


def test_global_macro_of_the_wrong_type_does_not_compile(cache: Path) -> None:
    script = ('global var function write() %{ /* pragma:write:var */ '
              'STAP_GLOBAL_SET_var("text"); %} probe begin { var = 1; write(); println(var) }')
    res = run_pydyn(cache, "-g", "-p4", "-e", script)
    assert res.returncode == 1
    assert "module failed to compile" in res.stderr and "Traceback" not in res.stderr
