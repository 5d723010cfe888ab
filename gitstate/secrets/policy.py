"""The write-time policy (git config ``agentos.secrets``): what a store does with a credential in
a value it is about to write, before any object is written.

* ``redact`` (the default): each credential inside a string is replaced by its marker
  ``«redacted:KIND:FP4»``; the value keeps its types and shape (a dict stays a dict of the same
  keys, a tuple a tuple, bytes bytes), so a framework resumes from it;
* ``refuse``: :class:`~gitstate.errors.SecretRefusedError` names the key path and kind, and the
  write stores nothing;
* ``warn``: the value is stored as it is and each finding (key path, kind, fingerprint) is
  recorded in the checkpoint's ``meta.cbor`` (``secrets``), so a push refuses it;
* ``off``: nothing is scanned.

The secret itself is never logged, raised or recorded. Values are walked as plain data (maps,
lists, tuples, sets, strings, bytes that are UTF-8 text) and as msgpack (LangGraph's serde
bytes, rewritten string by string, extension records included)."""

from __future__ import annotations

import hashlib
import marshal
import os
import struct
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import pygit2

from gitstate.errors import EncodingError, GitStateError, SecretRefusedError

from .rules import ALLOW_KEY, PATTERN_KEY, RULES_FILE, Rules, SecretsRuleError
from .scanner import MIN_LENGTH, Finding, Scanner

#: The git config key of the policy, its values and the value an unset key means.
POLICY_KEY = "agentos.secrets"
MODES = ("off", "warn", "redact", "refuse")
DEFAULT_MODE = "redact"
#: Files (session files, snapshot files) larger than this are not scanned at write.
MAX_FILE = 1 << 20
#: Key in ``meta.cbor`` of the findings a ``warn`` write recorded.
META_KEY = "secrets"
_MAX_DEPTH = 200
_CHUNK = 32  # list items checked, and remembered clean, together
#: A rules file larger than this is refused (it is a short list of patterns and fingerprints).
MAX_RULES_FILE = 1 << 20


class SecretsPolicyError(GitStateError):
    """``agentos.secrets`` holds a value that is not a policy."""

    def __init__(self, value: str) -> None:
        self.value = value
        super().__init__(f"git config {POLICY_KEY} is {value!r}; use one of {', '.join(MODES)}")


def read_rules(repo: pygit2.Repository, workdir: str | None, allow: Iterable[str] = ()) -> Rules:
    """The user's rules: :data:`~gitstate.secrets.ALLOW_KEY` and
    :data:`~gitstate.secrets.PATTERN_KEY` from the repository's git config, the work tree's
    :data:`~gitstate.secrets.RULES_FILE` when there is one, and ``allow`` (``--allow-secret``).
    :class:`~gitstate.secrets.SecretsRuleError` names what is wrong in them."""
    rules = Rules.from_config(_config_values(repo, ALLOW_KEY), _config_values(repo, PATTERN_KEY))
    if workdir is not None:
        path = os.path.join(workdir, RULES_FILE)
        if os.path.lexists(path):
            if not os.path.isfile(path) or os.path.getsize(path) > MAX_RULES_FILE:
                raise SecretsRuleError(path, f"not a regular file of at most {MAX_RULES_FILE} bytes")
            try:
                with open(path, encoding="utf-8") as fh:
                    text = fh.read(MAX_RULES_FILE + 1)
            except (OSError, UnicodeDecodeError) as exc:
                raise SecretsRuleError(path, f"cannot be read ({exc})") from None
            rules = rules.merged(Rules.from_toml(text, path))
    return rules.allowing(allow)


def _config_values(repo: pygit2.Repository, key: str) -> list[str]:
    try:
        return [str(v) for v in repo.config.get_multivar(key)]
    except (KeyError, pygit2.GitError):
        return []


def read_mode(repo: pygit2.Repository) -> str:
    """The policy git config :data:`POLICY_KEY` names (:data:`DEFAULT_MODE` when unset)."""
    try:
        config = repo.config
        value = str(config[POLICY_KEY]) if POLICY_KEY in config else None
    except pygit2.GitError:
        value = None
    return parse_mode(value)


def parse_mode(value: str | None) -> str:
    """The policy a config value names (``None``: :data:`DEFAULT_MODE`)."""
    if value is None:
        return DEFAULT_MODE
    mode = value.strip().lower()
    if mode not in MODES:
        raise SecretsPolicyError(value)
    return mode


