"""Library errors phrased for the command line: the library speaks Python to its callers
(``force=True``, ``files=``, full ref names); a ``git agentos`` user gets the flag or the command
that does the same, and the run and branch a ref name stands for. Only the wording changes: the
error kind, the exit code and the data stay the library's."""

from __future__ import annotations

import shlex
from typing import Any

import gitstate
from gitstate.format.names import parse_ref

from . import output as out


def _branch_words(ref: str) -> str | None:
    parsed = parse_ref(ref)
    if parsed is None or parsed.kind != "heads" or parsed.name is None:
        return None
    return f"branch {parsed.name!r} of run {parsed.run_id!r}"


def describe(exc: gitstate.GitStateError) -> tuple[str, dict[str, Any]]:
    """The one-line message for ``error: …`` and any extra fields for the ``--json`` error object."""
    if isinstance(exc, gitstate.RestoreConflictError) and exc.forceable:
        run = shlex.quote(exc.run_id) if exc.run_id is not None else "RUN"
        return (f"restore refused: {exc.reason}: {exc.shown_paths()} (use --force to overwrite them, "
                f"or checkpoint them first: git agentos checkpoint {run} --files)"), {"paths": exc.paths}
    if isinstance(exc, gitstate.RestoreConflictError):
        return str(exc), {"paths": exc.paths}
    if isinstance(exc, gitstate.NoSnapshotError):
        return (f"checkpoint {exc.checkpoint[:12]} has no workspace snapshot (it was written without "
                "--files)"), {}
    if isinstance(exc, gitstate.BranchDeleteRefused):
        return f"{exc.without_hint()} (use -D to delete it anyway)", {}
    if isinstance(exc, gitstate.AmbiguousReferenceError):
        return str(exc), {"candidates": [{"id": oid, "what": what} for oid, what in exc.candidates]}
    if isinstance(exc, gitstate.NothingToUndoError):
        words = _branch_words(exc.ref)
        if words:
            return f"nothing to undo on {words}: its reflog records no move", {}
    if isinstance(exc, gitstate.ConflictError) and exc.what == "ref":
        words = _branch_words(exc.ref)
        if words:
            return (f"conflict: {words} moved meanwhile: it is at {out.short(exc.actual) if exc.actual else 'nothing'}, "
                    f"not {out.short(exc.expected) if exc.expected else 'nothing'} as expected (--expect, or "
                    "another writer); nothing was written"), {}
    return str(exc), {}
