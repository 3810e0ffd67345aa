"""`s =~ "re"` and `s !~ "re"`: POSIX extended regular expressions compiled at translate
time into a DFA whose tables are C arrays, as stap compiles them (its stapregex); the
probe walks the table, one lookup a byte: no libc regexec, no allocation, bounded time.

Search semantics (a match anywhere in the string).  Supported: literals and escapes,
`.`, bracket expressions with ranges, negation, [:classes:] and backslash escapes (as
stap's regexes have them), groups, `|`, `*`, `+`,
`?`, `{n}`, `{n,}`, `{n,m}`, and the anchors `^` (at the start of an alternative) and
`$` (at its end).

The parser builds the pattern's tree once (`parse_regex`); the DFA is made from it, and,
in a script that calls matched(), matched_str() or ngroups(), also the sub-match program
(`regex_groups_c`): the tree as C rows plus an anchored DFA, which runtime/pd_regex.c
runs only when the script asks for a group (POSIX leftmost-longest, as stap's tagged
DFA gives them).

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
MAX_NODES = 16383     # sub-match program rows (14 bits in pd_regex.c's re_key)
# The built-ins reading what the last `=~` matched (runtime/pd_regex.c)
SUBMATCH_FUNCS = ("matched", "matched_str", "ngroups")

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


# The pattern's syntax tree: the parser builds it once; the DFA (the match decision)
# and the sub-match program (matched(n), regex_groups_c) are both made from it.

@dataclass(frozen=True)
class Chars:
    """One byte out of a set."""
    chars: frozenset[int]


@dataclass(frozen=True)
class Bol:
    """`^`: at the start of the string."""


@dataclass(frozen=True)
class Eol:
    """`$`: at the end of the string."""


@dataclass(frozen=True)
class Cat:
    """Its items one after the other (none: the empty string)."""
    items: tuple[Node, ...]


@dataclass(frozen=True)
class Alt:
    """One of its alternatives."""
    alts: tuple[Node, ...]


@dataclass(frozen=True)
class Group:
    """`( )`: sub-match `index` (1-based, in the order of the opening parentheses)."""
    index: int
    body: Node


@dataclass(frozen=True)
class Repeat:
    """body lo to hi times (hi None: no bound)."""
    body: Node
    lo: int
    hi: int | None


Node = Chars | Bol | Eol | Cat | Alt | Group | Repeat


@dataclass(frozen=True)
class Pattern:
    """A parsed pattern: its tree and how many groups it has."""
    root: Node
    ngroups: int


class _Parser:
    """Recursive descent over the pattern's bytes, building the tree."""

    def __init__(self, pattern: bytes) -> None:
        self.p = pattern
        self.i = 0
        self.depth = 0   # open groups: outside any, ')' is a literal (as in stap)
        self.groups = 0

    def peek(self) -> int | None:
        return self.p[self.i] if self.i < len(self.p) else None

    def take(self) -> int:
        if self.i >= len(self.p):
            raise RegexError("unexpected end of pattern")
        self.i += 1
        return self.p[self.i - 1]

    def alternation(self) -> Node:
        alts = [self.concatenation()]
        while self.peek() == ord("|"):
            self.i += 1
            alts.append(self.concatenation())
        return alts[0] if len(alts) == 1 else Alt(tuple(alts))

    def concatenation(self) -> Node:
        items: list[Node] = []
        while (c := self.peek()) is not None and c != ord("|") and \
                not (c == ord(")") and self.depth):
            if c == ord("^"):
                self.i += 1
                items.append(Bol())
            elif c == ord("$"):
                self.i += 1
                items.append(Eol())
            else:
                items.append(self.repeat())
        return items[0] if len(items) == 1 else Cat(tuple(items))

    def repeat(self) -> Node:
        node = self.atom()
        while (c := self.peek()) is not None and c in b"*+?{":
            self.i += 1
            lo, hi = {ord("*"): (0, None), ord("+"): (1, None), ord("?"): (0, 1)}.get(c, (0, 0))
            if c == ord("{"):
                lo, hi = self.bounds()
            node = Repeat(node, lo, hi)
        return node

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

    def atom(self) -> Node:
        c = self.take()
        if c == ord("("):
            self.groups += 1
            index = self.groups
            self.depth += 1
            body = self.alternation()
            self.depth -= 1
            if self.peek() != ord(")"):
                raise RegexError("'(' without ')'")
            self.i += 1
            return Group(index, body)
        if c in b"*+?{":
            raise RegexError(f"'{chr(c)}' repeats nothing")
        if c == ord("."):
            return Chars(frozenset(range(1, 256)))
        if c == ord("["):
            return Chars(self.bracket())
        if c == ord("\\"):
            return Chars(frozenset([self.take()]))
        return Chars(frozenset([c]))

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


