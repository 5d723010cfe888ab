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


def test_a_node_log_with_a_record_that_does_not_read_is_not_pulled(tmp_path: Path) -> None:
    """A remote whose node log got a record that does not decode (a hostile or broken peer): pull
    skips that log (nodes, node:NAME and checkpoint --node would fail on it here) and takes the
    rest of the run; the log already here is unchanged."""
    import subprocess

    from test_cli_sharing import machines

    a, b, server = machines(tmp_path)
    agentos(a, "checkpoint", "run1", "--state", "-", "--node", "plan", input="{}")
    agentos(a, "push", "origin")
    agentos(b, "pull", "origin")
    before = nodes(b, "run1")
    agentos(a, "checkpoint", "run1", "--state", "-", "--node", "act", input='{"a": 1}')
    agentos(a, "push", "origin")
    log = "refs/agentos/main/runs/run1/nodes/main"

    def git(*args: str, input: str | None = None) -> str:
        return subprocess.run(["git", *args], cwd=server, input=input, capture_output=True, text=True,
                              check=True).stdout.strip()

    garbage = subprocess.run(["git", "hash-object", "-w", "--stdin"], cwd=server, input=b"\xff",
                             capture_output=True, check=True).stdout.decode().strip()
    tree = git("mktree", input=f"100644 blob {garbage}\tnode.cbor\n")
    git("update-ref", log, git("commit-tree", tree, "-p", log, "-m", "node act · completed"))
    pulled = agentos(b, "pull", "origin", code=1)
    assert "skipped run1 main (node log): the remote's node log holds a record that does not read" in pulled.stdout, \
        pulled.stdout
    assert "fast-forward run1 main\n" in pulled.stdout  # the branch itself came
    assert nodes(b, "run1") == before  # the log here is as it was, and reads
    assert agentos(b, "verify").returncode == 0
