"""Node logs (``nodes/<branch>``) follow the branch they describe when runs are shared: a node log
that advanced on both sides is kept as the node log of the branch's kept copy, and a branch put on
the copy's line (the README's fork + rollback) takes that log, so pushes and pulls succeed again."""

from __future__ import annotations

import json
from pathlib import Path

from test_cli_sharing import agentos, remote_went_on


def nodes(cwd: Path, ref: str) -> list[tuple[str, str]]:
    return [(row["node"], row["exit"]) for row in json.loads(agentos(cwd, "nodes", ref, "--json").stdout)]


def diverge_with_nodes(tmp_path: Path) -> tuple[Path, Path]:
    """run1 written with --node on both machines after B pulled it once; B pulls the divergence."""
    a, b, _server = remote_went_on(tmp_path)
    agentos(b, "checkpoint", "run1", "--state", "-", "--node", "act", input='{"b": 1}')
    pulled = agentos(b, "pull", "origin")  # exit 0: nothing failed, the remote's line is kept
    assert "diverged run1 main -> main@origin" in pulled.stdout, pulled.stdout
    assert "diverged run1 main (node log) -> main@origin" in pulled.stdout, pulled.stdout
    assert "conflict" not in pulled.stdout
    return a, b


def test_a_diverged_node_log_is_kept_with_the_copy_and_follows_a_rollback(tmp_path: Path) -> None:
    a, b = diverge_with_nodes(tmp_path)
    theirs = nodes(a, "run1")
    assert [n for n, _ in theirs] == ["plan", "act"]
    assert nodes(b, "run1@main@origin") == theirs  # the copy's node log is origin's
    again = agentos(b, "pull", "origin")
    assert "kept run1 main (node log) -> main@origin" in again.stdout and "nothing changed" in again.stdout
    # the README's recovery: fork ours, put main on origin's line, push
    agentos(b, "fork", "run1", "@main", "mine")
    agentos(b, "rollback", "run1", "@main@origin")
    pushed = agentos(b, "push", "origin")  # exit 0
    assert "pushed run1 mine" in pushed.stdout and "rejected" not in pushed.stdout, pushed.stdout
    assert nodes(b, "run1") == theirs
    assert "nothing changed" in agentos(b, "pull", "origin").stdout
    # B goes on on main: A gets the whole node log
    agentos(b, "checkpoint", "run1", "--state", "-", "--node", "more", input='{"b": 2}')
    agentos(b, "push", "origin")
    agentos(a, "pull", "origin")
    assert [n for n, _ in nodes(a, "run1")] == ["plan", "act", "more"]
    assert nodes(a, "run1") == nodes(b, "run1")


def test_a_pull_replays_the_node_log_of_a_branch_on_the_remotes_line(tmp_path: Path) -> None:
    """After the rollback a pull (instead of a push) puts the node log on origin's; B's boundaries
    still on main are kept after origin's."""
    a, b = diverge_with_nodes(tmp_path)
    agentos(b, "fork", "run1", "@main", "mine")
    agentos(b, "rollback", "run1", "@main@origin")
    agentos(b, "branch", "-d", "run1@main@origin")
    agentos(b, "checkpoint", "run1", "--state", "-", "--node", "more", input='{"b": 2}')
    pulled = agentos(b, "pull", "origin")
    assert "fast-forward run1 main (node log)" in pulled.stdout, pulled.stdout
    assert [n for n, _ in nodes(b, "run1")] == ["plan", "act", "more"]
    pushed = agentos(b, "push", "origin")
    assert "pushed run1 main (node log)" in pushed.stdout, pushed.stdout
    agentos(a, "pull", "origin")
    assert nodes(a, "run1") == nodes(b, "run1")
