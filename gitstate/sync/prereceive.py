"""The server's own check of what a push brings: ``git agentos verify --pre-receive`` as a git
``pre-receive`` hook on the repository that holds a team's runs.

git runs the hook after it received a push's objects and before it moves any ref, with one line
``<old> <new> <ref>`` per ref update on standard input and the new objects in a quarantine
directory (``GIT_QUARANTINE_PATH``; they become part of the repository only if the hook exits 0).
Each update of a ref under ``refs/agentos/`` that sets a value is checked, at the value pushed:

- as ``git agentos verify`` checks a ref (:func:`gitstate.verify.checks.verify_refs`): a
  gitstate ref name, a commit that decodes as a checkpoint (or run record, node log, session
  file) of a known format version, payloads that decode, every object reached readable;
- its run has a run record, on the server or in the same push;
- no checkpoint the server does not have yet holds a credential the rules do not let through
  (:mod:`gitstate.sync.secretscan`, the scan ``push`` runs on the sending side; the server's own
  ``agentos.secrets.*`` config applies).

Deletions and refs outside ``refs/agentos/`` pass. One refused ref refuses the push (git's
pre-receive is all or nothing); each refused ref is named on a line of its own."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

from gitstate.errors import GitStateError
from gitstate.format.names import NAMESPACE, parse_ref
from gitstate.git import handles
from gitstate.git.refs import list_refs
from gitstate.secrets import Scanner
from gitstate.store.store import Store
from gitstate.sync.secretscan import checkpoints_between, load_rules, scan_checkpoints
from gitstate.verify.checks import verify_refs

_ZERO = frozenset("0")


@dataclass(frozen=True)
class Refusal:
    """One ref update the hook refuses, and why."""

    ref: str
    reason: str

    def __str__(self) -> str:
        return f"gitstate: refusing {self.ref}: {self.reason}"


def parse_updates(text: str) -> list[tuple[str, str, str]]:
    """The ``(old, new, ref)`` lines git gives a pre-receive hook (malformed lines are skipped)."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3:
            out.append((parts[0], parts[1], parts[2]))
    return out


def use_quarantine(store: Store) -> None:
    """Let the store read the objects of the push under check: git keeps them in a quarantine
    directory that libgit2 does not look at by itself (it ignores ``GIT_OBJECT_DIRECTORY``). The
    directory is added to the store's repository handle and to this thread's shared handle (what
    checkpoints read their payloads through)."""
    path = os.environ.get("GIT_QUARANTINE_PATH") or os.environ.get("GIT_OBJECT_DIRECTORY")
    if not path or not os.path.isdir(path):
        return
    for repo in {id(r): r for r in (store.repo, handles.repository(store.location.git_dir))}.values():
        repo.odb.add_disk_alternate(os.path.abspath(path))


def check_updates(store: Store, updates: Iterable[tuple[str, str, str]]) -> list[Refusal]:
    """The ref updates of a push the server refuses (see the module docstring)."""
    pushed = {ref: new for _old, new, ref in updates if ref.startswith(NAMESPACE) and set(new) != _ZERO}
    if not pushed:
        return []
    refusals: dict[str, str] = {}
    report = verify_refs(store, sorted(pushed.items()))
    for problem in report.problems:
        refusals.setdefault(problem.ref, f"{problem.message}" + (f" ({problem.oid[:12]})" if problem.oid else ""))
    for ref in pushed:
        parsed = parse_ref(ref)
        if parsed is None or parsed.kind == "run" or ref in refusals:
            continue
        record = "/".join(ref.split("/")[:5]) + "/run"
        if record not in pushed and store.repo.references.get(record) is None:
            refusals[ref] = "its run has no run record, on the server or in this push"
    have = [oid for _name, oid in list_refs(store.repo, "refs/")]
    scanner = Scanner(load_rules(store))
    for ref, new in sorted(pushed.items()):
        if ref in refusals:
            continue
        try:
            findings = scan_checkpoints(store, checkpoints_between(store, [new], have), scanner)
        except GitStateError as exc:
            refusals[ref] = f"cannot be scanned for credentials: {exc}"
            continue
        if findings:
            f = findings[0]
            more = f" and {len(findings) - 1} more" if len(findings) > 1 else ""
            where = (f.checkpoint or "")[:12]
            refusals[ref] = (f"holds a credential ({f.kind} at {f.path} in checkpoint {where}, "
                             f"fingerprint {f.fingerprint}){more}")
    return [Refusal(ref, why) for ref, why in sorted(refusals.items())]