@functools.cache   # the type pass checks a pattern, emit builds its matchers
def parse_regex(pattern: bytes) -> Pattern:
    parser = _Parser(pattern)
    root = parser.alternation()
    assert parser.i == len(pattern)
    return Pattern(root, parser.groups)


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

    def build(self, node: Node) -> tuple[int, int]:
        """A fresh fragment (start, end) for node (called again for each copy a
        bounded repetition needs: fragments are not shared)."""
        if isinstance(node, Group):
            return self.build(node.body)
        if isinstance(node, Repeat):
            return self.repeated(node)
        s = self.state()
        if isinstance(node, Cat):
            cur = s
            for item in node.items:
                fs, fe = self.build(item)
                self.eps[cur].append(fs)
                cur = fe
            return s, cur
        e = self.state()
        if isinstance(node, Chars):
            self.edges[s].append((node.chars, e))
        elif isinstance(node, Bol):
            self.bol[s].append(e)
        elif isinstance(node, Eol):
            self.eol[s].append(e)
        else:
            for alt in node.alts:
                fs, fe = self.build(alt)
                self.eps[s].append(fs)
                self.eps[fe].append(e)
        return s, e

    def repeated(self, node: Repeat) -> tuple[int, int]:
        lo, hi = node.lo, node.hi
        if (lo, hi) == (0, None):
            fs, fe = self.build(node.body)
            s, e = self.state(), self.state()
            self.eps[s] += [fs, e]
            self.eps[fe] += [fs, e]
            return s, e
        if (lo, hi) == (1, None):
            fs, fe = self.build(node.body)
            e = self.state()
            self.eps[fe] += [fs, e]
            return fs, e
        if (lo, hi) == (0, 1):
            fs, fe = self.build(node.body)
            s, e = self.state(), self.state()
            self.eps[s] += [fs, e]
            self.eps[fe].append(e)
            return s, e
        # {n,m}: n copies, then m - n optional ones, or a starred one for {n,}
        parts = [self.build(node.body) for _ in range(lo)]
        if hi is None:
            parts.append(self.repeated(Repeat(node.body, 0, None)))
        else:
            parts.extend(self.repeated(Repeat(node.body, 0, 1)) for _ in range(hi - lo))
        s = cur = self.state()
        for fs, fe in parts:
            self.eps[cur].append(fs)
            cur = fe
        return s, cur


@dataclass(frozen=True)
class Dfa:
    """next[state][byte]; matched: the state has matched; at_end: it matches if the
    string ends here.  State 0 is the start (before any byte).  An anchored DFA (for the
    span of the match, regex_groups_c) starts a match at the string's start in state 0,
    at a later byte in state `later`, and has a dead state (no match can follow)."""

    next: tuple[tuple[int, ...], ...]
    matched: tuple[bool, ...]
    at_end: tuple[bool, ...]
    later: int = 0
    dead: int = -1

    def search(self, data: bytes) -> bool:
        """The C matcher's walk, in Python (for tests and -p2 checks)."""
        s = 0
        for b in data:
            if self.matched[s]:
                return True
            s = self.next[s][b]
        return self.matched[s] or self.at_end[s]


def _subset(nfa: _Nfa, start: int, accept: int, anchored: bool) -> Dfa:
    """The subset construction: unanchored, the search re-enters the start state after
    every byte; anchored, a match starts at one place only."""
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

    restart = frozenset() if anchored else closure({start}, False, False)
    first = closure({start}, True, False)
    index: dict[frozenset[int], int] = {first: 0}
    order = [first]
    for st in (closure({start}, False, False), frozenset()) if anchored else ():
        if st not in index:
            index[st] = len(order)
            order.append(st)
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
    if not anchored:
        return Dfa(tuple(rows), matched, at_end)
    return Dfa(tuple(rows), matched, at_end, index[closure({start}, False, False)],
               index[frozenset()])


@functools.cache   # the type pass checks a pattern, emit builds its tables
def compile_regex(pattern: bytes, anchored: bool = False) -> Dfa:
    nfa = _Nfa()
    start, accept = nfa.build(parse_regex(pattern).root)
    return _subset(nfa, start, accept, anchored)


