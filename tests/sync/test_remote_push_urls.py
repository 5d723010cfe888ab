"""A remote that pushes to several URLs (``git remote set-url --add --push``): the leak guard checks
every one of them, not only the first, and `git agentos push` says "pushed" and exits 0 only when
git's push reached every URL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import agentos_process, git
from remote_helpers import bare, machine

import gitstate

agentos = agentos_process


@pytest.fixture
def two_urls(tmp_path: Path) -> tuple[Path, Path, Path]:
    """Machine A whose ``origin`` pushes to a.git and b.git; agentos.pushRemotes names a.git's URL."""
    a, b = bare(tmp_path / "a.git"), bare(tmp_path / "b.git")
    path = machine(tmp_path / "A", a.as_uri(), allow=a.as_uri())
    git(path, "remote", "set-url", "--add", "--push", "origin", a.as_uri())
    git(path, "remote", "set-url", "--add", "--push", "origin", b.as_uri())
    gitstate.open_store(path).create_run(run_id="secret").checkpoint({"api_key": "sk-..."})
    return path, a, b


def test_every_push_url_must_be_allowed(two_urls: tuple[Path, Path, Path]) -> None:
    path, a, b = two_urls
    done = agentos(path, "push", "origin")
    assert done.returncode == 1 and "not allowed" in done.stderr and b.as_uri() in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1
    assert git(b, "for-each-ref") == "" and git(a, "for-each-ref") == ""  # nothing reached either
    with pytest.raises(gitstate.PushNotAllowedError) as info:
        gitstate.push(gitstate.open_store(path), "origin")
    assert info.value.urls == (b.as_uri(),)
    # allowed once every URL is listed, or the remote by name
    git(path, "config", "--add", "agentos.pushRemotes", b.as_uri())
    done = agentos(path, "push", "origin")
    assert done.returncode == 0, done.stderr
    assert "refs/agentos/" in git(a, "for-each-ref") and "refs/agentos/" in git(b, "for-each-ref")


def test_a_push_that_fails_at_one_url_is_not_reported_pushed(two_urls: tuple[Path, Path, Path]) -> None:
    path, a, b = two_urls
    git(path, "config", "agentos.pushRemotes", "origin")  # the remote by name: all its URLs
    hook = b / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'b refuses everything' >&2\nexit 1\n")
    hook.chmod(0o755)
    done = agentos(path, "push", "origin", "--json")
    assert done.returncode == 1, done.stderr
    assert "not fully pushed" in done.stderr.splitlines()[-1]
    refs = [r for run in json.loads(done.stdout) for r in run["refs"]]
    assert refs and all(not r["ok"] for r in refs) and all(b.as_uri() in r["message"] for r in refs), refs
    assert git(b, "for-each-ref") == ""
    hook.unlink()
    # a pre-push hook refusing the second URL (the user's own, chained by the guard): git pushed
    # to a.git, then failed without a word on the refs; the command says so instead of "pushed"
    store = gitstate.open_store(path)
    gitstate.install_hooks(store)
    store.get_run("secret").checkpoint({"api_key": "sk-2"})
    git(path, "config", "agentos.pushRemotes", a.as_uri())
    git(path, "config", "--add", "agentos.pushRemotes", b.as_uri())
    git(path, "config", "--add", "agentos.pushRemotes", "origin")
    results = gitstate.push(store, "origin")
    assert all(r.ok for r in results)  # every URL allowed: pushed everywhere
    (path / ".git" / "hooks" / "pre-push.gitstate-chained").write_text(
        f"#!/bin/sh\ncase \"$2\" in {b.as_uri()}) echo 'no b' >&2; exit 1;; esac\nexit 0\n")
    (path / ".git" / "hooks" / "pre-push.gitstate-chained").chmod(0o755)
    store.get_run("secret").checkpoint({"api_key": "sk-3"})
    done = agentos(path, "push", "origin")
    assert done.returncode == 1 and "not fully pushed" in done.stderr, (done.stdout, done.stderr)
    assert "pushed origin:" not in done.stdout and done.stdout.startswith("error secret main: ")