class Policy:
    """The policy of one store (read once when the store opens). ``rules`` loads the user's rules
    on first use, so a store that never writes never imports the detectors."""

    def __init__(self, mode: str = DEFAULT_MODE, rules: Callable[[], Rules] | Rules | None = None, *,
                 packed_bytes: bool = False) -> None:
        self.mode = parse_mode(mode)
        self._rules = rules
        self._scanner: Scanner | None = None
        self._clean_chunks: set[bytes] = set()  # digests of list chunks that hold no finding
        # bytes that are not text are read as msgpack (LangGraph's serde bytes inside gitstate's
        # own records: what a rewrite of stored objects meets)
        self.packed_bytes = packed_bytes

    @property
    def active(self) -> bool:
        """Whether writes are scanned (any mode but ``off``)."""
        return self.mode != "off"

    @property
    def scanner(self) -> Scanner:
        """The scanner (built on first use)."""
        if self._scanner is None:
            rules = self._rules() if callable(self._rules) else self._rules
            self._scanner = Scanner(rules)
        return self._scanner

    # -- decisions ----------------------------------------------------------------------------

    def _text(self, text: str, path: str, found: list[Finding], cache: bool = True) -> str:
        hits = self.scanner.hits(text, cache=cache)
        if not hits:
            return text
        if self.mode == "refuse":
            raise SecretRefusedError(path, hits[0][0], hits[0][1])
        if self.mode == "warn":
            found.extend(Finding(kind, path, fp) for kind, fp, _s in hits)
            return text
        return self.scanner.redact(text, cache=cache)[0]

    # -- plain values ----------------------------------------------------------------------------

    def value(self, value: Any, path: str, found: list[Finding]) -> Any:
        """``value`` as the policy stores it (the same object when nothing changes); ``warn``
        findings are appended to ``found``."""
        if not self.active or self._clean(value):
            return value
        return self._value(value, path, found, 0)

    def _clean(self, value: Any) -> bool:
        """Whether no string in ``value`` holds a credential (a quick walk: no key paths); False
        (the careful walk decides) for values nested too deep to walk."""
        try:
            return self._clean_walk(value)
        except RecursionError:
            return False

    def _clean_walk(self, value: Any) -> bool:
        hits = self.scanner.hits
        short = 0 if self.scanner.rules.patterns else MIN_LENGTH
        stack = [value]
        seen = 0
        while stack:
            item = stack.pop()
            seen += 1
            if seen > 10_000_000:
                return False  # the careful walk decides
            if isinstance(item, str):
                if len(item) >= short and hits(item):
                    return False
            elif isinstance(item, Mapping):
                stack.extend(item.keys())
                stack.extend(item.values())
            elif isinstance(item, list | tuple) and len(item) > 2 * _CHUNK:
                # a long list (a message history): chunks known clean are skipped whole, so a
                # list that grew costs its new chunk (the rest is hashed, not walked)
                for start in range(0, len(item), _CHUNK):
                    chunk = item[start:start + _CHUNK]
                    key = _digest(chunk)
                    if key is None or key not in self._clean_chunks:
                        if not self._clean_walk(list(chunk)):
                            return False
                        if key is not None:
                            if len(self._clean_chunks) > 100_000:
                                self._clean_chunks.clear()
                            self._clean_chunks.add(key)
            elif isinstance(item, list | tuple | set | frozenset):
                stack.extend(item)
            elif isinstance(item, bytes | bytearray) and len(item) >= 8:
                try:
                    text = bytes(item).decode("utf-8")
                except UnicodeDecodeError:
                    if self.packed_bytes:
                        return False  # maybe msgpack: the careful walk reads it
                    continue
                if hits(text):
                    return False
        return True

    def _value(self, value: Any, path: str, found: list[Finding], depth: int) -> Any:
        if isinstance(value, str):
            return self._text(value, path, found) if len(value) >= MIN_LENGTH or self.scanner.rules.patterns else value
        if isinstance(value, bytes | bytearray):
            return self._bytes(value, path, found)
        if depth > _MAX_DEPTH:
            # deeper than the careful walk goes (the encoder refuses most such values, but counts
            # its depth per top-level value): stored only when the quick walk finds nothing; else
            # refused as the encoder refuses a value too deep (or a cycle, which never ends)
            if self._clean(value):
                return value
            raise EncodingError(path, f"nested deeper than {_MAX_DEPTH} levels (a cycle?)")
        if isinstance(value, Mapping):
            changed = False
            out = {}
            for n, (key, sub) in enumerate(value.items()):
                seg = self.scanner.key_segment(key, n) if isinstance(key, str | int) else f"{{#{n}}}"
                where = path + seg if path or seg[0] != "." else seg[1:]
                new_key = self._text(key, f"{path}{{key #{n}}}", found) if isinstance(key, str) else key
                new = self._value(sub, where, found, depth + 1)
                changed = changed or new is not sub or new_key is not key
                out[new_key] = new
            if not changed:
                return value
            if isinstance(value, dict) and type(value) is not dict:
                try:
                    return type(value)(out)
                except Exception:  # a dict subclass that cannot be built from a dict
                    return out
            return out
        if isinstance(value, list | tuple):
            items = [self._value(sub, f"{path}[{n}]", found, depth + 1) for n, sub in enumerate(value)]
            if all(a is b for a, b in zip(items, value, strict=True)):
                return value
            if type(value) in (list, tuple):
                return type(value)(items)
            try:
                return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
            except Exception:
                return items
        if isinstance(value, set | frozenset):
            new_items = {self._value(sub, f"{path}{{item}}", found, depth + 1) for sub in value}
            return value if new_items == value else type(value)(new_items)
        return value

    def _bytes(self, value: bytes | bytearray, path: str, found: list[Finding], cache: bool = True) -> Any:
        raw = bytes(value)
        if len(raw) < 8 or b"\0" in raw:
            return value
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            if self.packed_bytes and strings(raw) is not None:
                new_raw = self.msgpack(raw, path, found)
                if new_raw is not raw:
                    return bytearray(new_raw) if isinstance(value, bytearray) else new_raw
            return value
        new = self._text(text, path, found, cache)
        if new is text:
            return value
        data = new.encode("utf-8")
        return bytearray(data) if isinstance(value, bytearray) else data

    def file(self, data: bytes, path: str, found: list[Finding]) -> bytes:
        """A file's bytes as the policy stores them: a UTF-8 text file of at most
        :data:`MAX_FILE` bytes is scanned, others are stored as they are (``data`` itself when
        nothing changes). A file's text is not kept in the scanner's cache (it is seldom met again
        and may be large)."""
        if not self.active or len(data) > MAX_FILE:
            return data
        new = self._bytes(data, path, found, cache=False)
        return data if new is data else bytes(new)

    def finds_in_file(self, data: bytes) -> bool:
        """Whether :meth:`file` would change, record or refuse ``data`` (at any path)."""
        if not self.active or len(data) > MAX_FILE:
            return False
        seen: list[Finding] = []
        try:
            return self.file(data, "", seen) is not data or bool(seen)
        except SecretRefusedError:
            return True

    # -- LangGraph's serde bytes --------------------------------------------------------------

    def typed(self, kind: str, data: bytes, path: str, found: list[Finding]) -> bytes:
        """The bytes of a serde-typed value (``msgpack``, ``json``, ``bytes`` …) as the policy
        stores them (the same object when nothing changes)."""
        if not self.active:
            return data
        if kind == "msgpack":
            return self.msgpack(data, path, found)
        if kind in ("json", "bytes", "bytearray"):
            return self.file(data, path, found)
        return data

    def msgpack(self, data: bytes, path: str, found: list[Finding], start: int = 0,
                count: int | None = None) -> bytes:
        """Msgpack bytes as the policy stores them. ``start`` and ``count``: ``data`` is an array
        of which only the ``count`` items from byte ``start`` on are new (the others were checked
        when they were written), so only those are read."""
        if not self.active:
            return data
        part = data if count is None else _array_header(count) + data[start:]
        texts = strings(part)
        if texts is None:  # not msgpack we can read: checked as text, never silently let through
            return self.file(data, path, found) if count is None else self.msgpack(data, path, found)
        if not any(self.scanner.hits(t) for t in texts):
            return data
        if self.mode == "warn":
            decoded = _decoded(part)
            if decoded is _UNREADABLE:
                decoded = texts
            found.extend(Finding(f.kind, _join(path, f.path), f.fingerprint)
                         for f in self.scanner.scan_value(decoded, ""))
            return data
        if self.mode == "refuse":
            hits = next(h for t in texts if (h := self.scanner.hits(t)))
            raise SecretRefusedError(path, hits[0][0], hits[0][1])
        out: list[bytes] = []
        try:
            end = _Rewriter(data, self.scanner, out).item(0)
        except _Malformed:
            end = -1
        if end != len(data):
            raise SecretRefusedError(path, "msgpack", unreadable=True)
        return b"".join(out)


