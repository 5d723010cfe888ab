"""The leak guard: which remotes may receive agent checkpoints (``agentos.pushRemotes``) and the
``pre-push`` hook that enforces it for every ``git push`` — including ``git push --mirror``, tags and
hand-written refspecs — not only for ``git agentos push``.

``agentos.pushRemotes`` is read with ``git config --get-all``: it may be given several times and each
value may hold several entries separated by commas or spaces. An entry matches a remote by its name
or its URL; ``*`` allows every remote. A remote named in the list is allowed whatever it pushes to;
otherwise every URL it pushes to must be listed (a remote may push to several: ``git remote set-url
--add --push``; git runs the hook once per URL, with that URL). When it is unset, no remote is
allowed: checkpoints hold prompts, tool outputs and secrets, so they leave the machine only for a
place the user named.

The hook looks at what a push sends, not only at ref names. To a remote that is not allowed it
refuses a pushed ref when its local or remote name is under ``refs/agentos/``; when it is (or is an
annotated tag of) a commit whose history holds a gitstate commit the remote lacks — every gitstate
commit (checkpoint, run record, session-file version, LangGraph checkpoint) carries the message line
``Gitstate-Format: N`` (docs/FORMAT.md); when it is (or is a tag of) a tree or blob holding an
object only checkpoints reach; or when it is a commit that sends objects ``refs/agentos/`` reach
outside workspace snapshots and session-file contents (a checkpoint's state and ``meta.cbor``:
``git commit-tree <checkpoint>^{tree}``, ``git merge --squash refs/agentos/...``). To an allowed
remote it runs ``git agentos scan --pre-push``, which refuses checkpoints holding a credential
(:mod:`gitstate.sync.secretscan`); ``git agentos push`` scans first and tells the hook with
``-c agentos.secretsChecked=true``. What the remote has is bounded by the remote values of the pushed
refs and by its remote-tracking refs ``refs/remotes/<remote>/*``, so a push of a user branch reads
only the commits the remote lacks: one ``git log`` for all pushed refs, never one call per commit.
Deletions pass.

The hook is a plain POSIX ``sh`` script that needs nothing but ``git`` and the standard ``awk``,
``sort``, ``uniq`` (no Python, no gitstate on PATH), so it keeps working in CI images and GUIs. It
is installed where git looks for hooks (``core.hooksPath`` is respected). An existing ``pre-push``
hook is never replaced silently: it is renamed to ``pre-push.gitstate-chained`` and the guard runs it
first, with the same arguments and input; installing twice changes nothing, and installing over an
older guard (another ``gitstate-pre-push-guard vN`` line) replaces it."""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass

from gitstate.errors import HookInstallError, PushNotAllowedError
from gitstate.git import command, safeopen
from gitstate.store.store import Store

CONFIG_KEY = "agentos.pushRemotes"
HOOK_NAME = "pre-push"
CHAINED_NAME = "pre-push.gitstate-chained"
MARKER = "gitstate-pre-push-guard"

