"""stap's token-level preprocessor: arguments, macros, conditionals.

Three layers, in stap's order (parse.cxx `lexer::scan`, `scan_pp1`, `scan_pp`):

1. Command-line arguments: `$N` becomes the tokens of argument N, `@N` a
   string literal, `$#`/`@#` the argument count.  A missing argument is only
   an error where the reference survives preprocessing, so
   `%( $# > 0 %? $1 %: 10 %)` works without arguments.
2. Macros: `@define name(a, b) %( body %)` and `@name(x, y)`; inside a body a
   parameter is `@a`.  Unknown `@words` pass through (they are `@count`,
   `@cast` ...).
3. Conditionals: `%( COND %? THEN %: ELSE %)`, nestable, where COND is
   `LEFT OP RIGHT` terms joined by `&&`/`||`.

`Preprocessor` is an iterator over the surviving tokens; it raises ScriptError
for a problem as the parser reaches it, so errors come in source order.
"""

from __future__ import annotations

import fnmatch
import platform
from collections.abc import Iterator
from dataclasses import dataclass, field

from ..errors import ScriptError
from .lexer import Kind, Token, parse_number, to_int64, tokenize_argument

# Bounds that keep a recursive or exponential macro from hanging the parser.
MAX_MACRO_DEPTH = 200
MAX_MACRO_TOKENS = 500_000


@dataclass(frozen=True, slots=True)
class Config:
    """What the conditions `arch`, `runtime`, `kernel_v` ... compare against."""

    args: tuple[str, ...] = ()
    arch: str = "x86_64"
    runtime: str = "dyninst"
    # `uname -r` of the host, as stap's session.kernel_release.
    kernel_release: str = field(default_factory=platform.release)
    systemtap_version: str = "5.5"  # the stap release pydyn's language follows
    privilege: str = "stapdev"  # pydyn runs with the user's own rights, unrestricted
    guru: bool = False          # -g

    @property
    def kernel_base_release(self) -> str:
        return self.kernel_release.split("-", 1)[0]


@dataclass(slots=True)
class _Macro:
    name: Token
    params: tuple[str, ...]
    body: list[Token]
    library: bool = False   # from a macro library (.stpm): sees only library macros


@dataclass(slots=True)
class _Binding:
    """A macro parameter: its tokens and the parameters visible where they were written."""

    tokens: list[Token]
    env: dict[str, _Binding]
    library: bool = False   # written inside a library macro's body


@dataclass(slots=True)
class _Frame:
    """One source of raw tokens: the file, a macro body, a parameter, an argument."""

    tokens: list[Token]
    env: dict[str, _Binding]
    is_file: bool = False
    is_argument: bool = False
    pos: int = 0
    library: bool = False   # a library macro's body (or an argument written in one)


