"""The scanner: every string of a decoded value (nested maps and lists, bytes that are UTF-8 text)
checked against the rules; each finding is a kind, the key path where it sits and a fingerprint,
never the secret."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from gitstate.format.checkpoint import Checkpoint
from gitstate.format.lgwrites import WritesIndex

from .rules import BUILTIN, PLUGIN_VALID, Rule, Rules, fingerprint, load_detect_secrets

#: Strings shorter than this hold no built-in credential shape (user patterns see every string).
MIN_LENGTH = 16
_CACHE_LIMIT = 200_000
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]{0,63}\Z")
#: Text made only of these (git ids, UUIDs, LangGraph's channel versions) holds no credential
#: shape gitstate or detect-secrets knows (each needs a letter outside a-f, an upper-case letter,
#: ':' or '_'); user patterns still see it.
_PLAIN = re.compile(r"[0-9a-f.\-]*\Z")
#: A secret this long is replaced wherever it sits in a text, not only where a rule found it.
REPEAT_LENGTH = 16
#: How every marker begins.
MARKER_OPEN = "\u00abredacted:"
#: Hex digits of the fingerprint a marker shows.
MARKER_HEX = 4


def marker(kind: str, fp: str) -> str:
    """What replaces a credential when it is redacted: ``«redacted:KIND:FP4»`` (its kind and the
    first :data:`MARKER_HEX` hex digits of its fingerprint)."""
    return f"{MARKER_OPEN}{kind}:{fp[:MARKER_HEX]}\u00bb"


@dataclass(frozen=True)
class Finding:
    """One credential found: its ``kind`` (``aws-access-key``), the key ``path`` inside the value
    scanned (``state.messages[3].content``), its ``fingerprint`` (see
    :func:`gitstate.secrets.fingerprint`); ``run`` and ``checkpoint`` when it was found in one."""

    kind: str
    path: str
    fingerprint: str
    run: str | None = None
    checkpoint: str | None = None

    def at(self, run: str, checkpoint: str) -> Finding:
        """This finding, located in a checkpoint of a run."""
        return replace(self, run=run, checkpoint=checkpoint)

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` shape: ``{"run", "checkpoint", "path", "kind", "fingerprint"}``."""
        return {"run": self.run, "checkpoint": self.checkpoint, "path": self.path, "kind": self.kind,
                "fingerprint": self.fingerprint}


def _text(value: bytes | bytearray | memoryview) -> str | None:
    """Bytes as text when they are UTF-8 without NUL bytes (binary data is not scanned)."""
    raw = bytes(value)
    if b"\0" in raw:
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


_Span = tuple[int, int, str, str]  # start, end, kind, fingerprint
_Found = tuple[tuple[tuple[str, str, str], ...], tuple[_Span, ...]]  # distinct hits, every place
_NONE: _Found = ((), ())
_TOKEN = re.compile(r"[A-Za-z0-9_\-]*")


def plugin_matches(plugin: Any, text: str) -> Iterator[tuple[int, int]]:
    """``(start, end)`` of each match of a detect-secrets plugin's expressions in ``text``. The
    plugin itself yields only a group when its expression has one (``(ghp|gho)_…`` yields
    ``ghp``): here the whole match is the secret, unless what the match holds before the group
    is not part of a token (``aws_secret_access_key = "…"``): then the group is."""
    for regex in plugin.denylist:
        for m in regex.finditer(text):
            start, end = m.span()
            if regex.groups:
                group = next((g for g in range(1, regex.groups + 1) if m.start(g) >= 0), 0)
                before = text[start:m.start(group)]
                if group and not _TOKEN.fullmatch(before):
                    start, end = m.span(group)
            if end > start:
                yield start, end


def _merged(spans: Iterable[_Span]) -> list[_Span]:
    """Spans sorted, overlapping ones joined (the first one's kind and fingerprint kept)."""
    out: list[_Span] = []
    for start, end, kind, fp in sorted(spans, key=lambda s: (s[0], -s[1])):
        if out and start < out[-1][1]:
            if end > out[-1][1]:
                out[-1] = (out[-1][0], end, out[-1][2], out[-1][3])
            continue
        out.append((start, end, kind, fp))
    return out


