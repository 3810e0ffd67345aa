"""`s =~ "re"` and `s !~ "re"`: POSIX extended regular expressions compiled at translate
time into a DFA whose tables are C arrays, as stap compiles them (its stapregex); the
probe walks the table, one lookup a byte: no libc regexec, no allocation, bounded time.

Search semantics (a match anywhere in the string).  Supported: literals and escapes,
`.`, bracket expressions with ranges, negation, [:classes:] and backslash escapes (as
stap's regexes have them), groups, `|`, `*`, `+`,
`?`, `{n}`, `{n,}`, `{n,m}`, and the anchors `^` (at the start of an alternative) and
`$` (at its end).  What stap's `matched(n)` needs (tagged sub-matches) is not built.

The DFA is the subset construction of a Thompson NFA over bytes.  A state is a set of NFA
states; the unanchored search re-enters the start state after every byte, `^` edges are
only followed before the first byte and `$` edges only after the last.  Each DFA state
says whether it has matched (some accepting NFA state reached) and whether it would
match at the end of the string (through `$` edges).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from ..errors import SourceLocation
from .common import _c_string

MAX_STATES = 2000     # a pattern whose DFA grows past this is refused (the C tables)
MAX_REPEAT = 255      # {n,m} bounds, as POSIX's RE_DUP_MAX

_CLASSES = {
    "alpha": lambda b: chr(b).isascii() and chr(b).isalpha(),
    "digit": lambda b: 48 <= b <= 57,
    "alnum": lambda b: chr(b).isascii() and chr(b).isalnum(),
    "upper": lambda b: 65 <= b <= 90,
    "lower": lambda b: 97 <= b <= 122,
    "space": lambda b: b in (9, 10, 11, 12, 13, 32),
    "blank": lambda b: b in (9, 32),
    "punct": lambda b: 33 <= b <= 126 and not chr(b).isalnum(),
    "print": lambda b: 32 <= b <= 126,
    "graph": lambda b: 33 <= b <= 126,
    "cntrl": lambda b: b < 32 or b == 127,
    "xdigit": lambda b: chr(b) in "0123456789abcdefABCDEF",
}


class RegexError(Exception):
    """A pattern that is not an ERE this compiler builds; the message says why."""


@dataclass
class _Nfa:
    # per state: byte-set edges, epsilon edges, `^` edges, `$` edges
    edges: list[list[tuple[frozenset[int], int]]] = field(default_factory=list)
    eps: list[list[int]] = field(default_factory=list)
    bol: list[list[int]] = field(default_factory=list)
    eol: list[list[int]] = field(default_factory=list)

    def state(self) -> int:
        for table in (self.edges, self.eps, self.bol, self.eol):
            table.append([])
        return len(self.edges) - 1


class _Parser:
    """Recursive descent over the pattern's bytes, building NFA fragments (start, end)."""

    def __init__(self, pattern: bytes, nfa: _Nfa) -> None:
        self.p = pattern
        self.i = 0
        self.nfa = nfa
        self.depth = 0   # open groups: outside any, ')' is a literal (as in stap)

    def peek(self) -> int | None:
        return self.p[self.i] if self.i < len(self.p) else None

    def take(self) -> int:
        if self.i >= len(self.p):
            raise RegexError("unexpected end of pattern")
        self.i += 1
        return self.p[self.i - 1]

    def alternation(self) -> tuple[int, int]:
        frags = [self.concatenation()]
        while self.peek() == ord("|"):
            self.i += 1
            frags.append(self.concatenation())
        if len(frags) == 1:
            return frags[0]
        s, e = self.nfa.state(), self.nfa.state()
        for fs, fe in frags:
            self.nfa.eps[s].append(fs)
            self.nfa.eps[fe].append(e)
        return s, e

    def concatenation(self) -> tuple[int, int]:
        start = cur = self.nfa.state()
        while (c := self.peek()) is not None and c != ord("|") and \
                not (c == ord(")") and self.depth):
            if c == ord("^"):
                self.i += 1
                nxt = self.nfa.state()
                self.nfa.bol[cur].append(nxt)
                cur = nxt
                continue
            if c == ord("$"):
                self.i += 1
                nxt = self.nfa.state()
                self.nfa.eol[cur].append(nxt)
                cur = nxt
                continue
            fs, fe = self.repeat()
            self.nfa.eps[cur].append(fs)
            cur = fe
        return start, cur

    def repeat(self) -> tuple[int, int]:
        begin = self.i
        frag = self.atom()
        atom_src = (begin, self.i)
        while (c := self.peek()) is not None and c in b"*+?{":
            self.i += 1
            lo, hi = {ord("*"): (0, None), ord("+"): (1, None), ord("?"): (0, 1)}.get(c, (0, 0))
            if c == ord("{"):
                lo, hi = self.bounds()
            frag = self.repeated(frag, atom_src, lo, hi)
            atom_src = (begin, self.i)
        return frag

    def bounds(self) -> tuple[int, int | None]:
        end = self.p.find(b"}", self.i)
        if end < 0:
            raise RegexError("'{' without '}'")
        text = self.p[self.i:end].decode("ascii", "replace")
        self.i = end + 1
        lo_s, comma, hi_s = text.partition(",")
        try:
            lo = int(lo_s)
            hi = (int(hi_s) if hi_s else None) if comma else lo
        except ValueError:
            raise RegexError(f"bad repetition {{{text}}}") from None
        if lo > MAX_REPEAT or (hi is not None and (hi > MAX_REPEAT or hi < lo)):
            raise RegexError(f"bad repetition {{{text}}} (at most {MAX_REPEAT})")
        return lo, hi

    def copy(self, src: tuple[int, int]) -> tuple[int, int]:
        """A fresh fragment for the atom at src (re-parsed: fragments are not shared)."""
        saved = self.i
        self.i = src[0]
        frag = self.atom()
        while self.i < src[1]:   # the repetitions already applied to it
            c = self.take()
            lo, hi = {ord("*"): (0, None), ord("+"): (1, None), ord("?"): (0, 1)}.get(c, (0, 0))
            if c == ord("{"):
                lo, hi = self.bounds()
            frag = self.repeated(frag, (src[0], self.i), lo, hi)
        self.i = saved
        return frag

    def repeated(self, frag: tuple[int, int], src: tuple[int, int], lo: int,
                 hi: int | None) -> tuple[int, int]:
        nfa = self.nfa
        if (lo, hi) == (0, None):
            s, e = nfa.state(), nfa.state()
            nfa.eps[s] += [frag[0], e]
            nfa.eps[frag[1]] += [frag[0], e]
            return s, e
        if (lo, hi) == (1, None):
            e = nfa.state()
            nfa.eps[frag[1]] += [frag[0], e]
            return frag[0], e
        if (lo, hi) == (0, 1):
            s, e = nfa.state(), nfa.state()
            nfa.eps[s] += [frag[0], e]
            nfa.eps[frag[1]].append(e)
            return s, e
        # {n,m}: n copies, then m - n optional ones, or a starred one for {n,}
        parts = ([frag] + [self.copy(src) for _ in range(lo - 1)]) if lo else []
        if hi is None:
            parts.append(self.repeated(self.copy(src), src, 0, None))
        else:
            parts.extend(self.repeated(self.copy(src), src, 0, 1) for _ in range(hi - lo))
        s = cur = nfa.state()
        for fs, fe in parts:
            nfa.eps[cur].append(fs)
            cur = fe
        return s, cur

    def atom(self) -> tuple[int, int]:
        c = self.take()
        if c == ord("("):
            self.depth += 1
            frag = self.alternation()
            self.depth -= 1
            if self.peek() != ord(")"):
                raise RegexError("'(' without ')'")
            self.i += 1
            return frag
        if c in b"*+?{":
            raise RegexError(f"'{chr(c)}' repeats nothing")
        if c == ord("."):
            chars = frozenset(range(1, 256))
        elif c == ord("["):
            chars = self.bracket()
        elif c == ord("\\"):
            chars = frozenset([self.take()])
        else:
            chars = frozenset([c])
        s, e = self.nfa.state(), self.nfa.state()
        self.nfa.edges[s].append((chars, e))
        return s, e

    def bracket(self) -> frozenset[int]:
        negate = self.peek() == ord("^")
        if negate:
            self.i += 1
        chars: set[int] = set()
        first = True
        while True:
            c = self.take()
            if c == ord("]") and not first:
                break
            first = False
            if c == ord("\\"):   # stap's regexes escape in brackets too: [\]] [\[]
                c = self.take()
            elif c == ord("[") and self.peek() == ord(":"):
                end = self.p.find(b":]", self.i)
                if end < 0:
                    raise RegexError("'[:' without ':]'")
                name = self.p[self.i + 1:end].decode("ascii", "replace")
                if name not in _CLASSES:
                    raise RegexError(f"unknown character class [:{name}:]")
                chars.update(b for b in range(1, 256) if _CLASSES[name](b))
                self.i = end + 2
                continue
            if self.peek() == ord("-") and self.i + 1 < len(self.p) and \
                    self.p[self.i + 1] != ord("]"):
                self.i += 1
                hi = self.take()
                if hi < c:
                    raise RegexError(f"bad range {chr(c)}-{chr(hi)}")
                chars.update(range(c, hi + 1))
            else:
                chars.add(c)
        if negate:
            return frozenset(range(1, 256)) - chars
        return frozenset(chars)


