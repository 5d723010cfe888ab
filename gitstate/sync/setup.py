"""What ``git agentos setup`` configures in a repository, and the check that it still works:
the textconv that makes ``git show``/``git log -p``/``git diff`` print checkpoints decoded
(:mod:`gitstate.sync.textconv`), the optional pre-push leak guard (:mod:`gitstate.sync.hooks`),
and the push allow list (``agentos.pushRemotes``) it relies on. Setting up writes only the
repository's ``config`` (``diff.agentos.textconv``; when asked, ``log.excludeDecoration``), a
marked block of ``info/attributes`` and, when asked, the ``pre-push`` hook; the check writes
nothing."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from gitstate.errors import StoreWriteError
from gitstate.format.names import NAMESPACE
from gitstate.git.command import last_line, run_git
from gitstate.store.store import Store
from gitstate.sync import textconv
from gitstate.sync.hooks import HookInstall, HookStatus, allowed_remotes, hook_status, install_hooks

#: The ``log.excludeDecoration`` value that keeps checkpoint refs out of ``git log``'s decorations.
HIDDEN_DECORATION = NAMESPACE
#: What leaves the checkpoints out of ``git log --all`` (and ``gitk --all``): git has no setting
#: for it, and ``--exclude`` applies to the ``--all`` after it only.
LOG_ALL_WITHOUT_CHECKPOINTS = f"git log --exclude='{NAMESPACE}*' --all"


@dataclass(frozen=True)
class SetupDone:
    """What :func:`setup` did: ``readable`` (the textconv and attributes), ``hook`` (the
    pre-push guard's installation, ``None`` when not asked for) and ``hid_refs`` (whether it
    added ``log.excludeDecoration``; ``None`` when not asked for)."""

    readable: textconv.SetupResult
    hook: HookInstall | None
    hid_refs: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly form (the CLI's ``setup --json`` shape)."""
        r = self.readable
        return {"config_path": r.config_path, "attributes_path": r.attributes_path, "textconv": r.command,
                "config_changed": r.config_changed, "attributes_changed": r.attributes_changed,
                "hook": None if self.hook is None else
                {"path": self.hook.path, "action": self.hook.action, "chained": self.hook.chained},
                "hide_refs": None if self.hid_refs is None else
                {"log.excludeDecoration": HIDDEN_DECORATION, "changed": self.hid_refs},
                "log_all": LOG_ALL_WITHOUT_CHECKPOINTS}


@dataclass(frozen=True)
class SetupReport:
    """What :func:`check` found: the textconv and attributes (``readable``), the pre-push guard
    (``hook``) and the allowed push remotes. ``ok`` when checkpoints print decoded and an
    installed guard is usable (a guard that was never installed is not a failure: it is
    optional)."""

    readable: textconv.SetupCheck
    hook: HookStatus
    push_remotes: list[str]
    refs_hidden: bool = False

    @property
    def ok(self) -> bool:
        """True when nothing set up is broken or missing (the hook is optional)."""
        return self.readable.ok and self.hook.state not in ("not-executable", "outdated")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly form (the CLI's ``setup --check --json`` shape)."""
        r = self.readable
        return {"ok": self.ok,
                "textconv": {"state": r.textconv, "command": r.command, "detail": r.detail,
                             "config_path": r.config_path},
                "attributes": {"state": r.attributes, "path": r.attributes_path},
                "hook": {"state": self.hook.state, "path": self.hook.path, "chained": self.hook.chained},
                "push_remotes": self.push_remotes, "refs_hidden": self.refs_hidden}


def setup(store: Store, hooks: bool = False, executable: str | None = None, hide_refs: bool = False) -> SetupDone:
    """Register the textconv (idempotent), with ``hooks`` install the pre-push guard, and with
    ``hide_refs`` keep checkpoint refs out of ``git log``'s decorations (:func:`hide_decorations`).
    ``executable``: the ``git-agentos`` running setup (its absolute path is the driver's fallback
    when git runs it with a PATH that lacks one; default: the one on PATH)."""
    readable = textconv.setup(store.location, textconv.textconv_command(executable))
    hid = hide_decorations(store) if hide_refs else None
    return SetupDone(readable, install_hooks(store) if hooks else None, hid)


def _config_file(store: Store) -> str:
    return os.path.join(store.location.common_dir, "config")


def refs_hidden(store: Store) -> bool:
    """Whether the repository's config holds ``log.excludeDecoration=refs/agentos/``."""
    found = run_git(None, ["config", "--file", _config_file(store), "--get-all", "log.excludeDecoration"])
    return found.returncode == 0 and HIDDEN_DECORATION in found.stdout.splitlines()


def hide_decorations(store: Store) -> bool:
    """Add ``log.excludeDecoration=refs/agentos/`` to the repository's config unless it is there
    (the variable may hold several patterns; the others are kept), so ``git log --decorate`` (also
    with ``log.initialDecorationSet=all``) labels no commit with a checkpoint ref. Returns whether
    it was added. The commits themselves still show under ``--all``: see
    :data:`LOG_ALL_WITHOUT_CHECKPOINTS`."""
    if refs_hidden(store):
        return False
    config = _config_file(store)
    done = run_git(None, ["config", "--file", config, "--add", "log.excludeDecoration", HIDDEN_DECORATION])
    if done.returncode != 0:
        raise StoreWriteError(config, last_line(done.stderr) or "git config failed")
    return True


def check(store: Store) -> SetupReport:
    """Check the setup without changing anything (see :class:`SetupReport`)."""
    return SetupReport(textconv.check(store.location), hook_status(store), allowed_remotes(store), refs_hidden(store))
