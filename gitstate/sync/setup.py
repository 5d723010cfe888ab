"""What ``git agentos setup`` configures in a repository, and the check that it still works:
the textconv that makes ``git show``/``git log -p``/``git diff`` print checkpoints decoded
(:mod:`gitstate.sync.textconv`), the optional pre-push leak guard (:mod:`gitstate.sync.hooks`),
and the push allow list (``agentos.pushRemotes``) it relies on. Setting up writes only the
repository's ``config`` (``diff.agentos.textconv``), a marked block of ``info/attributes`` and,
when asked, the ``pre-push`` hook; the check writes nothing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gitstate.store.store import Store
from gitstate.sync import textconv
from gitstate.sync.hooks import HookInstall, HookStatus, allowed_remotes, hook_status, install_hooks


@dataclass(frozen=True)
class SetupDone:
    """What :func:`setup` did: ``readable`` (the textconv and attributes) and ``hook`` (the
    pre-push guard's installation, ``None`` when not asked for)."""

    readable: textconv.SetupResult
    hook: HookInstall | None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly form (the CLI's ``setup --json`` shape)."""
        r = self.readable
        return {"config_path": r.config_path, "attributes_path": r.attributes_path, "textconv": r.command,
                "config_changed": r.config_changed, "attributes_changed": r.attributes_changed,
                "hook": None if self.hook is None else
                {"path": self.hook.path, "action": self.hook.action, "chained": self.hook.chained}}


@dataclass(frozen=True)
class SetupReport:
    """What :func:`check` found: the textconv and attributes (``readable``), the pre-push guard
    (``hook``) and the allowed push remotes. ``ok`` when checkpoints print decoded and an
    installed guard is usable (a guard that was never installed is not a failure: it is
    optional)."""

    readable: textconv.SetupCheck
    hook: HookStatus
    push_remotes: list[str]

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
                "push_remotes": self.push_remotes}


def setup(store: Store, hooks: bool = False, executable: str | None = None) -> SetupDone:
    """Register the textconv (idempotent) and, with ``hooks``, install the pre-push guard.
    ``executable``: the ``git-agentos`` running setup (its absolute path is the driver's fallback
    when git runs it with a PATH that lacks one; default: the one on PATH)."""
    readable = textconv.setup(store.location, textconv.textconv_command(executable))
    return SetupDone(readable, install_hooks(store) if hooks else None)


def check(store: Store) -> SetupReport:
    """Check the setup without changing anything (see :class:`SetupReport`)."""
    return SetupReport(textconv.check(store.location), hook_status(store), allowed_remotes(store))