HOOK_SCRIPT = r"""#!/bin/sh
# gitstate-pre-push-guard v3 (installed by `git agentos setup --hooks`; reinstalling is safe)
#
# Refuses to push agent checkpoints (prompts, tool outputs, secrets) to a remote that the git
# config agentos.pushRemotes does not allow (names or URLs, several values or a comma list; "*"
# allows every remote). It looks at what is sent, not only at names: a pushed ref is refused when
#   - its local or remote name is under refs/agentos/, or
#   - it is (or is a tag of) a commit whose history holds a gitstate commit (a message line
#     "Gitstate-Format: N") that the remote lacks: a checkpoint pushed by id, a tag on a checkpoint,
#     a branch that merged one, or
#   - it is (or is a tag of) a tree or blob holding objects that only checkpoints reach, or
#   - it is a commit that sends a checkpoint's own objects (state, meta.cbor, a checkpoint's root
#     tree: git commit-tree <checkpoint>^{tree}, git merge --squash refs/agentos/...).
# To an allowed remote it sends nothing that holds a credential: `git agentos scan --pre-push`
# scans the checkpoints the push sends (secret policy: agentos.secrets, docs/SECURITY.md).
# "The remote lacks" = not reachable from the remote values of the pushed refs, nor from the
# remote-tracking refs refs/remotes/<remote>/*. Deleting a remote ref is let through: it sends
# nothing. Needs only sh and git. A pre-push hook that existed before was kept as
# pre-push.gitstate-chained; it runs first.
remote="$1"
url="$2"
input=$(cat)
chained="$(dirname "$0")/pre-push.gitstate-chained"
if [ -x "$chained" ]; then
    if [ -n "$input" ]; then printf '%s\n' "$input"; fi | "$chained" "$@" || exit $?
fi

set -f  # the allow list may hold "*" and patterns below hold "*": never let the shell expand them
for entry in $(git config --get-all agentos.pushRemotes 2>/dev/null | tr ',' ' '); do
    case "$entry" in
        '*'|"$remote"|"$url")
            # an allowed remote still never receives a checkpoint holding a credential: gitstate
            # scans what the push sends (git agentos push scanned it already and says so)
            if [ -z "$input" ] || [ "$(git config --bool agentos.secretsChecked 2>/dev/null)" = true ]; then
                exit 0
            fi
            if command -v git-agentos >/dev/null 2>&1; then
                printf '%s\n' "$input" | git agentos scan --pre-push "$remote" >/dev/null || exit 1
            elif printf '%s\n' "$input" | grep -q ' refs/agentos/'; then
                echo "gitstate: cannot scan the checkpoints this push sends for credentials (git-agentos is not on PATH); refusing." >&2
                exit 1
            fi
            exit 0 ;;
    esac
done

nl='
'
fail() {
    echo "gitstate: could not check what this push sends to '$remote' ($1); refusing." >&2
    echo "gitstate: allow that remote with: git config --add agentos.pushRemotes $remote" >&2
    exit 1
}
lines() { printf '%s\n' "$1" | awk -v tag="$2" '$1 == tag { sub(/^[^ ]* /, ""); print }'; }

# Each input line: <local ref> <local sha> <remote ref> <remote sha>. The local ref is what was
# typed (it may hold spaces: HEAD@{1 day ago}), so it is what is left of the line without the last
# three fields. Tagged output (a mirror push may have thousands of lines: one awk, no shell loop):
#   H ^<remote sha>            the remote has it (every remote ref the push updates)
#   B <local sha> <local ref>  refused by name
#   C <local sha>^{} <local sha> <local ref>   sends objects: checked below
parsed=$(printf '%s\n' "$input" | awk '
    NF < 4 { next }
    {
        rsha = $NF; rref = $(NF - 1); lsha = $(NF - 2)
        lref = $0; sub(/[ \t]+[^ \t]+[ \t]+[^ \t]+[ \t]+[^ \t]+[ \t]*$/, "", lref)
        if (rsha ~ /[^0]/) print "H ^" rsha
        if (lsha !~ /[^0]/) next  # a deletion: no object leaves this machine
        if (lref ~ /^refs\/agentos\// || rref ~ /^refs\/agentos\//) print "B " lsha " " lref
        else print "C " lsha "^{} " lsha " " lref
    }')
have=$(lines "$parsed" H)
refused=$(lines "$parsed" B)  # "<local sha> <local ref>" lines
check=$(lines "$parsed" C)

# What the remote is known to have besides: its remote-tracking refs, when "$remote" is a remote's
# name (not a URL) that is safe in a --glob pattern; refs of remotes named "$remote/..." are left out.
known=""
if [ "$remote" != "$url" ]; then
    case "$remote" in
        ''|*[!A-Za-z0-9._,+=@/-]*) ;;
        *)
            for other in $(git remote 2>/dev/null); do
                case "$other" in "$remote"/*) known="$known --exclude=refs/remotes/$other/*" ;; esac
            done
            known="$known --glob=refs/remotes/$remote/*"
            ;;
    esac
fi

if [ -n "$check" ]; then
    # peel tags: "<peeled sha> <type> <local sha> <local ref>", one git call for all refs
    peeled=$(printf '%s\n' "$check" |
        git --no-replace-objects cat-file --batch-check='%(objectname) %(objecttype) %(rest)') ||
        fail "git cat-file failed"
    commits=$(printf '%s\n' "$peeled" | awk '$2 == "commit" { print $1 }')
    others=$(printf '%s\n' "$peeled" | awk '$2 == "tree" || $2 == "blob" { print $1 }')
    leaked=""
    if [ -n "$commits" ]; then
        # gitstate commits the remote lacks, each named by the pushed commit it was reached from
        # (--source); one git call for all refs, bounded by what the remote has
        leaked=$(printf '%s\n%s\n' "$commits" "$have" |
            git --no-replace-objects --no-pager log --ignore-missing --stdin --source --format=%S \
                --no-show-signature --basic-regexp --grep='^Gitstate-Format: [0-9][0-9]*$' \
                --not $known) || fail "git log failed"
    fi
    if [ -n "$commits" ] && [ -z "$leaked" ] &&
        [ -n "$(git for-each-ref --count=1 --format=x 'refs/agentos/')" ]; then
        # a commit of the user's that carries what only gitstate wrote (a checkpoint's tree given
        # to git commit-tree, a branch that squash-merged one): objects it sends that refs/agentos/
        # reach outside a workspace snapshot (files/) and a session file's content
        sent=$(printf '%s\n%s\n' "$commits" "$have" |
            git --no-replace-objects rev-list --objects --no-object-names --ignore-missing --stdin \
                --not $known) || fail "git rev-list failed"
        if [ -n "$sent" ]; then
            private=$(git --no-replace-objects rev-list --objects --glob='refs/agentos/*' | awk '
                NF == 1 { next }  # commits (their messages are checked above)
                { p = $0; sub(/^[^ ]* /, "", p) }
                p == "files" || p ~ /^files\// || p == "content" { next }
                $1 == "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391" { next }  # the empty blob
                { print $1 }') || fail "git rev-list failed"
            for oid in $commits; do
                own=$(printf '%s\n%s\n' "$oid" "$have" |
                    git --no-replace-objects rev-list --objects --no-object-names --ignore-missing --stdin \
                        --not $known) || fail "git rev-list failed"
                common=$(printf '%s\n%s\n' "$own" "$private" | grep -v '^-' | sort | uniq -d)
                if [ -n "$common" ]; then leaked="$leaked$nl$oid"; fi
            done
        fi
    fi
    if [ -n "$others" ]; then
        # a tree or blob (git sends it even where the remote then refuses a non-commit): refused
        # when an object it sends is reached from refs/agentos/ and not from a branch
        private=$(git --no-replace-objects rev-list --objects --no-object-names \
            --objects-edge-aggressive --glob='refs/agentos/*' --not --branches --remotes) ||
            fail "git rev-list failed"
        for oid in $others; do
            sent=$(printf '%s\n%s\n' "$oid" "$have" |
                git --no-replace-objects rev-list --objects --no-object-names --ignore-missing \
                    --objects-edge-aggressive --stdin --not $known) || fail "git rev-list failed"
            common=$(printf '%s\n%s\n' "$sent" "$private" | grep -v '^-' | sort | uniq -d)
            if [ -n "$common" ]; then leaked="$leaked$nl$oid"; fi
        done
    fi
    if [ -n "$leaked" ]; then
        # the pushed refs whose peeled sha leaks: "<local sha> <local ref>"
        refused="$refused$nl$(printf '%s\n' "$leaked" -- "$peeled" | awk '
            !sep && $0 == "--" { sep = 1; next }
            !sep { if (NF) leak[$1] = 1; next }
            ($1 in leak) { sub(/^[^ ]* [^ ]* /, ""); print }')"
    fi
fi

count=0
found=""
while read -r sha ref; do
    [ -n "$sha" ] || continue
    count=$((count + 1))
    [ "$count" -le 3 ] || continue
    if [ "$ref" = "$sha" ]; then item="$sha"; else item="$ref ($(printf '%.12s' "$sha"))"; fi
    found="${found:+$found, }$item"
done <<EOF
$refused
EOF

if [ "$count" -gt 0 ]; then
    more=""
    if [ "$count" -gt 3 ]; then more=" and $((count - 3)) more"; fi
    where="'$remote'"
    if [ "$url" != "$remote" ]; then where="'$remote' ($url)"; fi
    echo "gitstate: refusing to push agent checkpoints (prompts, tool outputs, secrets) to $where: found in $found$more" >&2
    echo "gitstate: allow that remote with: git config --add agentos.pushRemotes $remote" >&2
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


def remote_urls(store: Store, remote: str) -> list[str]:
    """Every URL a push to ``remote`` goes to (``git remote get-url --push --all``: a remote may
    have several push URLs); ``[remote]`` itself for a URL or a path."""
    out = _git(store, "remote", "get-url", "--push", "--all", remote)
    urls = [line for line in out.stdout.splitlines() if line.strip()] if out.returncode == 0 else []
    return urls or [remote]


def disallowed_urls(store: Store, remote: str) -> list[str]:
    """The push URLs of ``remote`` that ``agentos.pushRemotes`` does not allow: none when it holds
    ``*`` or the remote's name, else each URL not listed."""
    entries = set(allowed_remotes(store))
    if "*" in entries or remote in entries:
        return []
    return [url for url in remote_urls(store, remote) if url not in entries]


