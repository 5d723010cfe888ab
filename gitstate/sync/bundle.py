"""Runs as git bundles: one file any git can read (``git bundle verify``, ``git fetch``), for CI
artifacts and air-gapped hand-over. Export writes the runs' refs with ``git bundle create``; import
fetches them from the file into the staging namespace and applies the same no-overwrite rules as
:func:`gitstate.remote.pull` (the remote's label is ``bundle``)."""

from __future__ import annotations

import os
from collections.abc import Iterable

from gitstate.errors import RemoteError, RunNotFound, UsageError
from gitstate.format.names import NAMESPACE, run_prefix, worktree_prefix
from gitstate.git.refs import list_refs
from gitstate.store.store import Store
from gitstate.sync.remote import PullResult, fetch_and_merge, is_safety_ref, run_git

BUNDLE_LABEL = "bundle"


class BundleExport(list[str]):
    """The ref names :func:`export_bundle` wrote (a list, sorted), with ``left_out``: the refs it
    did not write because they stay local (the unsaved-work safety branch ``restore-safety``)."""

    def __init__(self, refs: Iterable[str], left_out: Iterable[str] = ()) -> None:
        super().__init__(refs)
        self.left_out: list[str] = list(left_out)


def export_bundle(store: Store, runs: Iterable[str] | None, output: str | os.PathLike[str], *,
                  include_safety: bool = False) -> BundleExport:
    """Write a git bundle of the runs' refs (all runs of the worktree when ``runs`` is empty) to
    ``output`` and return the ref names it holds. Raises :class:`RunNotFound` for an unknown run.
    The unsaved-work safety branch a restore writes (``restore-safety``, its node log too) holds
    files never checkpointed on purpose: it stays out (listed in :attr:`BundleExport.left_out`)
    unless ``include_safety``."""
    run_list = list(runs or [])
    refs: list[str] = []
    if run_list:
        for run_id in run_list:
            found = [name for name, _ in list_refs(store.repo, run_prefix(store.worktree, run_id))]
            if not found:
                raise RunNotFound(run_id, store.worktree)
            refs += found
    else:
        refs = [name for name, _ in list_refs(store.repo, worktree_prefix(store.worktree))]
        if not refs:
            raise UsageError(f"worktree {store.worktree!r} has no runs to export")
    left_out = [] if include_safety else sorted({name for name in refs if is_safety_ref(name)})
    chosen = sorted(set(refs) - set(left_out))
    if not chosen:
        raise UsageError("nothing to export: the runs hold only restore-safety branches, which stay local "
                         "unless you export with --include-safety")
    path = os.path.abspath(os.fspath(output))
    run_git(store, ["bundle", "create", "--quiet", path, "--stdin"], action="write bundle", remote=path,
            stdin="".join(f"{name}\n" for name in chosen))
    return BundleExport(chosen, left_out)


def import_bundle(store: Store, file: str | os.PathLike[str]) -> list[PullResult]:
    """Bring the runs of a bundle in (every ``refs/agentos/…`` it holds), fast-forward only; a
    branch that advanced on both sides keeps the bundle's line as ``<branch>@bundle``."""
    path = os.path.abspath(os.fspath(file))
    if not os.path.isfile(path):
        raise RemoteError(path, "read bundle", "no such file")
    run_git(store, ["bundle", "verify", "--quiet", path], action="verify bundle", remote=path)
    return fetch_and_merge(store, path, BUNDLE_LABEL, [NAMESPACE], action="import bundle")