class Preprocessor:
    def __init__(self, tokens: list[Token], config: Config,
                 library: dict[str, _Macro] | None = None) -> None:
        self.config = config
        # the macros of the macro libraries (.stpm, library_macros()): the script's own
        # @define of a name hides one, as in stap
        self.library = library or {}
        self.eof = tokens[-1]
        assert self.eof.kind is Kind.EOF
        self.frames: list[_Frame] = [_Frame(tokens[:-1], {}, is_file=True)]
        self.macros: dict[str, _Macro] = {}
        self.expanded = 0  # tokens produced by macro bodies, against MAX_MACRO_TOKENS
        # Open conditionals: the `%(` token and whether we are in its else part.
        self.conds: list[tuple[Token, bool]] = []

    def __iter__(self) -> Iterator[Token]:
        return self

    # -- layer 1: raw tokens from the frame stack --------------------------

    def _raw(self, cross_frames: bool = True) -> Token | None:
        """The next raw token; None at the end of input (or of the current frame)."""
        while True:
            frame = self.frames[-1]
            if frame.pos < len(frame.tokens):
                tok = frame.tokens[frame.pos]
                frame.pos += 1
                return tok
            if frame.is_file or not cross_frames:
                return None
            self.frames.pop()

    # -- layer 2: arguments and macros --------------------------------------

    def _pp1(self, skipping: bool = False) -> Token | None:
        """The next token after argument and macro expansion.

        When `skipping` (inside a false conditional branch) nothing is
        expanded or defined, but macro frames still end normally.
        """
        while True:
            tok = self._raw()
            if tok is None:
                return None
            if skipping:
                if tok.kind is Kind.JUNK and tok.fatal:
                    raise tok.error()
                return tok
            if tok.kind is Kind.ARG:
                self._substitute_argument(tok)
                continue
            if tok.kind is Kind.AT:
                if tok.text == "@define":
                    self._define(tok)
                    continue
                if self._invoke(tok):
                    continue
            return tok

    def _substitute_argument(self, tok: Token) -> None:
        if self.frames[-1].is_argument:
            raise ScriptError("invalid nested substitution of command line arguments", tok.loc)
        args = self.config.args
        sigil, rest = tok.text[0], tok.text[1:]
        if rest == "#":
            value = str(len(args))
        else:
            index = int(rest)
            if index == 0 or index > len(args):
                given = "no arguments were given" if not args else (
                    f"only {len(args)} argument{'s' if len(args) != 1 else ''} given")
                raise ScriptError(f"command line argument {tok.text} not given", tok.loc,
                                  hint=f"arguments are numbered from 1; {given}")
            value = args[index - 1]
        if sigil == "@":
            new = [Token(Kind.STRING, value, tok.loc, tok.ws_before)]
        else:
            new = tokenize_argument(value, tok)
            for t in new:
                if t.kind is Kind.JUNK:
                    raise ScriptError(f"in command line argument {tok.text}: {t.text}",
                                      tok.loc)
        self.frames.append(_Frame(new, self.frames[-1].env, is_argument=True))

    def _define(self, at: Token) -> None:
        if not self.frames[-1].is_file:
            raise ScriptError("'@define' is not allowed inside a macro body", at.loc)
        name = self._raw(cross_frames=False)
        if name is None or name.kind is not Kind.IDENT:
            raise ScriptError("expected a macro name after '@define'",
                              (name or self.eof).loc)
        if name.text == "define":
            raise ScriptError("attempt to redefine '@define'", name.loc)
        if name.text in self.macros:
            first = self.macros[name.text].name.loc
            raise ScriptError(f"attempt to redefine macro '@{name.text}'", name.loc,
                              hint=f"first defined at {first}")
        params: list[str] = []
        tok = self._raw(cross_frames=False)
        if tok is not None and tok.is_op("("):
            while True:
                p = self._raw(cross_frames=False)
                if p is None or p.kind is not Kind.IDENT:
                    raise ScriptError("expected a macro parameter name",
                                      (p or self.eof).loc)
                if p.text in params:
                    raise ScriptError(f"duplicate macro parameter '{p.text}'", p.loc)
                params.append(p.text)
                sep = self._raw(cross_frames=False)
                if sep is not None and sep.is_op(","):
                    continue
                if sep is not None and sep.is_op(")"):
                    break
                raise ScriptError("expected ',' or ')' in macro parameter list",
                                  (sep or self.eof).loc)
            tok = self._raw(cross_frames=False)
        if tok is None or not tok.is_op("%("):
            raise ScriptError(f"expected '%(' to start the body of macro '@{name.text}'",
                              (tok or self.eof).loc)
        body: list[Token] = []
        depth = 0
        while True:
            t = self._raw(cross_frames=False)
            if t is None:
                raise ScriptError(f"incomplete definition of macro '@{name.text}': "
                                  "missing '%)'", name.loc)
            if t.is_op("%("):
                depth += 1
            elif t.is_op("%)"):
                if depth == 0:
                    break
                depth -= 1
            body.append(t)
        self.macros[name.text] = _Macro(name, tuple(params), body)

    def _invoke(self, at: Token) -> bool:
        """Expand `at` if it names a parameter or macro; False if it is an @-operator."""
        name = at.text[1:]
        env = self.frames[-1].env
        in_library = self.frames[-1].library
        if name in env:
            binding = env[name]
            self._push(_Frame(binding.tokens, binding.env, library=binding.library), at,
                       len(binding.tokens))
            return True
        macro = None if in_library else self.macros.get(name)
        if macro is None:
            macro = self.library.get(name)
        if macro is None:
            return False
        new_env: dict[str, _Binding] = {}
        if macro.params:
            n = len(macro.params)
            plural = "s" if n != 1 else ""
            open_ = self._raw(cross_frames=False)
            if open_ is None or not open_.is_op("("):
                raise ScriptError(f"expected '(' in invocation of macro '@{name}' taking "
                                  f"{n} parameter{plural}", (open_ or self.eof).loc)
            for i, pname in enumerate(macro.params):
                tokens, sep = self._slurp_param()
                if sep is None:
                    raise ScriptError(f"could not find the end of the invocation of "
                                      f"macro '@{name}'", at.loc)
                if sep.is_op(",") and i + 1 == n:
                    raise ScriptError(f"too many parameters for macro '@{name}' "
                                      f"(expected {n})", sep.loc)
                if sep.is_op(")") and i + 1 != n:
                    raise ScriptError(f"too few parameters for macro '@{name}' "
                                      f"(expected {n})", sep.loc)
                new_env[pname] = _Binding(tokens, env, in_library)
        self._push(_Frame(macro.body, new_env, library=macro.library), at, len(macro.body))
        return True

    def _push(self, frame: _Frame, at: Token, size: int) -> None:
        if len(self.frames) > MAX_MACRO_DEPTH:
            raise ScriptError("macro expansion nested too deeply (recursive macro?)", at.loc)
        self.expanded += size
        if self.expanded > MAX_MACRO_TOKENS:
            raise ScriptError("macro expansion too large (recursive macro?)", at.loc)
        self.frames.append(frame)

    def _slurp_param(self) -> tuple[list[Token], Token | None]:
        """One macro argument: tokens up to an unbracketed ',' or ')', and that token."""
        tokens: list[Token] = []
        depth = 0
        while True:
            t = self._raw(cross_frames=False)
            if t is None:
                return tokens, None
            if t.is_op("(", "["):
                depth += 1
            elif depth and t.is_op(")", "]"):
                depth -= 1
            elif not depth and t.is_op(")", ","):
                return tokens, t
            tokens.append(t)

    # -- layer 3: conditionals ----------------------------------------------

    def __next__(self) -> Token:
        while True:
            tok = self._pp1()
            if tok is None:
                if self.conds:
                    start = self.conds[-1][0]
                    raise ScriptError("unterminated conditional: missing '%)' for this '%('",
                                      start.loc)
                return self.eof
            if tok.kind is Kind.JUNK:
                raise tok.error()
            if tok.kind is not Kind.OP or tok.text not in ("%(", "%?", "%:", "%)"):
                return tok
            if tok.text == "%?":
                raise ScriptError("'%?' without a matching '%('", tok.loc)
            if tok.text == "%:":
                if not self.conds:
                    raise ScriptError("'%:' without a matching '%('", tok.loc)
                start, in_else = self.conds[-1]
                if in_else:
                    raise ScriptError("duplicate '%:' in conditional", tok.loc)
                # We were keeping the THEN part, so the ELSE part is skipped.
                self.conds[-1] = (start, True)
                self._skip(start, in_then=False)
                continue
            if tok.text == "%)":
                if not self.conds:
                    raise ScriptError("'%)' without a matching '%('", tok.loc)
                self.conds.pop()
                continue
            # "%(": evaluate, then keep or skip the THEN part.
            if self._condition(tok):
                self.conds.append((tok, False))
            else:
                self.conds.append((tok, False))
                self._skip(tok, in_then=True)

    def _skip(self, start: Token, in_then: bool) -> None:
        """Drop tokens up to this conditional's `%:` (when in THEN) or `%)`."""
        depth = 0
        while True:
            t = self._pp1(skipping=True)
            if t is None:
                raise ScriptError("unterminated conditional: missing '%)' for this '%('",
                                  start.loc)
            if t.is_op("%("):
                depth += 1
            elif depth and t.is_op("%)"):
                depth -= 1
            elif not depth and t.is_op("%)"):
                self.conds.pop()
                return
            elif not depth and t.is_op("%:"):
                if not in_then:
                    raise ScriptError("duplicate '%:' in conditional", t.loc)
                self.conds[-1] = (start, True)
                return  # keep the ELSE part
            elif not depth and t.is_op("%?"):
                raise ScriptError("'%?' without a matching '%('", t.loc)

    def _condition(self, start: Token) -> bool:
        """Evaluate `L OP R [&&|| L OP R]...` up to and including the `%?`."""
        result = False
        conj = True
        while True:
            terms: list[Token] = []
            for _ in range(3):
                t = self._pp1()
                if t is None:
                    raise ScriptError("incomplete condition after '%('", start.loc)
                if t.kind is Kind.JUNK:
                    raise t.error()
                if t.is_op("%(", "%?", "%:", "%)"):
                    raise ScriptError(f"incomplete condition: expected 'LEFT OP RIGHT' "
                                      f"but found '{t.text}'", t.loc)
                terms.append(t)
            conj = self._term(*terms) and conj
            n = self._pp1()
            if n is not None and n.kind is Kind.JUNK:
                raise n.error()
            if n is not None and n.is_op("&&"):
                continue
            result = result or conj
            conj = True
            if n is not None and n.is_op("||"):
                continue
            if n is None or not n.is_op("%?"):
                found = n.describe() if n is not None else "end of input"
                raise ScriptError(f"expected '&&', '||' or '%?' in conditional but found "
                                  f"{found}", (n or self.eof).loc)
            return result

    def _term(self, left: Token, op: Token, right: Token) -> bool:
        cfg = self.config
        if not op.is_op("==", "!=", "<", "<=", ">", ">="):
            raise ScriptError(f"expected a comparison operator but found {op.describe()}",
                              op.loc)
        equality = op.text in ("==", "!=")
        if left.kind is Kind.IDENT and left.text in ("arch", "runtime", "systemtap_privilege"):
            target = {"arch": cfg.arch, "runtime": cfg.runtime,
                      "systemtap_privilege": cfg.privilege}[left.text]
            rhs = _expect_string(right)
            if not equality:
                raise ScriptError(f"expected '==' or '!=' after '{left.text}'", op.loc)
            matched = (fnmatch.fnmatchcase(target, rhs) if left.text != "systemtap_privilege"
                       else target == rhs)
            return matched == (op.text == "==")
        if left.kind is Kind.IDENT and left.text in ("kernel_v", "kernel_vr", "systemtap_v"):
            target = {"kernel_v": cfg.kernel_base_release, "kernel_vr": cfg.kernel_release,
                      "systemtap_v": cfg.systemtap_version}[left.text]
            rhs = _expect_string(right)
            if any(c in rhs for c in "*?["):
                if not equality:
                    raise ScriptError("wildcard not allowed with order comparison operators",
                                      op.loc)
                return fnmatch.fnmatchcase(target, rhs) == (op.text == "==")
            return _compare(strverscmp(target, rhs), 0, op.text)
        if left.kind is Kind.IDENT and left.text == "guru_mode":
            value = _number(right)
            if value not in (0, 1):
                raise ScriptError("expected 0 or 1 after 'guru_mode'", right.loc)
            if not equality:
                raise ScriptError("expected '==' or '!=' after 'guru_mode'", op.loc)
            return _compare(int(cfg.guru), value, op.text)
        if left.kind is Kind.IDENT and left.text.startswith("CONFIG_"):
            # There is no kernel configuration for a user-space runtime: every
            # option reads as unset (""), as stap's empty kernel_config would; against a
            # number that is 0 (stap's strtoll of "" converts nothing, without an error).
            if right.kind is Kind.STRING:
                if not equality:
                    raise ScriptError("expected '==' or '!=' after a CONFIG_ option", op.loc)
                return fnmatch.fnmatchcase("", right.text) == (op.text == "==")
            if right.kind is Kind.NUMBER:
                return _compare(0, _number(right), op.text)
            if right.kind is Kind.IDENT and right.text.startswith("CONFIG_"):
                return _compare("", "", op.text)
            raise ScriptError("expected a string, number or CONFIG_ option after "
                              f"{left.text}", right.loc)
        if left.kind is Kind.STRING and right.kind is Kind.STRING:
            return _compare(left.text, right.text, op.text)
        if left.kind is Kind.NUMBER and right.kind is Kind.NUMBER:
            return _compare(_number(left), _number(right), op.text)
        if left.kind is Kind.STRING and right.kind is Kind.NUMBER:
            raise ScriptError("expected a string literal to compare with a string", right.loc)
        if left.kind is Kind.NUMBER and right.kind is Kind.STRING:
            raise ScriptError("expected a number literal to compare with a number", right.loc)
        raise ScriptError(
            f"expected 'arch', 'runtime', 'kernel_v', 'kernel_vr', 'systemtap_v', "
            f"'systemtap_privilege', 'guru_mode', 'CONFIG_...', a string or a number in "
            f"conditional but found {left.describe()}", left.loc)