def is_push_allowed(store: Store, remote: str) -> bool:
    """Whether ``agentos.pushRemotes`` allows pushing checkpoints to ``remote``: by its name, or
    every URL it pushes to."""
    return not disallowed_urls(store, remote)


def check_push_allowed(store: Store, remote: str) -> None:
    """Raise :class:`PushNotAllowedError` unless ``agentos.pushRemotes`` allows ``remote`` (its
    name, or each of its push URLs)."""
    refused = disallowed_urls(store, remote)
    if refused:
        raise PushNotAllowedError(remote, tuple(u for u in refused if u != remote))


def hooks_dir(store: Store) -> str:
    """Where git looks for this repository's hooks (``core.hooksPath`` respected)."""
    out = _git(store, "rev-parse", "--git-path", "hooks")
    if out.returncode != 0 or not out.stdout.strip():
        return os.path.join(store.location.common_dir, "hooks")
    return os.path.join(git_cwd(store), os.path.expanduser(out.stdout.strip()))


@dataclass(frozen=True)
class HookStatus:
    """The pre-push leak guard as it is now: ``state`` is ``installed`` (current and executable),
    ``outdated`` (an older guard: ``setup --hooks`` updates it), ``not-executable``, ``foreign``
    (a pre-push hook that is not the guard) or ``missing``; ``chained`` is the previous hook the
    guard runs first, if any."""

    path: str
    state: str
    chained: str | None = None


def hook_status(store: Store) -> HookStatus:
    """Where the pre-push guard stands (reads only)."""
    directory = hooks_dir(store)
    path = os.path.join(directory, HOOK_NAME)
    chained = os.path.join(directory, CHAINED_NAME)
    kept = chained if os.path.lexists(chained) else None
    try:
        with safeopen.open_file(path, encoding="utf-8", errors="replace") as fh:
            current = fh.read()
    except FileNotFoundError:
        return HookStatus(path, "missing", kept)
    except OSError:
        return HookStatus(path, "foreign", kept)
    if MARKER not in current:
        return HookStatus(path, "foreign", kept)
    if not os.access(path, os.X_OK):
        return HookStatus(path, "not-executable", kept)
    return HookStatus(path, "installed" if current == HOOK_SCRIPT else "outdated", kept)


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
            with safeopen.open_file(path, encoding="utf-8", errors="replace") as fh:
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
