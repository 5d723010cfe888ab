"""Versioned session files: files kept inside a run, apart from the workspace, each
version a git commit authored by the writer with the reason as its message.

Layout (see docs/FORMAT.md): one ref per path,
``refs/agentos/<worktree>/runs/<run>/files/<encoded path>`` (the path encoded as one ref component,
so ``a`` and ``a/b`` never conflict; a path longer than the component limit is named ``%%<sha1>``).
The ref points at the latest version; each version's first parent is the previous one. A version
commit's tree holds ``meta.cbor`` (format, path, version, author, reason, time, size) and
``content`` (the bytes). Writers of different paths never contend; writers of one path serialise
through a compare-and-swap on its ref, so versions are 1, 2, 3 … without gaps or duplicates.

When a pull finds that a path advanced on both sides, the remote's versions are kept as the session
file ``<path>@<remote>`` (``-2``, ``-3`` … if taken; see :func:`copy_ref`), exactly as a diverged
branch is kept as ``<branch>@<remote>``: ``list()`` shows it under that name, ``read``/``history``
take that name, and the versions in it still say where they were written (``FileVersion.path``)."""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pygit2
from pygit2.enums import ObjectType

from gitstate.errors import (
    ConflictError,
    CorruptObjectError,
    GitStateError,
    SessionFileNotFound,
    UsageError,
)
from gitstate.format import encoding
from gitstate.format.checkpoint import FORMAT_VERSION, parse_time, read_payload, trailer_value
from gitstate.format.names import MAX_COMPONENT, decode_component, encode_component, run_prefix
from gitstate.git.objects import MODE_BLOB
from gitstate.git.reader import ObjectReader, Signature
from gitstate.git.refs import list_refs, read_ref
from gitstate.store.base import StoreCore
from gitstate.store.transaction import Transaction

FILE_KIND = "gitstate/session-file"
META = "meta.cbor"
CONTENT = "content"
_HASHED = re.compile(r"%%[0-9a-f]{40}")


@dataclass(frozen=True)
class FileVersion:
    """One version of a session file; ``commit`` is the id of the git commit holding it."""

    path: str
    version: int
    author: str
    reason: str
    created_at: datetime
    size: int
    commit: str = ""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly form."""
        return {"path": self.path, "version": self.version, "author": self.author, "reason": self.reason,
                "created_at": self.created_at.isoformat(), "size": self.size, "commit": self.commit}


class FileListing(dict[str, FileVersion]):
    """What :meth:`SessionFiles.list` returns: ``{path: latest FileVersion}`` plus ``errors``,
    ``{path: message}`` for the files left out because their latest version cannot be read."""

    def __init__(self, items: Iterable[tuple[str, FileVersion]] = (), *, errors: dict[str, str] | None = None) -> None:
        super().__init__(items)
        self.errors: dict[str, str] = dict(errors or {})


def _component(path: str) -> str:
    enc = encode_component(path)
    if len(enc) > MAX_COMPONENT:
        return "%%" + hashlib.sha1(path.encode("utf-8", "surrogatepass"), usedforsecurity=False).hexdigest()
    return enc


def _hashed(path: str) -> str:
    return "%%" + hashlib.sha1(path.encode("utf-8", "surrogatepass"), usedforsecurity=False).hexdigest()


def read_meta(reader: ObjectReader, oid: str) -> dict[str, Any]:
    """Decode and check the ``meta.cbor`` of one session-file version commit
    (:class:`CorruptObjectError` / :class:`UnsupportedFormatError` when it is not a sound one)."""
    meta = read_payload(reader, reader.commit(oid), META, FILE_KIND, "session file version")
    version, path = meta.get("version"), meta.get("path")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1 or not isinstance(path, str):
        raise CorruptObjectError(oid, "session file version lacks a path or version")
    return meta


def check_chain(reader: ObjectReader, tip: str) -> Iterator[tuple[str, str]]:
    """Every problem of the version chain from ``tip`` as ``(oid, message)``: unreadable commits or
    metadata, unknown formats, versions not consecutive down to 1, ``content`` missing or not a
    blob. The contents are never loaded (a loose one is streamed once to check it inflates)."""
    oid: str | None = tip
    expected: int | None = None
    while oid is not None:
        try:
            meta = read_meta(reader, oid)
            commit = reader.commit(oid)
            entry = reader.tree(commit.tree_id).get(CONTENT)
        except GitStateError as exc:
            yield oid, str(exc)
            return
        version = meta["version"]
        if expected is not None and version != expected:
            yield oid, f"version {version} follows version {expected + 1} (versions must be consecutive)"
        if entry is None or entry.type_str != "blob":
            yield oid, f"session file version has no {CONTENT} blob"
        else:
            try:
                kind, _size = reader.header(entry.id)
                if kind != ObjectType.BLOB:
                    yield oid, f"{CONTENT} {entry.id[:12]} is not a blob"
            except CorruptObjectError as exc:
                yield oid, f"{CONTENT} blob {entry.id[:12]}: {exc.reason}"
        parents = commit.parent_ids
        if not parents and version != 1:
            yield oid, f"the first version is {version}, not 1"
        expected = version - 1
        oid = parents[0] if parents else None


def copy_ref(repo: pygit2.Repository, ref: str, label: str, n: int = 1) -> tuple[str, str]:
    """The ref and path under which a pull keeps ``label``'s diverged versions of the session file
    at ``ref``: the path ``<path>@<label>`` (then ``-2``, ``-3`` …). A path too long for a ref
    component (named ``%%<sha1>``) gets ``%%<sha1>@<label>``, which :meth:`SessionFiles.ref`
    resolves for that path too; its path is then read from the local versions' metadata."""
    prefix, _, component = ref.rpartition("/")
    suffix = f"@{label}" + (f"-{n}" if n > 1 else "")
    if _HASHED.fullmatch(component):
        tip = read_ref(repo, ref)
        path = read_meta(ObjectReader(repo), tip)["path"] if tip else component
    else:
        path = decode_component(component)
        if len(encode_component(path + suffix)) <= MAX_COMPONENT:
            return f"{prefix}/{encode_component(path + suffix)}", path + suffix
        component = _hashed(path)
    return f"{prefix}/{component}{encode_component(suffix)}", path + suffix


