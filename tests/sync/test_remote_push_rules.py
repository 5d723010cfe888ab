"""What push does with refs this repository did not change: a branch only the remote advanced is
``behind`` (nothing to push, exit 0), not refused."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import git
from remote_helpers import bare, machine
from test_cli_sharing import agentos, remote_went_on

import gitstate


def test_a_branch_only_the_remote_advanced_is_behind_not_rejected(tmp_path: Path) -> None:
    a, b, server = remote_went_on(tmp_path)
    agentos(b, "checkpoint", "run1", "-b", "mine", "--state", "-", input='{"b": 1}')
    pushed = agentos(b, "push", "origin")  # exit 0: b never wrote main
    assert "behind run1 main: origin has newer checkpoints on this line; nothing to push" in pushed.stdout, pushed.stdout
    assert "git agentos pull origin run1" in pushed.stdout
    assert "pushed run1 mine" in pushed.stdout and "rejected" not in pushed.stdout
    assert "pushed origin: 1 run(s), 1 changed" in pushed.stdout
    doc = json.loads(agentos(b, "push", "origin", "--json").stdout)
    refs = {ref["ref"].rsplit("/", 2)[1] + "/" + ref["ref"].rsplit("/", 1)[1]: ref for ref in doc[0]["refs"]}
    tip_a = git(server, "rev-parse", "refs/agentos/main/runs/run1/heads/main").strip()
    assert refs["heads/main"]["status"] == "behind" and refs["heads/main"]["ok"] is True
    assert refs["heads/main"]["old"] == tip_a and doc[0]["ok"] is True
    assert not git(b, "for-each-ref", "refs/agentos-incoming/")  # the check's staging refs are gone
    assert git(server, "rev-parse", "refs/agentos/main/runs/run1/heads/main").strip() == tip_a
    # a branch that advanced on both sides is still refused
    agentos(b, "pull", "origin")
    agentos(a, "checkpoint", "run1", "--state", "-", input='{"a": 2}')
    agentos(a, "push", "origin")
    agentos(b, "checkpoint", "run1", "--state", "-", input='{"b": 2}')
    refused = agentos(b, "push", "origin", code=1)
    assert "rejected run1 main:" in refused.stdout and "behind run1 main" not in refused.stdout


def test_a_ref_another_push_landed_first_is_up_to_date_not_rejected(tmp_path: Path) -> None:
    """Two pushes of the same line race: the server refuses the slower one's ref because the other
    just wrote it. That ref holds what this push sent, so it is reported up to date, not refused."""
    remote = bare(tmp_path / "remote.git")
    path = machine(tmp_path / "A", str(remote))
    store = gitstate.open_store(path)
    run = store.create_run(run_id="r")
    run.checkpoint({"n": 1})
    assert all(r.ok for r in gitstate.push(store))
    new = run.checkpoint({"n": 2}).id
    ref = run.ref("main")
    # the remote gets the new checkpoint's objects (not its ref) as the other push would bring them
    git(remote, "fetch", "-q", str(path), f"{ref}:refs/other/tmp")
    git(remote, "update-ref", "-d", "refs/other/tmp")
    hook = remote / "hooks" / "pre-receive"  # the other push lands first: the ref moves, this one is refused
    hook.write_text("#!/bin/sh\nwhile read old new ref; do\n"
                    "  env -u GIT_QUARANTINE_PATH -u GIT_OBJECT_DIRECTORY -u GIT_ALTERNATE_OBJECT_DIRECTORIES "
                    "git update-ref \"$ref\" \"$new\"\ndone\nexit 1\n")
    hook.chmod(0o755)
    results = {r.run_id: r for r in gitstate.push(store)}
    assert git(remote, "rev-parse", ref).strip() == new
    assert results["r"].ok, results["r"]
    assert {ref_result.status for ref_result in results["r"].refs} <= {"up-to-date", "pushed"}
