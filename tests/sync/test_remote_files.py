"""Sharing session files: a path written on both machines keeps both lines (issue 6: nothing is
overwritten, nothing is lost), over a bare repository reached by file://."""

from __future__ import annotations

from pathlib import Path

from remote_helpers import bare, machine

import gitstate
from gitstate.verify.checks import verify


def _machines(tmp_path: Path) -> tuple[gitstate.Store, gitstate.Store]:
    url = bare(tmp_path / "server.git").as_uri()
    return gitstate.open_store(machine(tmp_path / "A", url)), gitstate.open_store(machine(tmp_path / "B", url))


def _refs(results: list[gitstate.PullResult] | list[gitstate.PushResult]) -> dict[str, gitstate.RefResult]:
    return {r.ref.split("/runs/", 1)[1]: r for res in results for r in res.refs}


def test_diverged_session_file_is_kept_not_dropped(tmp_path: Path) -> None:
    a, b = _machines(tmp_path)
    run_a = a.create_run(run_id="r")
    run_a.files.write("notes.md", "v1", author="a", reason="start")
    assert all(r.ok for r in gitstate.push(a))
    gitstate.pull(b)
    run_b = b.get_run("r")
    run_a.files.write("notes.md", "v2 from A", author="a", reason="A's edit")
    run_b.files.write("notes.md", "v2 from B", author="b", reason="B's edit")
    run_b.files.write("other.txt", "x", author="b")
    assert all(r.ok for r in gitstate.push(b))

    pulled = _refs(gitstate.pull(a))
    notes = pulled["r/files/notes%2Emd"]
    assert (notes.status, notes.kept_as) == ("diverged", "notes.md@origin"), notes
    assert notes.ok
    listing = run_a.files.list()
    assert set(listing) == {"notes.md", "notes.md@origin", "other.txt"}
    assert run_a.files.read("notes.md") == b"v2 from A"  # ours untouched
    assert run_a.files.read("notes.md@origin") == b"v2 from B"  # theirs kept
    assert listing["notes.md@origin"].version == 2 and listing["notes.md@origin"].path == "notes.md"
    assert [v.reason for v in run_a.files.history("notes.md@origin")] == ["start", "B's edit"]
    assert _refs(gitstate.pull(a))["r/files/notes%2Emd"].status == "kept"  # pulling again changes nothing
    assert verify(a).ok, verify(a).problems

    # A's push: the copy is not pushed back, the other refs still go, notes.md says what to do
    run_a.files.write("mine.md", "A's own", author="a")
    pushed = _refs(gitstate.push(a))
    assert pushed["r/files/notes%2Emd@origin"].status == "kept"  # origin has it; not pushed back
    assert pushed["r/files/mine%2Emd"].status == "pushed"
    assert pushed["r/files/notes%2Emd"].status == "rejected"
    assert "session file" in pushed["r/files/notes%2Emd"].message
    gitstate.pull(b)
    assert run_b.files.read("mine.md") == b"A's own"
    assert "notes.md@origin" not in run_b.files.list()


def test_remote_copy_advances_and_long_paths(tmp_path: Path) -> None:
    a, b = _machines(tmp_path)
    paths = ["d/" + "x" * 300, "m" * 195]  # hashed ref name; fits, but not with "@origin" added
    run_a = a.create_run(run_id="r")
    for p in paths:
        run_a.files.write(p, "1", author="a")
    gitstate.push(a)
    gitstate.pull(b)
    run_b = b.get_run("r")
    for p in paths:
        run_a.files.write(p, "A2", author="a")
        run_b.files.write(p, "B2", author="b")
    gitstate.push(b)
    kept = [r for res in gitstate.pull(a) for r in res.refs if r.status == "diverged"]
    copies = [p + "@origin" for p in paths]
    assert sorted(r.kept_as or "" for r in kept) == sorted(copies)
    assert [run_a.files.read(c) for c in copies] == [b"B2", b"B2"]
    assert set(run_a.files.list()) == {*paths, *copies}
    # B goes on writing: the kept copy fast-forwards instead of piling up new copies
    for p in paths:
        run_b.files.write(p, "B3", author="b")
    gitstate.push(b)
    gitstate.pull(a)
    assert [run_a.files.read(c) for c in copies] == [b"B3", b"B3"]
    assert [run_a.files.read(p) for p in paths] == [b"A2", b"A2"]
    # writing to a copy lands on it and keeps its name
    for c in copies:
        assert run_a.files.write(c, "merged", author="a").version == 4
    listing = run_a.files.list()
    assert set(listing) == {*paths, *copies} and not listing.errors
    assert [run_a.files.read(c) for c in copies] == [b"merged", b"merged"]
    assert verify(a).ok, verify(a).problems
    # neither copy goes back to origin
    pushed = {r.kept_as or r.ref: r.status for res in gitstate.push(a) for r in res.refs}
    assert sorted(s for s in pushed.values()) == ["rejected", "rejected", "skipped", "skipped", "up-to-date"]
