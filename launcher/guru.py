"""Guru mode (`-g`): embedded C and `set_user_*` writes into the target.

Without `-g` the parser refuses `%{ %}` and the translator refuses
`set_user_*`.  With it:

- a top-level `%{ ... %}` is copied into the generated C after the runtime's
  includes (both ABIs compile it);
- `function f:long (x:long) %{ ... %}` becomes a C function whose body sees
  stap's macros: `STAP_ARG_x`, `STAP_RETVALUE`, `STAP_RETURN(v)`,
  `STAP_ERROR(fmt, ...)`, `CONTEXT` (`CONTEXT->last_error = "msg"` fails the
  call with msg, as in stap), the older `THIS->x` / `THIS->__retvalue`, and the
  memory macros `kread`/`uread`, `kwrite`/`uwrite`, `DEREF_FAULT`,
  `STORE_DEREF_FAULT`, `CATCH_DEREF_FAULT()` (a fault is an error);
- `%{ expr %}` inside an expression is a long;
- `set_user_char/short/int/long/pointer/int8..uint64(addr, v)` and
  `set_user_string(addr, s)` write through `pd_set_user*` (runtime/pd_string.c,
  `process_vm_writev` on the process itself): an unmapped or read-only address
  is a counted error, never a crash.
"""

from __future__ import annotations

from typing import Any

# set_user_NAME -> bytes written (0: a C long, None: a string with its NUL)
SET_USER: dict[str, int | None] = {
    "set_user_char": 1, "set_user_short": 2, "set_user_int": 4, "set_user_long": 0,
    "set_user_pointer": 0, "set_user_int8": 1, "set_user_uint8": 1, "set_user_int16": 2,
    "set_user_uint16": 2, "set_user_int32": 4, "set_user_uint32": 4, "set_user_int64": 8,
    "set_user_uint64": 8, "set_user_ushort": 2, "set_user_uint": 4, "set_user_string": None,
}


def set_user_params(name: str) -> tuple[str, ...]:
    return ("long", "string") if SET_USER[name] is None else ("long", "long")


def set_user_c(name: str, args: list[str], where: str) -> str:
    size = SET_USER[name]
    if size is None:
        call = f"pd_set_user_string(c, {args[0]}, {args[1]})"
    else:
        call = f"pd_set_user(c, {args[0]}, {args[1]}, {size or 'sizeof(long)'})"
    return f"(c->where = {where}, {call})"


def embedded_is_string(code: str) -> bool:
    """`%{ /* string */ "text" %}`: stap's pragma for an embedded expression whose value
    is a string (a `const char *`); any other is a long."""
    return "/* string */" in code


def embedded_is_pure(code: str) -> bool:
    """`/* pure */`: the expression has no side effects, so it may be folded away."""
    return "/* pure */" in code


def pragma_globals(code: str, kind: str) -> list[str]:
    """The globals embedded C names in `/* pragma:read:NAME */` (kind "read") or
    `/* pragma:write:NAME */` ("write"), as stap's symbol resolution reads them."""
    names, tag, pos = [], f"/* pragma:{kind}:", 0
    while (pos := code.find(tag, pos)) >= 0:
        end = code.find(" */", pos + len(tag))
        if end < 0:
            break
        names.append(code[pos + len(tag):end])
        pos = end + 3
    return names


def embedded_expr_c(code: str) -> str:
    if embedded_is_string(code):
        return f"((const char *)({code}))"
    return f"((int64_t)({code}))"


def toplevel_c(script: Any) -> list[str]:
    """The C a guru script adds before the handlers: helpers, then its `%{ %}` blocks."""
    from .script import ast
    if not script.embedded and not any(isinstance(f.body, ast.Embedded)
                                       for f in script.functions):
        return []
    out = list(_STRL)
    for b in script.embedded:
        out += [f"/* embedded C at {b.loc.file}:{b.loc.line} */", b.code, ""]
    return out


# glibc 2.36 has no strlcpy/strlcat, which stap's embedded C uses for strings.
_STRL = ["static inline size_t pd_guru_strlcpy(char *d, const char *s, size_t n)",
         "{ size_t l = strlen(s); if (n) { size_t k = l < n - 1 ? l : n - 1; "
         "memcpy(d, s, k); d[k] = 0; } return l; }",
         "static inline size_t pd_guru_strlcat(char *d, const char *s, size_t n)",
         "{ size_t l = strnlen(d, n); return l == n ? n + strlen(s) : "
         "l + pd_guru_strlcpy(d + l, s, n - l); }",
         "#define strlcpy pd_guru_strlcpy", "#define strlcat pd_guru_strlcat",
         "/* stap's module entry point: embedded C may take its address */",
         "static int systemtap_module_init(void) { return 0; }", ""]