def is_copy_of(ref: str, label: str) -> bool:
    """Whether a session-file ref is a copy of ``label``'s own versions kept by pull (so a push
    to that remote leaves it out): its name ends in ``@<label>`` or ``@<label>-<n>``."""
    component = ref.rpartition("/")[2]
    return re.search(re.escape(encode_component("@" + label)) + r"(-[0-9]+)?$", component) is not None


def _hashed_key(sha: str, suffix: str, path: str) -> str:
    """The path a ``%%<sha1><suffix>`` ref lists under, given its latest version's ``path``."""
    if not suffix or _hashed(path) == sha:
        return path + suffix
    if path.endswith(suffix) and _hashed(path[:-len(suffix)]) == sha:
        return path  # written to the copy since the pull
    return path + suffix


def _content_bytes(content: Any) -> bytes:
    """Session file content as bytes: bytes-like objects as they are, ``str`` as UTF-8."""
    if isinstance(content, str):
        try:
            return content.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise UsageError(f"session file content is not encodable as UTF-8: {exc.reason}") from None
    if isinstance(content, (bytes, bytearray, memoryview)):
        return bytes(content)
    raise UsageError(f"session file content must be bytes or str, not {type(content).__name__}")


def _check_count(name: str, value: Any, minimum: int) -> None:
    """Refuse a version number that is not an int (``bool`` excluded) of at least ``minimum``."""
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        kind = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise UsageError(f"{name} must be {kind}, got {value!r}")


def _clean(text: str) -> str:
    return text.replace("<", "").replace(">", "").replace("\n", " ").strip()


def _message(path: str, version: int, author: str, run_id: str, reason: str) -> str:
    lines = reason.strip().replace("\r", "").splitlines() or [f"write {path}"]
    body = "\n".join(lines[1:]).strip()
    trailers = [("Path", path), ("Version", version), ("Author", author), ("Run", run_id),
                ("Gitstate-Format", FORMAT_VERSION)]
    text = lines[0] + "\n\n" + (body + "\n\n" if body else "")
    return text + "".join(f"{k}: {trailer_value(v)}\n" for k, v in trailers)