def _expect_string(tok: Token) -> str:
    if tok.kind is not Kind.STRING:
        raise ScriptError(f"expected a string literal but found {tok.describe()}", tok.loc)
    return tok.text


def _number(tok: Token) -> int:
    if tok.kind is not Kind.NUMBER:
        raise ScriptError(f"expected a number but found {tok.describe()}", tok.loc)
    value = parse_number(tok.text)
    if value is None:
        raise ScriptError(f"invalid number {tok.describe()}", tok.loc)
    return to_int64(value)


def _compare(a: int | str, b: int | str, op: str) -> bool:
    if op == "==":
        return a == b
    if op == "!=":
        return a != b
    if op == "<":
        return a < b  # type: ignore[operator]
    if op == "<=":
        return a <= b  # type: ignore[operator]
    if op == ">":
        return a > b  # type: ignore[operator]
    return a >= b  # type: ignore[operator]


def strverscmp(a: str, b: str) -> int:
    """Version-aware string order like glibc strverscmp(3), as -1/0/1.

    Runs of digits compare numerically ("2.6.9" < "2.6.10"); a run with a
    leading zero compares digit-wise, as a fraction ("1.01" < "1.1").  glibc's
    finer ordering of all-zero runs is not reproduced; versions do not use them.
    """
    i = j = 0
    while i < len(a) and j < len(b):
        if a[i].isdigit() and b[j].isdigit():
            ei, ej = i, j
            while ei < len(a) and a[ei].isdigit():
                ei += 1
            while ej < len(b) and b[ej].isdigit():
                ej += 1
            ra, rb = a[i:ei], b[j:ej]
            if ra[0] == "0" or rb[0] == "0":
                # A run with leading zeros is a fraction: digit-wise order.
                if ra != rb:
                    return -1 if ra < rb else 1
            elif int(ra) != int(rb):
                return -1 if int(ra) < int(rb) else 1
            i, j = ei, ej
            continue
        if a[i] != b[j]:
            return -1 if a[i] < b[j] else 1
        i += 1
        j += 1
    rest_a, rest_b = len(a) - i, len(b) - j
    return (rest_a > rest_b) - (rest_a < rest_b)


Macro = _Macro   # what library_macros() gives, for Preprocessor(library=)


def library_macros(tokens: list[Token], config: Config) -> dict[str, _Macro]:
    """The macros a macro library file (.stpm) defines; ScriptError if anything else
    survives its preprocessing, as stap's parse_library_macros refuses it."""
    pp = Preprocessor(tokens, config)
    tok = next(pp)
    if tok.kind is not Kind.EOF:
        raise ScriptError(f"unexpected token in library macro file '{tok.loc.file}'", tok.loc)
    return {name: _Macro(m.name, m.params, m.body, True) for name, m in pp.macros.items()}


def preprocess(tokens: list[Token], config: Config) -> Iterator[Token]:
    """The tokens that survive preprocessing, ending with (repeated) EOF."""
    return Preprocessor(tokens, config)

