"""The leak guard: which remotes may receive agent checkpoints (``agentos.pushRemotes``) and the
``pre-push`` hook that enforces it for every ``git push`` — including ``git push --mirror`` and
hand-written refspecs — not only for ``git agentos push``.

``agentos.pushRemotes`` is read with ``git config --get-all``: it may be given several times and each
value may hold several entries separated by commas or spaces. An entry matches a remote by its name
or its URL; ``*`` allows every remote. When it is unset, no remote is allowed: checkpoints hold
prompts, tool outputs and secrets, so they leave the machine only for a place the user named.

The hook is a plain POSIX ``sh`` script that needs nothing but ``git`` (no Python, no gitstate on
PATH), so it keeps working in CI images and GUIs. It is installed where git looks for hooks
(``core.hooksPath`` is respected). An existing ``pre-push`` hook is never replaced silently: it is
renamed to ``pre-push.gitstate-chained`` and the guard runs it first, with the same arguments and
input; installing twice changes nothing."""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass

from gitstate.errors import HookInstallError, PushNotAllowedError
from gitstate.git import command
from gitstate.store.store import Store

CONFIG_KEY = "agentos.pushRemotes"
HOOK_NAME = "pre-push"
CHAINED_NAME = "pre-push.gitstate-chained"
MARKER = "gitstate-pre-push-guard"

HOOK_SCRIPT = r"""#!/bin/sh
# gitstate-pre-push-guard v1 (installed by `git agentos setup --hooks`; reinstalling is safe)
#
# Refuses to push agent checkpoints (refs/agentos/...: prompts, tool outputs, secrets) to a remote
# that the git config agentos.pushRemotes does not allow (names or URLs, several values or a comma
# list; "*" allows every remote). Deleting a remote ref is let through: it sends nothing.
# A pre-push hook that existed before was kept as pre-push.gitstate-chained; it runs first.
remote="$1"
url="$2"
input=$(cat)
chained="$(dirname "$0")/pre-push.gitstate-chained"
if [ -x "$chained" ]; then
    if [ -n "$input" ]; then printf '%s\n' "$input"; fi | "$chained" "$@" || exit $?
fi

set -f  # the allow list may hold "*": never let the shell expand it
for entry in $(git config --get-all agentos.pushRemotes 2>/dev/null | tr ',' ' '); do
    case "$entry" in
        '*'|"$remote"|"$url") exit 0 ;;
    esac
done

blocked=""
while read -r local_ref local_sha remote_ref remote_sha; do
    case "$local_sha" in
        *[!0]*) ;;
        *) continue ;;  # a deletion (or an empty line): no object leaves this machine
    esac
    case "$local_ref" in refs/agentos/*) blocked="$blocked $local_ref"; continue ;; esac
    case "$remote_ref" in refs/agentos/*) blocked="$blocked $remote_ref" ;; esac
done <<EOF
$input
EOF

if [ -n "$blocked" ]; then
    echo "gitstate: refusing to push agent checkpoints (refs/agentos/...) to '$remote' ($url):" >&2
    for ref in $blocked; do echo "gitstate:   $ref" >&2; done
    echo "gitstate: allow this remote with: git config --add agentos.pushRemotes $remote" >&2
    exit 1
fi
exit 0
"""


@dataclass(frozen=True)
class HookInstall:
    """What :func:`install_hooks` did: ``action`` is ``installed``, ``updated`` or ``unchanged``;
    ``chained`` is the path the previous hook was moved to (``None`` if there was none)."""

    path: str
    action: str
    chained: str | None = None


def _git(store: Store, *args: str) -> subprocess.CompletedProcess[str]:
    loc = store.location
    return command.run_git(loc.git_dir, args, cwd=git_cwd(store), work_tree=loc.workdir)


def git_cwd(store: Store) -> str:
    """The directory git commands run in (hooks run there too)."""
    return store.location.workdir or store.location.git_dir


def allowed_remotes(store: Store) -> list[str]:
    """The entries of ``agentos.pushRemotes`` (all values, split on commas and spaces)."""
    out = _git(store, "config", "--get-all", CONFIG_KEY)
    return [e for e in re.split(r"[,\s]+", out.stdout) if e]


def remote_url(store: Store, remote: str) -> str:
    """The push URL git would use for ``remote`` (the argument itself for a URL or a path)."""
    out = _git(store, "remote", "get-url", "--push", remote)
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else remote


def is_push_allowed(store: Store, remote: str) -> bool:
    """Whether ``agentos.pushRemotes`` allows pushing checkpoints to ``remote`` (by name or URL)."""
    entries = allowed_remotes(store)
    url = remote_url(store, remote)
    return any(e in ("*", remote, url) for e in entries)


def check_push_allowed(store: Store, remote: str) -> None:
    """Raise :class:`PushNotAllowedError` unless ``agentos.pushRemotes`` allows ``remote``."""
    if not is_push_allowed(store, remote):
        raise PushNotAllowedError(remote)


def hooks_dir(store: Store) -> str:
    """Where git looks for this repository's hooks (``core.hooksPath`` respected)."""
    out = _git(store, "rev-parse", "--git-path", "hooks")
    if out.returncode != 0 or not out.stdout.strip():
        return os.path.join(store.location.common_dir, "hooks")
    return os.path.join(git_cwd(store), os.path.expanduser(out.stdout.strip()))


def install_hooks(store: Store) -> HookInstall:
    """Install the ``pre-push`` leak guard (idempotent; an existing hook is chained, never lost).

    Raises :class:`HookInstallError` when a foreign hook exists and a chained one is already there
    too (chaining again would lose one of them)."""
    directory = hooks_dir(store)
    path = os.path.join(directory, HOOK_NAME)
    chained = os.path.join(directory, CHAINED_NAME)
    try:
        os.makedirs(directory, exist_ok=True)
        current: str | None = None
        if os.path.lexists(path):
            with open(path, encoding="utf-8", errors="replace") as fh:
                current = fh.read()
        if current is not None and MARKER in current:
            if current == HOOK_SCRIPT and os.access(path, os.X_OK):
                return HookInstall(path, "unchanged", chained if os.path.exists(chained) else None)
            _write_script(path)
            return HookInstall(path, "updated", chained if os.path.exists(chained) else None)
        moved: str | None = None
        if current is not None:
            if os.path.lexists(chained):
                raise HookInstallError(path, f"a foreign pre-push hook and {chained} both exist; "
                                             "merge them into one by hand, then run setup --hooks again")
            os.rename(path, chained)
            moved = chained
        _write_script(path)
        return HookInstall(path, "installed", moved)
    except OSError as exc:
        raise HookInstallError(path, exc.strerror or str(exc)) from exc


def _write_script(path: str) -> None:
    tmp = f"{path}.gitstate-tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8", newline="\n") as fh:
        fh.write(HOOK_SCRIPT)
    os.chmod(tmp, 0o755)
    os.replace(tmp, path)