@dataclass(frozen=True)
class Dfa:
    """next[state][byte]; matched: the state has matched; at_end: it matches if the
    string ends here.  State 0 is the start (before any byte)."""

    next: tuple[tuple[int, ...], ...]
    matched: tuple[bool, ...]
    at_end: tuple[bool, ...]

    def search(self, data: bytes) -> bool:
        """The C matcher's walk, in Python (for tests and -p2 checks)."""
        s = 0
        for b in data:
            if self.matched[s]:
                return True
            s = self.next[s][b]
        return self.matched[s] or self.at_end[s]


@functools.cache   # the type pass checks a pattern, emit builds its tables
def compile_regex(pattern: bytes) -> Dfa:
    nfa = _Nfa()
    parser = _Parser(pattern, nfa)
    start, accept = parser.alternation()
    assert parser.i == len(pattern)

    def closure(states: set[int], at_start: bool, at_end: bool) -> frozenset[int]:
        seen, todo = set(states), list(states)
        while todo:
            s = todo.pop()
            nxt = nfa.eps[s] + (nfa.bol[s] if at_start else []) + (nfa.eol[s] if at_end else [])
            for t in nxt:
                if t not in seen:
                    seen.add(t)
                    todo.append(t)
        return frozenset(seen)

    restart = closure({start}, False, False)
    first = closure({start}, True, False)
    index: dict[frozenset[int], int] = {first: 0}
    order = [first]
    rows: list[tuple[int, ...]] = []
    i = 0
    while i < len(order):
        cur = order[i]
        row = []
        for b in range(256):
            moved = {t for s in cur for chars, t in nfa.edges[s] if b in chars}
            nxt = closure(moved, False, False) | restart if b else restart
            if nxt not in index:
                if len(order) >= MAX_STATES:
                    raise RegexError(f"the pattern needs more than {MAX_STATES} DFA states")
                index[nxt] = len(order)
                order.append(nxt)
            row.append(index[nxt])
        rows.append(tuple(row))
        i += 1
    matched = tuple(accept in st for st in order)
    at_end = tuple(accept in closure(set(st), False, True) for st in order)
    return Dfa(tuple(rows), matched, at_end)


def regex_c(name: str, pattern: str, dfa: Dfa, loc: SourceLocation) -> list[str]:
    """The tables of one pattern and its matcher `name(s)`: 1 on a match."""
    ctype = "uint8_t" if len(dfa.next) <= 256 else "uint16_t"
    rows = ",\n".join("    {" + ",".join(map(str, row)) + "}" for row in dfa.next)
    flags = ",".join(str(int(m) | int(e) << 1) for m, e in zip(dfa.matched, dfa.at_end,
                                                               strict=True))
    return [f"/* {_c_string(pattern)[1:-1]} ({loc.file}:{loc.line}) */",
            f"static const {ctype} {name}_next[{len(dfa.next)}][256] = {{\n{rows}}};",
            f"static const uint8_t {name}_flags[{len(dfa.next)}] = {{{flags}}};",
            f"static int64_t {name}(const char *s)",
            "{",
            "    unsigned st = 0;",
            "    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {",
            f"        if ({name}_flags[st] & 1)",
            "            return 1;",
            f"        st = {name}_next[st][*p];",
            "    }",
            f"    return ({name}_flags[st] & 3) != 0;",
            "}"]