_DISPLAY: list[Policy] = []


def masked(value: Any) -> Any:
    """``value`` for display: each credential gitstate's built-in rules find replaced by its
    marker, as the ``redact`` policy writes it (types and shapes kept; ``value`` itself when there
    is none). What ``show``, the view and the HTML file print of a checkpoint stored with ``warn``
    (or ``off``, or by an older gitstate): a marker, never the secret."""
    if not _DISPLAY:
        _DISPLAY.append(Policy("redact", Rules()))
    try:
        return _DISPLAY[0].value(value, "", [])
    except GitStateError:  # nested too deep to walk: nothing of it is shown
        return "\u00abredacted:unreadable\u00bb"


def masked_text(text: str) -> str:
    """A file's text for display, masked as :func:`masked` masks a value (the text is not kept
    in the scanner's cache: a file is seldom met again and may be large)."""
    if not _DISPLAY:
        _DISPLAY.append(Policy("redact", Rules()))
    return _DISPLAY[0].scanner.redact(text, cache=False)[0]


def masked_file(data: bytes) -> bytes:
    """A file's bytes for display: a UTF-8 text file with each credential replaced by its marker
    (:func:`masked_text`); other bytes, and text without a credential, as they are."""
    if b"\0" in data:
        return data
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return data
    shown = masked_text(text)
    return data if shown == text else shown.encode("utf-8")


