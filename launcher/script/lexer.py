"""Tokenizer for SystemTap scripts.

Follows the lexical rules of stap's `lexer::scan` (parse.cxx): identifiers may
start with `$` or `@` and contain `$`; numbers are a digit followed by any
alphanumerics (validated later, like stap's strtoull check); `#`, `//` and
`/* */` are comments; `%{ ... %}` is one embedded-code token.

Lexical errors do not raise here.  They become JUNK tokens carrying their
message, because stap only reports them if the token survives preprocessing:
an unterminated string inside a skipped `%( ... %)` branch is not an error.
Junk that swallows the rest of the input (an unterminated comment or `%{`) is
`fatal` and is reported even when skipped.

Command-line argument references (`$1`, `@1`, `$#`, `@#`) become ARG tokens;
the preprocessor substitutes them, again only where they survive.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ..errors import ScriptError, SourceLocation


class Kind(enum.Enum):
    IDENT = "identifier"
    KEYWORD = "keyword"
    NUMBER = "number"
    STRING = "string"
    OP = "operator"
    AT = "@-operator"  # @count, @hist_log, @define, macro invocations ...
    EMBEDDED = "embedded code"
    ARG = "argument"  # $1 @1 $# @#
    JUNK = "junk"
    EOF = "end of input"


KEYWORDS = frozenset({
    "probe", "global", "private", "function", "if", "else", "for", "foreach", "in",
    "limit", "return", "delete", "while", "break", "continue", "next", "string", "long",
    "try", "catch",
})

_OPS3 = frozenset({"<<<", ">>>", "<<=", ">>="})
_OPS2 = frozenset({
    "==", "!=", "<=", ">=", "=~", "!~", "+=", "-=", "*=", "/=", "%=", "&=", "^=", "|=",
    ".=", "&&", "||", "++", "--", "->", "<<", ">>", "%(", "%?", "%:", "%)",
})
# Single punctuation characters stap's grammar uses somewhere.  stap lexes any
# ASCII punctuation as an operator; these others can never be valid, so saying
# so at the lexer gives a clearer message than a parse error would.
_OPS1 = frozenset("!%&()*+,-./:;<=>?[]^{|}~")

_WHITESPACE = frozenset(" \t\n\v\f\r")
_DIGITS = frozenset("0123456789")
_ALPHA = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_IDENT_START = _ALPHA | frozenset("_$@")
_IDENT_CONT = _ALPHA | _DIGITS | frozenset("_$")
_ALNUM = _ALPHA | _DIGITS
_HEX = frozenset("0123456789abcdefABCDEF")
_OCT = frozenset("01234567")
_SIMPLE_ESCAPES = {"a": "\a", "b": "\b", "t": "\t", "n": "\n", "v": "\v", "f": "\f",
                   "r": "\r", "\\": "\\", '"': '"'}


@dataclass(frozen=True, slots=True)
class Token:
    kind: Kind
    # IDENT/KEYWORD/OP/AT/NUMBER/ARG: the source spelling.  STRING: the decoded
    # value (see `decode_bytes`).  EMBEDDED: the code.  JUNK: the error message.
    text: str
    loc: SourceLocation
    # Whitespace or a comment came right before this token; stap uses this to
    # glue `foo*bar` probe-point components back together.
    ws_before: bool = False
    fatal: bool = False  # JUNK only: reported even inside a skipped conditional
    # A comment came right before this token: stap before 2.0 (--compatible) joins
    # adjacent string literals only where none separates them.
    comment_before: bool = False

    def describe(self) -> str:
        """The token as an error message names it: `'foo'`, `"str"`, `end of input`."""
        if self.kind is Kind.EOF:
            return "end of input"
        if self.kind is Kind.STRING:
            return "string " + quote(self.text)
        if self.kind is Kind.EMBEDDED:
            return "embedded code '%{'"
        return f"'{self.text}'"

    def is_op(self, *ops: str) -> bool:
        return self.kind is Kind.OP and self.text in ops

    def is_kw(self, *words: str) -> bool:
        return self.kind is Kind.KEYWORD and self.text in words

    def error(self) -> ScriptError:
        """The ScriptError a JUNK token stands for."""
        return ScriptError(self.text, self.loc)


def quote(value: str, octal: bool = False) -> str:
    """`value` as a double-quoted, escaped string, for messages; with `octal`, control
    characters and bytes as `\\ooo`, which lexes back to `value` (a `\\x` escape
    takes every hex digit that follows)."""
    out = []
    for ch in value:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20 or 0xDC80 <= ord(ch) <= 0xDCFF:
            out.append(f"\\{ord(ch) & 0xFF:03o}" if octal else f"\\x{ord(ch) & 0xFF:02x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def decode_bytes(value: str) -> bytes:
    """The exact bytes of a decoded string literal.

    Escapes of bytes >= 0x80 (`\\377`, `\\xff`) are kept as lone surrogates
    U+DC80..U+DCFF, so they survive next to ordinary non-ASCII source text.
    """
    return value.encode("utf-8", "surrogateescape")


def parse_number(text: str) -> int | None:
    """A NUMBER token's value as stap's `strtoull(s, &end, 0)` check accepts it.

    Decimal, `0x` hex or leading-`0` octal, at most 2**64-1; None if invalid.
    The result is unsigned; callers wrap it to int64 like stap's cast does.
    """
    try:
        if len(text) > 1 and text[0] == "0" and text[1] in "xX":
            if len(text) == 2 or not all(c in _HEX for c in text[2:]):
                return None
            value = int(text[2:], 16)
        elif text[0] == "0":
            if not all(c in _OCT for c in text):
                return None
            value = int(text, 8)
        else:
            if not all(c in _DIGITS for c in text):
                return None
            value = int(text, 10)
    except ValueError:
        return None
    return value if value < 1 << 64 else None


def to_int64(value: int) -> int:
    """Wrap an unsigned 64-bit value to signed, as stap's `(int64_t)` cast does."""
    return value - (1 << 64) if value >= 1 << 63 else value


