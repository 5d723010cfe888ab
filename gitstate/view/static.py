"""``git agentos view RUN --html FILE``: the view of one or more runs as one self-contained HTML file
(no server, no network), e.g. a CI artifact.

The file holds the page's own script and style inline, allowed by a Content-Security-Policy that
names their SHA-256 hashes (nothing else may run or load), and the data as one
``<script type="application/json">`` element (``<``, ``>``, ``&``, U+2028/9 escaped) that the script
reads with ``JSON.parse``; data is never script and is put into the page as text.

The data mirrors git's own sharing: state trees, list chunks and workspace trees are stored once per
object id, and decoded values once per distinct value (a value seen again is a reference), so a run
whose state grows by one message per step costs about its messages, not a copy of the state per
checkpoint. File contents are included up to a budget (text only); the rest is listed with sizes."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gitstate.errors import CorruptObjectError, GitStateError, OutputWriteError, RunNotFound
from gitstate.format import checkpoint as cpfmt
from gitstate.format import lgtree
from gitstate.format.checkpoint import Checkpoint
from gitstate.format.statetree import StateReader
from gitstate.git.objects import MODE_TREE
from gitstate.git.reader import ObjectReader
from gitstate.secrets import masked
from gitstate.store.store import Store
from gitstate.view import values
from gitstate.view.data import ViewData, checkpoint_commands, checkpoint_label, iso
from gitstate.view.server import asset, safe_json
from gitstate.view.values import STATIC, Limits

FILE_BUDGET = 2 * 1024 * 1024  # bytes of workspace file contents embedded in all
MAX_FILE = 128 * 1024  # a file larger than this is listed, not embedded
INTERN_MIN = 48  # values whose JSON is at least this long are stored once and referenced
SESSION_VERSIONS = 30
OID_CHARS = 16  # object ids in the file are cut to 64 bits (a collision among one file's objects is not a concern)


def short(oid: str) -> str:
    """An object id as the file names it."""
    return oid[:OID_CHARS]


@dataclass(frozen=True)
class HtmlResult:
    """What :func:`write_html` wrote."""

    path: str
    runs: tuple[str, ...]
    checkpoints: int
    size: int
    errors: tuple[str, ...] = ()  # what the page shows as unreadable: "run <id>: …", "checkpoint <id>: …"


class Bundle:
    """The data of the static page: runs, graphs and checkpoints, objects shared by id, values
    shared by content."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.data = ViewData(store, STATIC)
        self.reader: ObjectReader = store.core.reader
        self.state_reader = StateReader(self.reader)
        self.values: list[Any] = []
        self._interned: dict[str, int] = {}
        self.objects: dict[str, Any] = {}
        self.blobs: dict[str, Any] = {}
        self.file_bytes = 0
        self.checkpoints: dict[str, Any] = {}

    # -- values -------------------------------------------------------------------------------

    def intern(self, vv: Any) -> Any:
        """``vv`` with every large text, list or mapping inside it replaced by ``{"$ref": n}`` into
        :attr:`values` (equal values share one entry)."""
        if isinstance(vv, list):
            shared: Any = [self.intern(v) for v in vv]
        elif isinstance(vv, dict) and "$map" in vv:
            shared = {**vv, "$map": [[self.intern(k), self.intern(v)] for k, v in vv["$map"]]}
        elif isinstance(vv, str | dict):
            shared = vv
        else:
            return vv
        if isinstance(shared, str) and len(shared) < INTERN_MIN:
            return shared
        text = json.dumps(shared, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        if len(text) < INTERN_MIN:
            return shared
        index = self._interned.get(text)
        if index is None:
            index = self._interned[text] = len(self.values)
            self.values.append(shared)
        return {"$ref": index}

    def value(self, python_value: Any, limits: Limits = STATIC) -> Any:
        """A decoded value as an interned view value."""
        return self.intern(values.encode(python_value, limits))

    # -- objects ------------------------------------------------------------------------------

    def add_state(self, kind: str, oid: str, depth: int = 0) -> None:
        """Store a state entry (``cbor`` blob, ``map`` tree or ``list`` tree) and what it holds."""
        key = short(oid)
        if key in self.objects:
            return
        if depth > 64:
            raise CorruptObjectError(oid, "state trees nested too deep")
        if kind == "cbor":
            self.objects[key] = {"t": "cbor", "v": self.value(self.state_reader.blob_value(oid))}
        elif kind == "map":
            entries = self.state_reader.entries(oid)
            self.objects[key] = {"t": "map", "e": [[name, k, short(sub)] for name, (k, sub) in entries.items()]}
            for k, sub in entries.values():
                self.add_state(k, sub, depth + 1)
        else:
            parts = []
            for item in self.reader.tree(oid):
                if item.type_str == "tree":
                    parts.append("l" + short(item.id))
                    self.add_state("list", item.id, depth + 1)
                else:
                    parts.append("c" + short(item.id))
                    if short(item.id) not in self.objects:
                        chunk = self.state_reader.blob_value(item.id)
                        if not isinstance(chunk, list):
                            raise CorruptObjectError(item.id, "list chunk is not an array")
                        self.objects[short(item.id)] = {"t": "chunk", "v": [self.value(v) for v in chunk]}
            self.objects[key] = {"t": "list", "p": parts}

    def add_channels(self, oid: str) -> str:
        """A LangGraph checkpoint's values tree (``langgraph/``) as a ``map`` of its channels, each
        decoded for display by the functions the server's state and diff use
        (:func:`lgtree.shown_entries`, :func:`lgtree.show_entry`); returns its key in
        :attr:`objects`. A channel's value is stored once per entry (name, mode and id, what the
        server compares to tell a channel unchanged), so an unchanged channel is decoded once."""
        key = "lg" + short(oid)
        if key in self.objects:
            return key
        entries = []
        for channel, (name, sub, mode) in sorted(lgtree.shown_entries(self.reader, oid).items()):
            ident = hashlib.sha1(f"{name}\0{mode:o}\0{sub}".encode("utf-8", "surrogateescape"),
                                 usedforsecurity=False).hexdigest()
            sub_key = "lg" + short(ident)
            if sub_key not in self.objects:
                self.objects[sub_key] = {"t": "cbor", "v": self.value(lgtree.show_entry(self.reader, name, sub, mode))}
            entries.append([channel, "cbor", sub_key])
        self.objects[key] = {"t": "map", "e": entries}
        return key

    def add_list_blob(self, oid: str) -> None:
        """``tools.cbor`` / ``audit.cbor``."""
        if short(oid) not in self.objects:
            self.objects[short(oid)] = {"t": "cbor", "v": self.value(self.state_reader.blob_value(oid))}

    def add_files(self, oid: str, depth: int = 0) -> None:
        """A workspace snapshot tree, its subtrees and (within the budget) its text files."""
        if short(oid) in self.objects:
            return
        if depth > 64:
            raise CorruptObjectError(oid, "workspace tree nested too deep")
        entries = []
        for item in self.reader.tree(oid):
            if item.filemode == MODE_TREE:
                entries.append([item.name, "tree", short(item.id), 0, f"{item.filemode:06o}"])
                self.add_files(item.id, depth + 1)
            else:
                size = self.reader.header(item.id)[1]
                entries.append([item.name, "link" if item.filemode == 0o120000 else "blob", short(item.id), size,
                                f"{item.filemode:06o}"])
                self.add_blob(item.id, size)
        self.objects[short(oid)] = {"t": "files", "e": entries}

    def add_blob(self, oid: str, size: int) -> None:
        """A file's content, if it fits the budget."""
        key = short(oid)
        if key in self.blobs:
            return
        if size > MAX_FILE or self.file_bytes + size > FILE_BUDGET:
            self.blobs[key] = {"size": size, "omitted": True}
            return
        data = self.reader.blob(oid)
        self.file_bytes += len(data)
        if values.is_binary(data):
            self.blobs[key] = {"size": size, "binary": True, "hex": data[:256].hex()}
        else:
            self.blobs[key] = {"size": size, "text": masked(data.decode("utf-8", "replace"))}

    # -- checkpoints --------------------------------------------------------------------------

    def add_checkpoint(self, oid: str) -> None:
        """One checkpoint's record: its fields, and references to its state, tools, audit, files."""
        if oid in self.checkpoints:
            return
        try:
            cp = self.store.read_checkpoint(oid)
            self.checkpoints[oid] = self.record(cp)
        except GitStateError as exc:
            self.checkpoints[oid] = {"id": oid, "short": oid[:12], "error": str(exc)}

    def record(self, cp: Checkpoint) -> dict[str, Any]:
        """The static form of :meth:`ViewData.checkpoint`: values by reference."""
        out = checkpoint_label(cp)
        out.update(parents=list(cp.parent_ids), workflow=cp.workflow, node_entry=cp.node_entry, base=cp.base,
                   tree=cp.tree_id, metadata=self.value(cp.metadata),
                   files_paths=None if cp.files_paths is None else list(cp.files_paths))
        if cp.workflow == lgtree.WORKFLOW:
            out["langgraph_commands"] = True  # the page shows git_checkpoint_langgraph for it
        root = self.reader.tree(cp.tree_id)
        # the state Checkpoint.state shows: the state tree, else LangGraph's channels, else the leaf
        # (a LangGraph checkpoint's state.cbor only says where its values are)
        state = root.get(cpfmt.STATE_TREE)
        channels = lgtree.values_tree(root)
        leaf = root.get(cpfmt.STATE_LEAF)
        if state is not None:
            out["state_ref"] = ["map", short(state.id)]
            self.add_state("map", state.id)
        elif channels is not None:
            out["state_ref"] = ["map", self.add_channels(channels)]
        elif leaf is not None:
            out["state_ref"] = ["cbor", short(leaf.id)]
            self.add_state("cbor", leaf.id)
        else:
            out["state_ref"] = None
        for name, entry in (("tools_ref", cpfmt.TOOLS), ("audit_ref", cpfmt.AUDIT)):
            item = root.get(entry)
            out[name] = short(item.id) if item is not None else None
            if item is not None:
                self.add_list_blob(item.id)
        files = root.get(cpfmt.FILES)
        out["files_tree"] = short(files.id) if files is not None else None
        if files is not None:
            self.add_files(files.id)
        return out


def build(store: Store, run_ids: Sequence[str] | None = None, worktree: str | None = None,
          all_worktrees: bool = False) -> dict[str, Any]:
    """The data of the static view of ``run_ids`` (default: every run of the worktree, or of all)."""
    bundle = Bundle(store)
    data = bundle.data
    every = data.run_refs(all_worktrees=all_worktrees, worktree=worktree)
    if run_ids:
        wanted = {r for r in run_ids}
        chosen = [r for r in every if r.run_id in wanted and (all_worktrees or r.worktree == (worktree or store.worktree))]
        found = {r.run_id for r in chosen}
        for run_id in run_ids:
            if run_id not in found:
                raise RunNotFound(run_id, worktree or store.worktree)
    else:
        chosen = every
    rows = []
    runs = []
    for refs in chosen:
        row = data.run_row(refs)
        row["search"] = data.summary(refs)[2]
        rows.append(row)
        if refs.record is None:
            continue
        graph = data.graph(refs.run_id, refs.worktree, 0, 1_000_000)
        graph["offset"] = 0
        for r in graph["rows"]:
            bundle.add_checkpoint(r["id"])
        try:
            nodes = data.nodes(refs.run_id, refs.worktree)["nodes"]
        except GitStateError:
            nodes = []
        try:
            sessions = data.session_files(refs.run_id, refs.worktree)
            files = {f["key"]: data.session_file(refs.run_id, f["key"], refs.worktree, SESSION_VERSIONS)
                     for f in sessions["files"]}
        except GitStateError:
            sessions, files = {"files": [], "errors": {}}, {}
        runs.append({"id": refs.run_id, "worktree": refs.worktree, "graph": graph, "nodes": nodes,
                     "session_files": sessions, "session_file": files})
    rows.sort(key=lambda r: (r["updated_at"], r["id"]), reverse=True)
    # the plain-git commands of a checkpoint, once: the page puts each checkpoint's id in
    commands = checkpoint_commands("{id}")
    return {"mode": "static", "generated_at": iso(datetime.now(UTC)), "worktree": store.worktree,
            "git_checkpoint": commands, "git_checkpoint_langgraph": checkpoint_commands("{id}", langgraph=True),
            "path": store.path, "runs": rows, "graphs": runs, "checkpoints": bundle.checkpoints,
            "objects": bundle.objects, "values": bundle.values, "blobs": bundle.blobs}


def _sha256(text: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii")


def render(data: dict[str, Any]) -> str:
    """The HTML document: inline script and style (allowed by their hashes), data as JSON."""
    script = asset("app.js").decode("utf-8")
    style = asset("app.css").decode("utf-8")
    if "</script" in script.lower() or "</style" in style.lower():  # pragma: no cover - a packaging bug
        raise ValueError("an asset would end its own element")
    csp = (f"default-src 'none'; script-src '{_sha256(script)}'; style-src '{_sha256(style)}'; "
           "img-src data:; connect-src 'none'; base-uri 'none'; form-action 'none'")
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<meta http-equiv=\"Content-Security-Policy\" content=\"{csp}\">\n"
            "<meta name=\"referrer\" content=\"no-referrer\">\n"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
            "<title>gitstate view</title>\n<link rel=\"icon\" href=\"data:,\">\n"
            f"<style>{style}</style>\n</head>\n<body>\n"
            "<noscript>This page needs JavaScript to show the runs it holds.</noscript>\n"
            "<div id=\"app\"></div>\n"
            f"<script type=\"application/json\" id=\"gitstate-data\">{safe_json(data)}</script>\n"
            f"<script>{script}</script>\n</body>\n</html>\n")


def write_html(store: Store, run_ids: Sequence[str] | None, path: str | os.PathLike[str], *,
               all_worktrees: bool = False) -> HtmlResult:
    """Write the static view of ``run_ids`` (default: every run of the worktree) to ``path``."""
    data = build(store, run_ids, all_worktrees=all_worktrees)
    text = render(data)
    target = os.fspath(path)
    _write_output(target, text.encode("utf-8"))
    errors = (tuple(f"run {r['id']}: {r['error']}" for r in data["runs"] if r.get("error"))
              + tuple(f"checkpoint {c['short']}: {c['error']}" for c in data["checkpoints"].values() if "error" in c))
    return HtmlResult(target, tuple(r["id"] for r in data["graphs"]), len(data["checkpoints"]),
                      len(text.encode("utf-8")), errors)


def _write_output(target: str, data: bytes) -> None:
    """Write ``data`` to ``target`` as a shell's ``>`` would, never half-written: a regular file (or
    a new one) is replaced whole through a temporary file beside it (a symbolic link is written
    through, not replaced); anything else that exists there (``/dev/stdout``, a pipe, a device) is
    opened and written, never replaced by a file. :class:`OutputWriteError` names the path."""
    real = os.path.realpath(target)
    try:
        st = os.stat(real)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise OutputWriteError(target, exc.strerror or str(exc)) from exc
    try:
        if st is not None and not stat.S_ISREG(st.st_mode):
            if stat.S_ISDIR(st.st_mode):
                raise OutputWriteError(target, "it is a directory")
            with open(real, "wb") as fh:
                fh.write(data)
            return
        tmp = f"{real}.{os.getpid()}.tmp"
        try:
            with open(tmp, "wb") as fh:
                fh.write(data)
            os.replace(tmp, real)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
    except OSError as exc:
        raise OutputWriteError(target, exc.strerror or str(exc)) from exc