# stap's memory access macros of embedded C, as its dyninst runtime has them (kread is
# uread there: the "kernel" is the process itself); a fault is the function's error
_DEREF = [
    "#define DEREF_FAULT(addr) do { pd_error(c, \"read fault [man error::fault] at 0x%lx\", "
    "(unsigned long)(uintptr_t)(addr)); goto out; } while (0)",
    "#define STORE_DEREF_FAULT(addr) do { pd_error(c, \"write fault [man error::fault] at "
    "0x%lx\", (unsigned long)(uintptr_t)(addr)); goto out; } while (0)",
    "#define CATCH_DEREF_FAULT() do { } while (0)",
    "#define uread(ptr) ({ char r_[sizeof(*(ptr))] __attribute__((aligned(16))); "
    "if (pd_read_self(r_, (const void *)(ptr), sizeof(r_)) != (ssize_t)sizeof(r_)) "
    "DEREF_FAULT(ptr); *(__typeof__(*(ptr)) *)(void *)r_; })",
    "#define uwrite(ptr, value) ({ __typeof__(*(ptr)) w_; int64_t b_ = 0; "
    "w_ = (__typeof__(*(ptr)))(value); memcpy(&b_, (const void *)&w_, sizeof(w_)); "
    "pd_set_user(c, (int64_t)(uintptr_t)(ptr), b_, sizeof(w_)); "
    "if (c->error) goto out; })",
    "#define kread(ptr) uread(ptr)", "#define kwrite(ptr, value) uwrite(ptr, value)"]


def function_entry(give_up: str = "return ret;") -> list[str]:
    """A script function's C prologue: the MAXNESTING check, then the caller's `where`
    (the call site, emit.call) kept.  Over MAXNESTING the error is the caller's, near
    its call, as in stap (its check comes before the callee's frame exists)."""
    return ["    if (c->nesting >= MAXNESTING) {",
            "        pd_error(c, \"MAXNESTING exceeded\");",
            f"        {give_up}", "    }",
            "    c->nesting++;",
            "    const char *caller_ = c->where;"]


def function_exit() -> list[str]:
    """Its epilogue, at `out:`: an error names the call site in its call chain, a
    success gives the caller back its `where` (the call), as stap clears the frame."""
    return ["    if (PD_UNLIKELY(c->error)) pd_error_caller(c, caller_);",
            "    else c->where = caller_;",
            "    c->nesting--;"]


def embedded_function_c(signature: str, params: list[tuple[str, str]], ret: str | None,
                        code: str, where: str, prelude: list[str]) -> list[str]:
    """A guru function: `THIS` holds the arguments and `__retvalue`, as in stap;
    `prelude` (its temporaries, its STAP_GLOBAL_* macros) comes before its code."""
    members = [f"const char *{n};" if t == "string" else f"int64_t {n};" for n, t in params]
    members.append("char __retvalue[MAXSTRINGLEN];" if ret == "string"
                   else "int64_t __retvalue;")
    init = ", ".join([f"a_{n}" for n, _t in params] + (['""'] if ret == "string" else ["0"]))
    macros = [f"#define STAP_ARG_{n} (THIS->{n})" for n, _t in params]
    macros += ["#define THIS (&this_)", "#define CONTEXT c",
               "#define STAP_RETVALUE (THIS->__retvalue)",
               "#define STAP_RETURN(v) do { STAP_RETVALUE = (v); goto out; } while (0)"
               if ret != "string" else
               "#define STAP_RETURN(v) do { strlcpy(STAP_RETVALUE, (v), MAXSTRINGLEN); "
               "goto out; } while (0)",
               "#define STAP_ERROR(...) do { pd_error(c, __VA_ARGS__); goto out; } while (0)",
               *_DEREF]
    undefs = [f"#undef {m.split()[1].split('(')[0]}" for m in macros]
    result = ("    pd_strcpy(ret, this_.__retvalue);\n    return ret;" if ret == "string"
              else "    return this_.__retvalue;")
    return ["", signature, "{",
            f"    struct {{ {' '.join(members)} }} this_ = {{{init}}};",
            *function_entry(result.replace("\n", "")),
            f"    c->where = {where};",
            "    c->last_error = NULL;",
            *prelude, *macros, "    {", code, "    }", *undefs,
            "    goto out;",   # a body that never jumps there still uses the label
            "out:",
            "    if (c->last_error && !c->error)",
            '        pd_error(c, "%s", c->last_error);',
            *function_exit(), result, "}"]
