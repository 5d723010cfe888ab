"""The throw-away repository one chunk of a push is sent from.

``git push`` matches each explicit refspec against every local ref (a thousand refspecs in a
repository of 20,000 refs take git tens of seconds), and one glob refspec covers a namespace,
not a chosen set of refs. So a chunk is pushed from a *shadow* repository: a bare repository
inside the git dir (``agentos/push-shadow-<pid>-<token>/``) whose only refs are the chunk's
(one ``packed-refs`` file, written directly: nobody else knows the repository), whose objects
are the store's (``objects/info/alternates``), whose config includes the repository's own (so
the remote's name, URLs, ``insteadOf`` rewrites, credential helpers and http settings are the
user's) and whose hooks are the repository's (the ``pre-push`` leak guard runs as for any push).
``git push REMOTE 'refs/agentos/*:refs/agentos/*'`` from it sends exactly the chunk: no ref is
written to or removed from the user's repository, no lock taken, nothing for ``git gc`` to see.
A shadow left by a killed push is removed by the next one once its process is gone."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
from collections.abc import Callable

from gitstate.git.objects import objects_dir
from gitstate.store.store import Store
from gitstate.sync.hooks import hooks_dir

_PREFIX = "push-shadow-"


def _root(store: Store) -> str:
    return os.path.join(store.location.common_dir, "agentos")


def remove_stale(store: Store, alive: Callable[[int], bool]) -> None:
    """Remove shadows whose push process is gone (``alive(pid)`` says it is not)."""
    root = _root(store)
    try:
        names = os.listdir(root)
    except OSError:
        return
    for name in names:
        if not name.startswith(_PREFIX):
            continue
        pid = name[len(_PREFIX):].split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not alive(int(pid)):
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)


class Shadow:
    """A shadow repository for one push (see the module docstring); :meth:`load` puts a chunk's
    refs in it, :meth:`close` removes it."""

    def __init__(self, store: Store) -> None:
        self.path = os.path.join(_root(store), f"{_PREFIX}{os.getpid()}-{secrets.token_hex(4)}")
        os.makedirs(os.path.join(self.path, "refs"), exist_ok=True)
        os.makedirs(os.path.join(self.path, "objects", "info"), exist_ok=True)
        with open(os.path.join(self.path, "HEAD"), "w", encoding="utf-8") as fh:
            fh.write("ref: refs/heads/main\n")
        with open(os.path.join(self.path, "objects", "info", "alternates"), "w", encoding="utf-8") as fh:
            fh.write(os.path.abspath(objects_dir(store.repo)) + "\n")
        self.store = store
        self.configured = False

    def _configure(self, sha256: bool) -> None:
        store = self.store
        config = os.path.join(store.location.common_dir, "config")
        lines = ["[core]", "\trepositoryformatversion = " + ("1" if sha256 else "0"), "\tbare = true"]
        if sha256:
            lines += ["[extensions]", "\tobjectFormat = sha256"]
        lines += ["[include]", f"\tpath = {_quoted(os.path.abspath(config))}"]
        worktree_config = os.path.join(store.location.git_dir, "config.worktree")
        if os.path.isfile(worktree_config):
            lines.append(f"\tpath = {_quoted(os.path.abspath(worktree_config))}")
        # after the include, so that they win: a bare repository using the user's hooks
        lines += ["[core]", "\tbare = true", f"\thooksPath = {_quoted(os.path.abspath(hooks_dir(store)))}",
                  "\tfsync = none", "[gc]", "\tauto = 0", "[maintenance]", "\tauto = false"]
        with open(os.path.join(self.path, "config"), "w", encoding="utf-8") as fh:
            fh.write("\n".join(lines) + "\n")
        self.configured = True

    def load(self, refs: dict[str, str]) -> None:
        """Make ``refs`` (``{name: object id}``) the shadow's only refs."""
        if not self.configured:
            self._configure(any(len(oid) == 64 for oid in refs.values()))
        body = "".join(f"{oid} {name}\n" for name, oid in sorted(refs.items()))
        tmp = os.path.join(self.path, "packed-refs.tmp")
        with open(tmp, "w", encoding="utf-8", errors="surrogateescape") as fh:
            fh.write("# pack-refs with: sorted \n" + body)
        os.replace(tmp, os.path.join(self.path, "packed-refs"))

    def close(self) -> None:
        """Remove the shadow."""
        with contextlib.suppress(OSError):
            shutil.rmtree(self.path)


def _quoted(path: str) -> str:
    return '"' + path.replace("\\", "\\\\").replace('"', '\\"') + '"'