class SessionFiles:
    """The session files of one run (``run.files``)."""

    def __init__(self, store: StoreCore, run_id: str, worktree: str) -> None:
        self.store = store
        self.run_id = run_id
        self.prefix = run_prefix(worktree, run_id) + "files/"

    def ref(self, path: str) -> str:
        """The ref holding the latest version of ``path``."""
        if not isinstance(path, str) or not path or "\x00" in path:
            raise UsageError(f"invalid session file path {path!r}")
        component = _component(path)
        if _HASHED.fullmatch(component) and "@" in path:  # a pull's copy of a long path's versions?
            base, _, suffix = path.rpartition("@")
            copy = _hashed(base) + encode_component("@" + suffix)
            if read_ref(self.store.repo, self.prefix + copy):
                return self.prefix + copy
        return self.prefix + component

    # -- reading --------------------------------------------------------------------------------

    def _meta(self, oid: str) -> dict[str, Any]:
        return read_meta(self.store.reader, oid)

    def _version(self, oid: str, meta: dict[str, Any] | None = None) -> FileVersion:
        meta = meta or self._meta(oid)
        return FileVersion(path=meta["path"], version=meta["version"], author=str(meta.get("author", "")),
                           reason=str(meta.get("reason", "")), created_at=parse_time(meta.get("created_at")),
                           size=int(meta.get("size", 0)), commit=oid)

    def _chain(self, path: str) -> Iterator[tuple[str, dict[str, Any]]]:
        oid = read_ref(self.store.repo, self.ref(path))
        if oid is None:
            raise SessionFileNotFound(path)
        while oid is not None:
            meta = self._meta(oid)
            yield oid, meta
            parents = self.store.reader.commit(oid).parent_ids
            oid = parents[0] if parents else None

    def latest(self, path: str) -> FileVersion | None:
        """The latest version of ``path``, or ``None`` if it was never written."""
        oid = read_ref(self.store.repo, self.ref(path))
        return None if oid is None else self._version(oid)

    def read(self, path: str, version: int | None = None) -> bytes:
        """The bytes of the latest version of ``path`` (or of ``version``, a positive integer)."""
        if version is not None:
            _check_count("version", version, minimum=1)
        for oid, meta in self._chain(path):
            if version is None or meta["version"] == version:
                reader = self.store.reader
                blob = reader.tree(reader.commit(oid).tree_id).get(CONTENT)
                if blob is None:
                    raise CorruptObjectError(oid, f"session file version has no {CONTENT}")
                return reader.blob(blob.id)
            if meta["version"] < version:
                break
        raise SessionFileNotFound(path, version)

    def history(self, path: str) -> list[FileVersion]:
        """Every version of ``path``, oldest first."""
        out = [self._version(oid, meta) for oid, meta in self._chain(path)]
        out.reverse()
        return out

    def list(self) -> FileListing:
        """The latest version of every session file of the run, by path (a pull's copy of another
        repository's versions under ``<path>@<remote>``, its ``FileVersion.path`` saying where
        they were written). A file whose latest version cannot be read is left out and its error
        recorded in the listing's ``errors`` (``{path or ref component: message}``)."""
        out: dict[str, FileVersion] = {}
        errors: dict[str, str] = {}
        for name, oid in list_refs(self.store.repo, self.prefix):
            component = name[len(self.prefix):]
            hashed = _HASHED.match(component)
            key: str | None = None
            if not hashed:
                try:
                    key = decode_component(component)
                except ValueError:
                    continue  # not a session file ref name
            try:
                fv = self._version(oid)
            except GitStateError as exc:
                errors[key or component] = str(exc)
                continue
            if hashed:
                try:
                    key = _hashed_key(component[:hashed.end()], decode_component(component[hashed.end():]),
                                      fv.path)
                except ValueError:
                    continue
            out[key or fv.path] = fv
        return FileListing(sorted(out.items()), errors=errors)

    # -- writing --------------------------------------------------------------------------------

    def write(self, path: str, content: bytes | str, *, author: str, reason: str = "",
              expect_version: int | None = None) -> FileVersion:
        """Add a version of ``path`` and return it.

        Without ``expect_version`` the write lands after whatever version is current (concurrent
        writers all land, each with its own consecutive number). With it (``0``: the file must not
        exist yet), :class:`ConflictError` is raised and nothing is written unless the latest
        version is exactly ``expect_version``."""
        # the store's secrets policy on a text file (warn: the push check finds it)
        data = self.store.secrets.file(_content_bytes(content), f"files[{path!r}]", [])
        if expect_version is not None:
            _check_count("expect_version", expect_version, minimum=0)
        if not isinstance(author, str) or not author.strip():
            raise UsageError("author must be a non-empty string (e.g. 'agent:surgeon')")
        ref = self.ref(path)
        store = self.store
        name = _clean(author) or "unknown"

        def build(tx: Transaction) -> FileVersion:
            blob = tx.blob(data)
            tip = store.read_ref(ref)
            current = 0 if tip is None else int(self._meta(tip)["version"])
            if expect_version is not None and current != expect_version:
                raise ConflictError(ref, str(expect_version), str(current), what="session file version")
            version = current + 1
            now = time.time()
            created = datetime.fromtimestamp(now, UTC)
            meta = {"format": FILE_KIND, "v": FORMAT_VERSION, "run": self.run_id, "path": path,
                    "version": version, "author": author, "reason": reason, "size": len(data),
                    "created_at": created.strftime("%Y-%m-%dT%H:%M:%S.%fZ")}
            message = _message(path, version, name, self.run_id, reason)
            tree = tx.tree([(META, tx.blob(encoding.dumps(meta, "session file")), MODE_BLOB),
                            (CONTENT, blob, MODE_BLOB)])
            oid = tx.commit(tree, [tip] if tip else [], message, when=now,
                            author=Signature(name, store.identity[1], int(now), 0))
            tx.set_ref(ref, tip, oid, f"gitstate: session file {path} version {version}",
                       strict=expect_version is not None)
            return FileVersion(path, version, author, reason, created, len(data), oid)

        try:
            return store.write(build)
        except ConflictError as exc:
            if expect_version is None or exc.what != "ref":
                raise
            actual = store.read_ref(ref)
            found = "0" if actual is None else str(self._meta(actual)["version"])
            raise ConflictError(ref, str(expect_version), found, what="session file version") from None