def secrets_record(found: Iterable[Finding]) -> list[dict[str, str]]:
    """What ``meta.cbor`` records (key :data:`META_KEY`) of the findings a ``warn`` write let
    through: ``[{"path", "kind", "fingerprint"}]``, each once, never the secret."""
    seen: dict[tuple[str, str, str], None] = {}
    for f in found:
        seen.setdefault((f.path, f.kind, f.fingerprint))
    return [{"path": p, "kind": k, "fingerprint": fp} for p, k, fp in seen]


def _join(base: str, path: str) -> str:
    if not path:
        return base
    return base + path if path[0] in "[{" else f"{base}.{path}"


def _array_header(count: int) -> bytes:
    if count < 16:
        return bytes([0x90 | count])
    if count < 1 << 16:
        return b"\xdc" + struct.pack(">H", count)
    return b"\xdd" + struct.pack(">I", count)


_UNREADABLE = object()


def _digest(value: Any) -> bytes | None:
    """A digest that names ``value`` exactly (types included: ``marshal``), or ``None`` for a
    value marshal cannot write."""
    try:
        return hashlib.blake2b(marshal.dumps(value), digest_size=20).digest()
    except (ValueError, TypeError):
        return None


def strings(data: bytes) -> list[str] | None:
    """Every string in msgpack ``data`` (text, and binary that is UTF-8 text), extension
    payloads that are msgpack included; ``None`` when ``data`` is not msgpack."""
    try:
        import ormsgpack
    except ImportError:  # pragma: no cover - LangGraph brings it
        value = _decoded(data)
    else:
        def hook(code: int, payload: bytes) -> Any:
            try:
                return ormsgpack.unpackb(payload, ext_hook=hook, option=ormsgpack.OPT_NON_STR_KEYS)
            except (ValueError, TypeError):
                return None
        try:
            value = ormsgpack.unpackb(data, ext_hook=hook, option=ormsgpack.OPT_NON_STR_KEYS)
        except (ValueError, TypeError):
            value = _UNREADABLE
    if value is _UNREADABLE:
        return None
    found: list[str] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            found.append(item)
        elif isinstance(item, bytes):
            try:
                found.append(item.decode("utf-8"))
            except UnicodeDecodeError:
                pass
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return found


def _decoded(data: bytes) -> Any:
    """Msgpack as plain data, extension records decoded as msgpack where they are (a LangGraph
    object record ``[module, name, fields, …]`` shows as its fields)."""
    from gitstate.format.msgpack import MsgpackError, unpack

    def ext(code: int, payload: bytes, nested: Callable[[bytes], Any]) -> Any:
        try:
            inner = nested(payload)
        except MsgpackError:
            return None
        if isinstance(inner, list) and len(inner) >= 3 and isinstance(inner[2], dict):
            return inner[2]
        return inner

    try:
        return unpack(data, ext)
    except (MsgpackError, RecursionError):
        return _UNREADABLE


class _Malformed(Exception):
    """Bytes that are not msgpack."""