def regex_c(name: str, pattern: str, dfa: Dfa, loc: SourceLocation) -> list[str]:
    """The tables of one pattern and its matcher `name(s)`: 1 on a match."""
    ctype = "uint8_t" if len(dfa.next) <= 256 else "uint16_t"
    rows = ",\n".join("    {" + ",".join(map(str, row)) + "}" for row in dfa.next)
    flags = ",".join(str(int(m) | int(e) << 1) for m, e in zip(dfa.matched, dfa.at_end,
                                                               strict=True))
    shown = _c_string(pattern)[1:-1].replace("*/", "*\\/")   # a `*/` would end the comment
    return [f"/* {shown} ({loc.file}:{loc.line}) */",
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


def _lengths(node: Node) -> tuple[int, int | None]:
    """The shortest and longest strings node matches (None: no bound)."""
    if isinstance(node, Chars):
        return 1, 1
    if isinstance(node, Bol | Eol):
        return 0, 0
    if isinstance(node, Group):
        return _lengths(node.body)
    if isinstance(node, Cat | Alt):
        cat = isinstance(node, Cat)
        parts = [_lengths(n) for n in (node.items if isinstance(node, Cat) else node.alts)]
        los = [lo for lo, _ in parts]
        his = [hi for _, hi in parts if hi is not None]
        most = None if len(his) < len(parts) else (sum(his) if cat else max(his))
        return (sum(los) if cat else min(los)), most
    lo, hi = _lengths(node.body)
    if hi == 0:
        return 0, 0
    return node.lo * lo, None if hi is None or node.hi is None else node.hi * hi


_LEN_INF = 0xFFFF   # PD_RE_INF: the C program's lengths are 16-bit


def _len_c(n: int | None) -> str:
    return "PD_RE_INF" if n is None or n >= _LEN_INF else str(n)


class _Program:
    """The tree flattened into C rows of struct pd_re_node (pd_runtime.h): the items
    of a concatenation are a chain linked by `next`; a group, repetition or alternative
    names the head of its body's chain."""

    def __init__(self) -> None:
        self.rows: list[list[str]] = []
        self.sets: list[frozenset[int]] = []
        self.alts: list[int] = []

    def chain(self, node: Node) -> int:
        items = node.items if isinstance(node, Cat) else (node,)
        idxs = [self.one(item) for item in items]
        rlo: int = 0
        rhi: int | None = 0
        for k in reversed(range(len(items))):
            lo, hi = _lengths(items[k])
            rlo = rlo + lo
            rhi = None if rhi is None or hi is None else rhi + hi
            row = self.rows[idxs[k]]
            row[2] = str(idxs[k + 1]) if k + 1 < len(idxs) else "-1"
            row[6], row[7] = str(min(lo, _LEN_INF - 1)), _len_c(hi)
            row[8], row[9] = str(min(rlo, _LEN_INF - 1)), _len_c(rhi)
        return idxs[0] if idxs else -1

    def one(self, node: Node) -> int:
        at = len(self.rows)
        self.rows.append(["", "0", "-1", "-1", "0", "0", "0", "0", "0", "0"])
        row = self.rows[at]
        if isinstance(node, Chars):
            if node.chars not in self.sets:
                self.sets.append(node.chars)
            row[0], row[1] = "PD_RE_SET", str(self.sets.index(node.chars))
        elif isinstance(node, Bol | Eol):
            row[0] = "PD_RE_BOL" if isinstance(node, Bol) else "PD_RE_EOL"
        elif isinstance(node, Group):
            row[0], row[1] = "PD_RE_GROUP", str(node.index)
            row[3] = str(self.chain(node.body))
        elif isinstance(node, Repeat):
            row[0], row[4], row[5] = "PD_RE_REP", str(node.lo), _len_c(node.hi)
            row[3] = str(self.chain(node.body))
        else:   # the parser puts no Cat directly in a Cat
            assert isinstance(node, Alt), node
            heads = [self.chain(a) for a in node.alts]
            row[0], row[1], row[3] = "PD_RE_ALT", str(len(self.alts)), str(len(heads))
            self.alts.extend(heads)
        return at


def regex_groups_c(name: str, pattern: bytes) -> list[str]:
    """`{name}_prog`, the struct pd_re_prog that pd_re_groups (runtime/pd_regex.c) runs
    to find the sub-matches of a string `name` matched: the pattern's tree as rows, and
    its anchored DFA, which gives the span of the leftmost-longest match."""
    parsed = parse_regex(pattern)
    prog = _Program()
    root = prog.chain(parsed.root)
    if len(prog.rows) > MAX_NODES:   # the rows' links are 16-bit
        raise RegexError(f"the pattern needs more than {MAX_NODES} nodes")
    dfa = compile_regex(pattern, True)
    nodes = ",\n".join("    {" + ", ".join(r) + "}" for r in prog.rows) or "    {0}"
    sets = ",\n".join("    {" + ",".join(str(sum(1 << (b & 7) for b in s if b >> 3 == k))
                                          for k in range(32)) + "}" for s in prog.sets)
    rows = ",\n".join("    {" + ",".join(map(str, row)) + "}" for row in dfa.next)
    flags = ",".join(str(int(m) | int(e) << 1 | int(k == dfa.dead) << 2)
                     for k, (m, e) in enumerate(zip(dfa.matched, dfa.at_end, strict=True)))
    return [f"static const struct pd_re_node {name}_nodes[] = {{\n{nodes}}};",
            f"static const uint8_t {name}_sets[][32] = {{\n{sets or '    {0}'}}};",
            f"static const int16_t {name}_alts[] = {{{','.join(map(str, prog.alts)) or '0'}}};",
            f"static const uint16_t {name}_anext[{len(dfa.next)}][256] = {{\n{rows}}};",
            f"static const uint8_t {name}_aflags[{len(dfa.next)}] = {{{flags}}};",
            f"static const struct pd_re_prog {name}_prog = {{{name}_nodes, {name}_sets, "
            f"{name}_alts, {name}_anext, {name}_aflags, {dfa.later}, {root}, "
            f"{parsed.ngroups + 1}}};"]