class Scanner:
    """Finds credentials in strings and decoded values. Results per distinct string are kept
    (bounded), so the messages a LangGraph thread repeats in every checkpoint are matched once."""

    def __init__(self, rules: Rules | None = None) -> None:
        self.rules = rules or Rules()
        self._own: tuple[Rule, ...] = BUILTIN
        self._plugins = load_detect_secrets()
        self._cache: dict[str, _Found] = {}
        # every needle once (the text's own, and the lowercased text's): a text is searched for
        # each once, and a rule runs only when one of its needles is there
        self._case = frozenset(n for r in self._own if not r.fold for n in r.needles)
        self._folded = (frozenset(n for r in self._own if r.fold for n in r.needles)
                        | frozenset(n for _k, _p, needles in self._plugins for n in needles))

    def find(self, text: str) -> tuple[tuple[str, str], ...]:
        """``(kind, fingerprint)`` of each distinct credential in ``text``, allowlisted ones left out."""
        return tuple((kind, fp) for kind, fp, _secret in self.hits(text))

    def hits(self, text: str, *, cache: bool = True) -> tuple[tuple[str, str, str], ...]:
        """``(kind, fingerprint, secret)`` of each distinct credential in ``text`` (allowlisted ones
        left out): what :meth:`redact` replaces. The secret never leaves this process. ``cache``:
        keep the result by ``text`` (strings met again and again); a file's text is not kept."""
        return self._lookup(text, cache)[0]

    def _lookup(self, text: str, cache: bool) -> _Found:
        hit = self._cache.get(text) if cache else None
        if hit is None:
            if not self.rules.patterns and _PLAIN.match(text):
                return _NONE  # ids, hashes, version numbers: no shape the rules know is made of these
            hit = self._find(text)
            if cache:
                if len(self._cache) >= _CACHE_LIMIT:
                    self._cache.clear()
                self._cache[text] = hit
        return hit

    def redact(self, text: str, *, cache: bool = True) -> tuple[str, tuple[tuple[str, str], ...]]:
        """``text`` with each credential replaced by its :func:`marker`, and the ``(kind,
        fingerprint)`` of each one replaced (``text`` itself when there is none). What is replaced
        is where each was found (overlapping finds as one), and every other place the same
        secret sits when it is :data:`REPEAT_LENGTH` characters or longer; never other text that
        happens to equal a short secret (``postgres://postgres:postgres@…``)."""
        hits, spans = self._lookup(text, cache)
        if not spans:
            return text, ()
        pieces: list[str] = []
        pos = len(text)
        for start, end, kind, fp in reversed(_merged(spans)):  # right to left
            pieces.append(text[end:pos])
            pieces.append(marker(kind, fp))
            pos = start
        pieces.append(text[:pos])
        return "".join(reversed(pieces)), tuple((kind, fp) for kind, fp, _secret in hits)

    def _find(self, text: str) -> _Found:
        found: dict[str, tuple[str, str]] = {}  # fingerprint -> (kind, secret), in order found
        spans: list[tuple[int, int, str]] = []  # start, end, fingerprint
        lower = text.lower()
        for rule in self.rules.patterns:
            for secret, start, end in rule.matches(text, lower):
                fp = fingerprint(secret)
                found.setdefault(fp, (rule.kind, secret))
                spans.append((start, end, fp))
        if len(text) >= MIN_LENGTH:
            there = {n for n in self._case if n in text} | {n for n in self._folded if n in lower}
            for rule in self._own:
                if rule.needles and there.isdisjoint(rule.needles):
                    continue
                for secret, start, end in rule.matches(text, lower):
                    if not any(s <= start and end <= e for s, e, _fp in spans):
                        fp = fingerprint(secret)
                        found.setdefault(fp, (rule.kind, secret))
                        spans.append((start, end, fp))
            for kind, plugin, needles in self._plugins:
                if needles and there.isdisjoint(needles):
                    continue
                for start, end in plugin_matches(plugin, text):
                    if any(s < end and start < e for s, e, _fp in spans):
                        continue  # part of a credential a rule above found
                    secret = text[start:end]
                    check = PLUGIN_VALID.get(kind)
                    if check is not None and not check(secret):
                        continue
                    fp = fingerprint(secret)
                    found.setdefault(fp, (kind, secret))
                    spans.append((start, end, fp))
        allow = self.rules.allow
        # a marker is never a credential (a redacted URL password still sits between ':' and '@')
        kept = {fp: (kind, secret) for fp, (kind, secret) in found.items()
                if fp not in allow and MARKER_OPEN not in secret}
        if not kept:
            return _NONE
        where = [(s, e, kept[fp][0], fp) for s, e, fp in spans if fp in kept]
        for fp, (kind, secret) in kept.items():
            if len(secret) >= REPEAT_LENGTH:  # the same secret elsewhere, in a place no rule matched
                at = text.find(secret)
                while at >= 0:
                    where.append((at, at + len(secret), kind, fp))
                    at = text.find(secret, at + len(secret))
        return tuple((kind, fp, secret) for fp, (kind, secret) in kept.items()), tuple(where)

    def scan_value(self, value: Any, path: str = "") -> list[Finding]:
        """Findings in every string of ``value`` (maps, lists, tuples and sets walked to any
        depth; map keys scanned too; bytes scanned when they are UTF-8 text). ``path`` prefixes
        each key path (``state`` gives ``state.messages[3].content``)."""
        found: list[Finding] = []
        seen: set[tuple[str, str, str]] = set()
        for where, text in self._strings(value, path):
            for kind, fp in self.find(text):
                if (where, kind, fp) not in seen:
                    seen.add((where, kind, fp))
                    found.append(Finding(kind, where, fp))
        return found

    def _strings(self, value: Any, path: str) -> Iterator[tuple[str, str]]:
        """``(key path, string)`` for every string in ``value``, depth first, without recursion."""
        stack: list[tuple[Any, str]] = [(value, path)]
        while stack:
            item, where = stack.pop()
            if isinstance(item, str):
                yield where, item
            elif isinstance(item, bytes | bytearray | memoryview):
                text = _text(item)
                if text is not None:
                    yield where, text
            elif isinstance(item, Mapping):
                entries = list(item.items())
                for n, (key, sub) in reversed(list(enumerate(entries))):
                    segment = self.key_segment(key, n)
                    stack.append((sub, where + segment if where or segment[0] != "." else segment[1:]))
                    if isinstance(key, str | bytes):
                        stack.append((key, f"{where}{{key #{n}}}"))
            elif isinstance(item, list | tuple):
                for n in range(len(item) - 1, -1, -1):
                    stack.append((item[n], f"{where}[{n}]"))
            elif isinstance(item, set | frozenset):
                for n, sub in enumerate(sorted(item, key=repr)):
                    stack.append((sub, f"{where}{{item #{n}}}"))

    def key_segment(self, key: Any, n: int) -> str:
        """How a map key shows in a key path: ``.name`` for a plain name, ``["other text"]`` for
        other short text, ``[3]`` for a number; by position (``{#2}``) when the key is long or itself
        holds a credential, so a path never prints one."""
        if isinstance(key, bool) or key is None:
            return f"[{key!r}]"
        if isinstance(key, int):
            return f"[{key}]"
        if isinstance(key, str) and len(key) <= 64 and not self.find(key):
            if _IDENT.match(key):
                return f".{key}"
            return "[" + repr(key) + "]"
        return f"{{#{n}}}"

    def scan_checkpoint(self, cp: Checkpoint, writes: WritesIndex | None = None) -> list[Finding]:
        """Findings in one checkpoint, located in it: its metadata (``metadata…``), decoded state
        (``state…``; a LangGraph checkpoint's channel values), tool invocations (``tools…``) and
        audit events (``audit…``); for a LangGraph checkpoint also LangGraph's metadata
        (``langgraph.metadata…``) and pending writes (``langgraph.writes[i]…``). Raises what
        reading the checkpoint raises (a :class:`gitstate.GitStateError` when it is corrupt).
        ``writes``: see :func:`checkpoint_parts`."""
        found: list[Finding] = []
        for path, value in checkpoint_parts(cp, writes=writes):
            found.extend(f.at(cp.run_id, cp.id) for f in self.scan_value(value, path))
        return found


def checkpoint_parts(cp: Checkpoint, *, state: bool = True,
                     writes: WritesIndex | None = None) -> Iterable[tuple[str, Any]]:
    """``(path, value)`` of each part of a checkpoint that is scanned; ``state=False`` leaves the
    state out without decoding it (for a caller that scans it piece by piece); ``writes``: read
    LangGraph's pending writes through this index (a scan of many checkpoints of a run lists and
    decodes the run's writes refs once)."""
    yield "metadata", cp.metadata
    if state:
        yield "state", cp.state
    yield "tools", cp.tools
    yield "audit", cp.audit
    lg = cp.langgraph_view(writes=writes)
    if lg is not None:
        if lg.get("metadata") != cp.metadata:
            yield "langgraph.metadata", lg.get("metadata")
        yield "langgraph.writes", lg.get("writes")