class _Lexer:
    def __init__(self, text: str, filename: str, lines: list[str]) -> None:
        self.text = text
        self.filename = filename
        self.lines = lines
        self.pos = 0
        self.line = 1
        self.col = 1
        self.tokens: list[Token] = []
        self.comment = False   # a comment since the last token

    def loc(self, line: int, col: int) -> SourceLocation:
        return SourceLocation(self.filename, line, col, self.lines[line - 1])

    def advance(self, n: int = 1) -> None:
        end = min(self.pos + n, len(self.text))
        newlines = self.text.count("\n", self.pos, end)
        if newlines:
            self.line += newlines
            self.col = end - self.text.rindex("\n", self.pos, end)
        else:
            self.col += end - self.pos
        self.pos = end

    def peek(self, k: int = 0) -> str:
        i = self.pos + k
        return self.text[i] if i < len(self.text) else ""

    def run(self) -> list[Token]:
        text = self.text
        ws = False
        end_line, end_col = 1, 1  # just past the last token, for the EOF token
        while True:
            # Whitespace and comments
            c = self.peek()
            if c == "":
                break
            if c in _WHITESPACE:
                self.advance()
                ws = True
                continue
            c2 = self.peek(1)
            start_line, start_col = self.line, self.col
            if c == "#" or (c == "/" and c2 == "/"):
                nl = text.find("\n", self.pos)
                self.advance((nl if nl >= 0 else len(text)) - self.pos)
                ws = self.comment = True
                continue
            if c == "/" and c2 == "*":
                close = text.find("*/", self.pos + 2)
                if close < 0:
                    self.emit(Kind.JUNK, "unterminated comment: missing '*/'",
                              start_line, start_col, ws, fatal=True)
                    self.advance(len(text) - self.pos)
                    break
                self.advance(close + 2 - self.pos)
                ws = self.comment = True
                continue
            self.scan_token(c, c2, start_line, start_col, ws)
            ws = self.comment = False
            end_line, end_col = self.line, self.col
        self.tokens.append(Token(Kind.EOF, "", self.loc(end_line, end_col), ws))
        return self.tokens

    def emit(self, kind: Kind, text: str, line: int, col: int, ws: bool,
             fatal: bool = False) -> None:
        self.tokens.append(Token(kind, text, self.loc(line, col), ws, fatal, self.comment))

    def scan_token(self, c: str, c2: str, line: int, col: int, ws: bool) -> None:
        text = self.text
        if c in "$@" and (c2 == "#" or c2 in _DIGITS):
            end = self.pos + 2
            if c2 != "#":
                while end < len(text) and text[end] in _DIGITS:
                    end += 1
            spelling = text[self.pos:end]
            self.advance(end - self.pos)
            self.emit(Kind.ARG, spelling, line, col, ws)
            return
        if c in _IDENT_START:
            end = self.pos + 1
            while end < len(text) and text[end] in _IDENT_CONT:
                end += 1
            word = text[self.pos:end]
            self.advance(end - self.pos)
            if word[0] == "@":
                kind = Kind.AT
            elif word in KEYWORDS:
                kind = Kind.KEYWORD
            else:
                kind = Kind.IDENT
            self.emit(kind, word, line, col, ws)
            return
        if c in _DIGITS:
            end = self.pos + 1
            while end < len(text) and text[end] in _ALNUM:
                end += 1
            word = text[self.pos:end]
            self.advance(end - self.pos)
            self.emit(Kind.NUMBER, word, line, col, ws)
            return
        if c == '"':
            self.scan_string(line, col, ws)
            return
        if c == "%" and c2 == "{":
            close = text.find("%}", self.pos + 2)
            if close < 0:
                self.emit(Kind.JUNK, "unterminated embedded code: missing '%}'",
                          line, col, ws, fatal=True)
                self.advance(len(text) - self.pos)
                return
            code = text[self.pos + 2:close]
            self.advance(close + 2 - self.pos)
            self.emit(Kind.EMBEDDED, code, line, col, ws)
            return
        three = text[self.pos:self.pos + 3]
        two = three[:2]
        if three in _OPS3:
            op = three
        elif two in _OPS2:
            op = two
        elif c in _OPS1:
            op = c
        else:
            self.advance()
            if c.isprintable() and c.isascii():
                msg = f"unknown operator '{c}'"
            else:
                msg = f"invalid character U+{ord(c):04X} in script"
            self.emit(Kind.JUNK, msg, line, col, ws)
            return
        self.advance(len(op))
        self.emit(Kind.OP, op, line, col, ws)

    def scan_string(self, line: int, col: int, ws: bool) -> None:
        text = self.text
        self.advance()  # opening quote
        out: list[str] = []
        bad: tuple[str, int, int] | None = None  # first bad escape: message, line, col
        while True:
            c = self.peek()
            if c == "" or c == "\n":
                # Like stap, a string may not span lines (unless the newline is escaped).
                self.emit(Kind.JUNK, "unterminated string literal", line, col, ws)
                return
            if c == '"':
                self.advance()
                break
            if c != "\\":
                # Copy a run of ordinary characters at once.
                end = self.pos
                while end < len(text) and text[end] not in '"\\\n':
                    end += 1
                out.append(text[self.pos:end])
                self.advance(end - self.pos)
                continue
            esc_line, esc_col = self.line, self.col
            e = self.peek(1)
            if e == "":
                self.advance()
                continue  # reported as unterminated on the next turn
            if e in _SIMPLE_ESCAPES:
                out.append(_SIMPLE_ESCAPES[e])
                self.advance(2)
            elif e in _OCT:
                end = self.pos + 1
                while end < len(text) and end < self.pos + 4 and text[end] in _OCT:
                    end += 1
                value = int(text[self.pos + 1:end], 8)
                self.advance(end - self.pos)
                if value > 0xFF and bad is None:
                    bad = ("octal escape sequence out of range", esc_line, esc_col)
                out.append(_byte_char(value & 0xFF))
            elif e == "x":
                end = self.pos + 2
                while end < len(text) and text[end] in _HEX:
                    end += 1
                digits = text[self.pos + 2:end]
                self.advance(end - self.pos)
                if not digits:
                    if bad is None:
                        bad = ("\\x used with no following hex digits", esc_line, esc_col)
                    continue
                value = int(digits, 16)
                if value > 0xFF and bad is None:
                    bad = ("hex escape sequence out of range", esc_line, esc_col)
                out.append(_byte_char(value & 0xFF))
            else:
                # stap drops the backslash of an unknown escape (including an
                # escaped newline, which stays in the string).
                out.append(e)
                self.advance(2)
        if bad is not None:
            msg, bl, bc = bad
            self.emit(Kind.JUNK, msg, bl, bc, ws)
            return
        self.emit(Kind.STRING, "".join(out), line, col, ws)


def _byte_char(value: int) -> str:
    return chr(value) if value < 0x80 else chr(0xDC00 + value)


def split_lines(text: str) -> list[str]:
    """The source lines as SourceLocation.source_line shows them (no line ends)."""
    return [line[:-1] if line.endswith("\r") else line for line in text.split("\n")]


def tokenize(text: str, filename: str, lines: list[str] | None = None) -> list[Token]:
    """All tokens of `text`, ending with one EOF token.  Never raises."""
    return _Lexer(text, filename, lines if lines is not None else split_lines(text)).run()


def tokenize_argument(value: str, at: Token) -> list[Token]:
    """Tokens of a `$N` command-line argument, all located at the `$N` token.

    stap pastes the argument's characters into the input; lexing them on their
    own is the same except that they cannot merge with the following text.
    """
    toks = tokenize(value, at.loc.file)
    return [Token(t.kind, t.text, at.loc, at.ws_before if i == 0 else t.ws_before, t.fatal)
            for i, t in enumerate(toks[:-1])]