class _Rewriter:
    """Copies msgpack item by item, each string redacted (lengths re-encoded)."""

    def __init__(self, data: bytes, scanner: Scanner, out: list[bytes]) -> None:
        self.data = data
        self.scanner = scanner
        self.out = out

    def _fail(self) -> None:
        raise _Malformed

    def item(self, pos: int, depth: int = 0) -> int:
        """Copy the item at ``pos`` (redacted); returns the position after it."""
        data, out = self.data, self.out
        if pos >= len(data) or depth > _MAX_DEPTH:
            self._fail()
        b = data[pos]
        if b <= 0x7F or b >= 0xE0 or b in (0xC0, 0xC2, 0xC3):
            out.append(data[pos:pos + 1])
            return pos + 1
        fixed = {0xCA: 4, 0xCB: 8, 0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8, 0xD0: 1, 0xD1: 2, 0xD2: 4, 0xD3: 8}
        if b in fixed:
            end = pos + 1 + fixed[b]
            out.append(data[pos:end])
            return end
        if 0xA0 <= b <= 0xBF or b in (0xD9, 0xDA, 0xDB):
            n, start = self._length(pos, b, 0xA0, 0x1F, 0xD9)
            self._text(data[start:start + n], text=True)
            return start + n
        if b in (0xC4, 0xC5, 0xC6):
            n, start = self._length(pos, b, -1, 0, 0xC4)
            self._text(data[start:start + n], text=False)
            return start + n
        if 0x90 <= b <= 0x9F or b in (0xDC, 0xDD):
            n, start = self._count(pos, b, 0x90, 0xDC)
            out.append(data[pos:start])
            for _ in range(n):
                start = self.item(start, depth + 1)
            return start
        if 0x80 <= b <= 0x8F or b in (0xDE, 0xDF):
            n, start = self._count(pos, b, 0x80, 0xDE)
            out.append(data[pos:start])
            for _ in range(2 * n):
                start = self.item(start, depth + 1)
            return start
        if b in (0xD4, 0xD5, 0xD6, 0xD7, 0xD8, 0xC7, 0xC8, 0xC9):
            if b >= 0xD4:
                n, start = 1 << (b - 0xD4), pos + 1
            else:
                width = 1 << (b - 0xC7)
                n = int.from_bytes(data[pos + 1:pos + 1 + width], "big")
                start = pos + 1 + width
            code = data[start:start + 1]
            payload = data[start + 1:start + 1 + n]
            if len(payload) != n:
                self._fail()
            inner: list[bytes] = []
            try:
                end = _Rewriter(payload, self.scanner, inner).item(0, depth + 1)
                new = b"".join(inner) if end == n else payload
            except _Malformed:
                new = payload  # not msgpack inside (a timestamp, numpy bytes): copied
            if new == payload:
                out.append(data[pos:start + 1 + n])
            else:
                out.append(_ext_header(len(new)) + code + new)
            return start + 1 + n
        self._fail()
        return pos  # not reached

    def _length(self, pos: int, b: int, fix: int, mask: int, first: int) -> tuple[int, int]:
        data = self.data
        if fix >= 0 and fix <= b <= fix + mask:
            return b & mask, pos + 1
        width = 1 << (b - first)
        if pos + 1 + width > len(data):
            self._fail()
        return int.from_bytes(data[pos + 1:pos + 1 + width], "big"), pos + 1 + width

    def _count(self, pos: int, b: int, fix: int, first: int) -> tuple[int, int]:
        if fix <= b <= fix + 15:
            return b & 0x0F, pos + 1
        width = 2 if b == first else 4
        return int.from_bytes(self.data[pos + 1:pos + 1 + width], "big"), pos + 1 + width

    def _text(self, raw: bytes, *, text: bool) -> None:
        try:
            value = raw.decode("utf-8")
        except UnicodeDecodeError:
            value = None
        new = self.scanner.redact(value)[0] if value is not None else None
        if new is None or new is value:
            self.out.append(_str_header(len(raw)) if text else _bin_header(len(raw)))
            self.out.append(raw)
            return
        encoded = new.encode("utf-8")
        self.out.append(_str_header(len(encoded)) if text else _bin_header(len(encoded)))
        self.out.append(encoded)


def _str_header(n: int) -> bytes:
    if n < 32:
        return bytes([0xA0 | n])
    if n < 1 << 8:
        return bytes([0xD9, n])
    if n < 1 << 16:
        return b"\xda" + struct.pack(">H", n)
    return b"\xdb" + struct.pack(">I", n)


def _bin_header(n: int) -> bytes:
    if n < 1 << 8:
        return bytes([0xC4, n])
    if n < 1 << 16:
        return b"\xc5" + struct.pack(">H", n)
    return b"\xc6" + struct.pack(">I", n)


def _ext_header(n: int) -> bytes:
    if n in (1, 2, 4, 8, 16):
        return bytes([0xD4 + n.bit_length() - 1])
    if n < 1 << 8:
        return bytes([0xC7, n])
    if n < 1 << 16:
        return b"\xc8" + struct.pack(">H", n)
    return b"\xc9" + struct.pack(">I", n)
