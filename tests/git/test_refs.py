"""gitstate.git.refs against real git: the compare-and-swap writes (set_if_equals, add_if_new,
remove_if_equals) on loose and packed refs, their reflog lines, held and stale locks, name clashes,
and pack_refs keeping to refs/agentos/."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pygit2
import pytest
from conftest import bounded, git

from gitstate.errors import ConflictError, StoreWriteError
from gitstate.git import refs
from gitstate.git.refs import LockBusy

WHO = ("Ref Tester", "refs@example.com")
REF = "refs/agentos/main/runs/r/heads/main"


def commits(repo: Path, n: int) -> list[str]:
    """``n`` distinct commit ids (HEAD, then commits made with ``git commit-tree``)."""
    out = [git(repo, "rev-parse", "HEAD").strip()]
    tree = git(repo, "rev-parse", "HEAD^{tree}").strip()
    for i in range(1, n):
        out.append(git(repo, "commit-tree", tree, "-p", out[-1], "-m", f"c{i}").strip())
    return out


def rev_parse(repo: Path, name: str) -> str | None:
    out = git(repo, "rev-parse", "--verify", "-q", name, check=False).strip()
    return out or None


def common(repo: Path) -> str:
    return str(repo / ".git")


def test_set_if_equals_creates_updates_and_refuses(repo: Path) -> None:
    a, b, c = commits(repo, 3)
    refs.set_if_equals(common(repo), REF, None, a, "gitstate: create", committer=WHO)
    assert rev_parse(repo, REF) == a
    refs.set_if_equals(common(repo), REF, a, b, "gitstate: move", committer=WHO)
    assert rev_parse(repo, REF) == b
    with pytest.raises(ConflictError) as info:
        refs.set_if_equals(common(repo), REF, a, c, "gitstate: stale", committer=WHO)
    assert (info.value.ref, info.value.expected, info.value.actual) == (REF, a, b)
    with pytest.raises(ConflictError) as info:
        refs.set_if_equals(common(repo), REF, None, c, "gitstate: create again", committer=WHO)
    assert (info.value.expected, info.value.actual) == (None, b)
    assert rev_parse(repo, REF) == b
    assert not Path(common(repo), REF + ".lock").exists()
    assert refs.read_ref(pygit2.Repository(str(repo)), REF) == b
    git(repo, "fsck", "--strict")


def test_set_if_equals_renames_its_lock_over_the_ref_and_leaves_nothing_beside(repo: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = commits(repo, 2)
    refs.set_if_equals(common(repo), REF, None, a, "gitstate: create", committer=WHO)
    path = Path(common(repo), REF)
    before = path.stat().st_ino
    renamed: list[tuple[str, str]] = []
    real_rename = os.rename

    def spy(src: str, dst: str) -> None:
        renamed.append((str(src), str(dst)))
        real_rename(src, dst)

    monkeypatch.setattr(os, "rename", spy)
    refs.set_if_equals(common(repo), REF, a, b, "gitstate: move", committer=WHO)
    assert renamed == [(str(path) + ".lock", str(path))]  # git's protocol: the lock becomes the ref
    assert path.read_bytes() == f"{b}\n".encode()  # exactly the value: the owner record is gone
    assert path.stat().st_ino != before
    assert sorted(p.name for p in path.parent.iterdir()) == ["main"]
    git(repo, "fsck", "--strict")


def test_set_if_equals_without_flock_writes_the_value_beside_the_lock(repo: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from gitstate.git import lockfile

    a, b = commits(repo, 2)
    monkeypatch.setattr(lockfile, "_flock_within", lambda fd, seconds: False)  # a file system without flock
    refs.set_if_equals(common(repo), REF, None, a, "gitstate: create", committer=WHO)
    refs.set_if_equals(common(repo), REF, a, b, "gitstate: move", committer=WHO)
    path = Path(common(repo), REF)
    assert path.read_bytes() == f"{b}\n".encode()
    assert sorted(p.name for p in path.parent.iterdir()) == ["main"]
    assert [line.split()[1] for line in git(repo, "reflog", "show", "--format=%H %H", REF).splitlines()] == [b, a]


def test_set_if_equals_expecting_a_value_on_a_missing_ref(repo: Path) -> None:
    (a,) = commits(repo, 1)
    with pytest.raises(ConflictError) as info:
        refs.set_if_equals(common(repo), REF, a, a, "gitstate: move", committer=WHO)
    assert (info.value.expected, info.value.actual) == (a, None)
    assert rev_parse(repo, REF) is None
    assert not Path(common(repo), REF + ".lock").exists()


def test_add_if_new_refuses_an_existing_ref(repo: Path) -> None:
    a, b = commits(repo, 2)
    refs.add_if_new(common(repo), REF, a, "gitstate: create", committer=WHO)
    with pytest.raises(ConflictError) as info:
        refs.add_if_new(common(repo), REF, b, "gitstate: create", committer=WHO)
    assert (info.value.expected, info.value.actual) == (None, a)
    assert rev_parse(repo, REF) == a


def test_cas_against_a_packed_ref(repo: Path) -> None:
    a, b, c = commits(repo, 3)
    refs.add_if_new(common(repo), REF, a, "gitstate: create", committer=WHO)
    git(repo, "pack-refs", "--all")
    assert not Path(common(repo), REF).exists()
    with pytest.raises(ConflictError) as info:
        refs.set_if_equals(common(repo), REF, b, c, "gitstate: stale", committer=WHO)
    assert info.value.actual == a
    refs.set_if_equals(common(repo), REF, a, b, "gitstate: move", committer=WHO)
    assert rev_parse(repo, REF) == b
    git(repo, "fsck", "--strict")


@pytest.mark.parametrize("packed", [False, True], ids=["loose", "packed"])
def test_remove_if_equals(repo: Path, packed: bool) -> None:
    a, b = commits(repo, 2)
    refs.add_if_new(common(repo), REF, a, "gitstate: create", committer=WHO)
    if packed:
        git(repo, "pack-refs", "--all")
        assert REF in (Path(common(repo)) / "packed-refs").read_text()
    with pytest.raises(ConflictError) as info:
        refs.remove_if_equals(common(repo), REF, b, "gitstate: delete")
    assert (info.value.expected, info.value.actual) == (b, a)
    assert rev_parse(repo, REF) == a
    refs.remove_if_equals(common(repo), REF, a, "gitstate: delete")
    assert rev_parse(repo, REF) is None
    assert REF not in git(repo, "for-each-ref")
    packed_refs = Path(common(repo)) / "packed-refs"
    assert not packed_refs.exists() or REF not in packed_refs.read_text()
    assert git(repo, "rev-parse", "main").strip() == a  # the user's branch is untouched
    with pytest.raises(ConflictError) as info:
        refs.remove_if_equals(common(repo), REF, a, "gitstate: delete again")
    assert info.value.actual is None
    git(repo, "fsck", "--strict")


def test_held_lock_is_lock_busy_and_changes_nothing(repo: Path) -> None:
    a, b = commits(repo, 2)
    refs.add_if_new(common(repo), REF, a, "gitstate: create", committer=WHO)
    lock = Path(common(repo), REF + ".lock")
    lock.write_text("someone else's\n")
    with pytest.raises(LockBusy) as info:
        bounded(lambda: refs.set_if_equals(common(repo), REF, a, b, "gitstate: move", committer=WHO))
    assert info.value.ref == REF
    with pytest.raises(LockBusy):
        bounded(lambda: refs.remove_if_equals(common(repo), REF, a, "gitstate: delete"))
    assert rev_parse(repo, REF) == a
    assert lock.read_text() == "someone else's\n"  # the other writer's lock is left alone
    assert len(refs.reflog(pygit2.Repository(str(repo)), REF)) == 1


def test_held_packed_refs_lock_makes_removal_of_a_packed_ref_busy(repo: Path) -> None:
    (a,) = commits(repo, 1)
    refs.add_if_new(common(repo), REF, a, "gitstate: create", committer=WHO)
    git(repo, "pack-refs", "--all")
    lock = Path(common(repo), "packed-refs.lock")
    lock.write_text("")
    with pytest.raises(LockBusy):
        bounded(lambda: refs.remove_if_equals(common(repo), REF, a, "gitstate: delete"))
    lock.unlink()
    assert rev_parse(repo, REF) == a


@pytest.mark.parametrize("env", [{"LANGUAGE": "de", "LC_ALL": "de_DE.UTF-8"},
                                 {"LANGUAGE": "de", "LC_ALL": "C.UTF-8"}],  # C.UTF-8: git really speaks German
                         ids=["de_DE", "C.UTF-8+LANGUAGE"])
def test_remove_if_equals_is_locale_independent(repo: Path, monkeypatch: pytest.MonkeyPatch,
                                                env: dict[str, str]) -> None:
    a, b = commits(repo, 2)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    refs.add_if_new(common(repo), REF, a, "gitstate: create", committer=WHO)
    lock = Path(common(repo), REF + ".lock")
    lock.write_text("")
    with pytest.raises(LockBusy):
        bounded(lambda: refs.remove_if_equals(common(repo), REF, a, "gitstate: delete"))
    lock.unlink()
    with pytest.raises(ConflictError):
        refs.remove_if_equals(common(repo), REF, b, "gitstate: delete")
    refs.remove_if_equals(common(repo), REF, a, "gitstate: delete")
    assert rev_parse(repo, REF) is None


def test_a_ref_below_an_existing_ref_is_a_store_write_error(repo: Path) -> None:
    a, b = commits(repo, 2)
    parent = "refs/agentos/main/runs/r/heads/x"
    refs.add_if_new(common(repo), parent, a, "gitstate: create", committer=WHO)
    child = parent + "/y"
    with pytest.raises(StoreWriteError):
        bounded(lambda: refs.add_if_new(common(repo), child, b, "gitstate: create", committer=WHO))
    assert rev_parse(repo, parent) == a and rev_parse(repo, child) is None
    assert not Path(common(repo), child + ".lock").exists()


def test_a_ref_above_existing_refs_is_a_store_write_error(repo: Path) -> None:
    a, b = commits(repo, 2)
    child = "refs/agentos/main/runs/r/heads/x/y"
    refs.add_if_new(common(repo), child, a, "gitstate: create", committer=WHO)
    parent = "refs/agentos/main/runs/r/heads/x"
    with pytest.raises(StoreWriteError):
        bounded(lambda: refs.add_if_new(common(repo), parent, b, "gitstate: create", committer=WHO))
    assert rev_parse(repo, child) == a and rev_parse(repo, parent) is None
    assert not Path(common(repo), parent + ".lock").exists()
    git(repo, "fsck", "--strict")


def test_a_directory_where_the_lock_goes_is_a_store_write_error(repo: Path) -> None:
    (a,) = commits(repo, 1)
    name = "refs/agentos/main/runs/r/heads/x"
    os.makedirs(Path(common(repo), name + ".lock", "inner"))
    with pytest.raises(StoreWriteError):
        bounded(lambda: refs.add_if_new(common(repo), name, a, "gitstate: create", committer=WHO))
    assert rev_parse(repo, name) is None


def test_reflog_lines_are_readable_by_git_and_by_reflog(repo: Path) -> None:
    a, b, c = commits(repo, 3)
    refs.add_if_new(common(repo), REF, a, "gitstate: create run r", committer=WHO)
    refs.set_if_equals(common(repo), REF, a, b, "gitstate: checkpoint plan · step 1", committer=WHO)
    refs.set_if_equals(common(repo), REF, b, c, "gitstate: two\nlines", committer=WHO)
    shown = git(repo, "reflog", "show", "--format=%H %gs", REF).splitlines()
    assert shown == [f"{c} gitstate: two lines", f"{b} gitstate: checkpoint plan · step 1",
                     f"{a} gitstate: create run r"]
    assert git(repo, "reflog", "show", "--format=%gn <%ge>", REF).splitlines()[0] == "Ref Tester <refs@example.com>"
    log = refs.reflog(pygit2.Repository(str(repo)), REF)
    assert [(e.old, e.new, e.message) for e in log] == [
        (b, c, "gitstate: two lines"), (a, b, "gitstate: checkpoint plan · step 1"), (None, a, "gitstate: create run r")]
    assert all(abs(e.time - time.time()) < 120 for e in log)
    assert git(repo, "rev-parse", f"{REF}@{{1}}").strip() == b
    git(repo, "fsck", "--strict")


def test_reflog_of_a_missing_ref_is_empty(repo: Path) -> None:
    assert refs.reflog(pygit2.Repository(str(repo)), REF) == []


def test_read_ref_and_list_refs(repo: Path) -> None:
    a, b = commits(repo, 2)
    other = "refs/agentos/main/runs/s/run"
    refs.add_if_new(common(repo), REF, a, "m", committer=WHO)
    refs.add_if_new(common(repo), other, b, "m", committer=WHO)
    handle = pygit2.Repository(str(repo))
    assert refs.read_ref(handle, REF) == a
    assert refs.read_ref(handle, "refs/agentos/main/runs/none/run") is None
    assert sorted(refs.list_refs(handle, "refs/agentos/")) == sorted([(REF, a), (other, b)])
    assert refs.list_refs(handle, "refs/agentos/main/runs/s/") == [(other, b)]


def _age(path: Path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


def test_break_stale_locks_removes_only_old_locks(repo: Path) -> None:
    (a,) = commits(repo, 1)
    refs.add_if_new(common(repo), REF, a, "m", committer=WHO)
    lock = Path(common(repo), REF + ".lock")
    other = Path(common(repo), "refs/agentos/main/runs/other/run.lock")
    other.parent.mkdir(parents=True)
    lock.write_text("")
    other.write_text("")
    _age(other, 3600)
    assert refs.break_stale_locks(common(repo), REF, 5.0) is False  # fresh: a live writer's
    assert lock.exists()
    _age(lock, 60)
    assert refs.break_stale_locks(common(repo), REF, 5.0) is True
    assert not lock.exists()
    assert other.exists()  # another ref's lock is not this call's business
    assert rev_parse(repo, REF) == a
    assert not list(Path(common(repo), REF).parent.glob("*.stale.*"))


def test_gits_packed_refs_lock_is_never_broken(repo: Path) -> None:
    """A packed-refs.lock left by git (no owner record) guards every ref of the repository; git
    never breaks it, however old, and neither does gitstate: a write waits and times out."""
    packed_lock = Path(common(repo), "packed-refs.lock")
    packed_lock.write_text("")
    _age(packed_lock, 10 * 86400)
    assert refs.break_stale_locks(common(repo), REF, 5.0) is False
    assert refs.stale_locks(common(repo), 0.0) == []
    assert refs.remove_stale_locks(common(repo), 0.0) == []
    assert packed_lock.exists()


def test_pack_refs_packs_only_refs_agentos(repo: Path) -> None:
    a, b = commits(repo, 2)
    git(repo, "branch", "user-packed")
    git(repo, "tag", "-a", "v1", "-m", "annotated")
    git(repo, "pack-refs", "--all")
    git(repo, "branch", "user-loose", b)
    git(repo, "tag", "loose-tag", a)
    names = [f"refs/agentos/main/runs/r{i}/heads/main" for i in range(7)]
    for i, name in enumerate(names):
        refs.add_if_new(common(repo), name, a if i % 2 else b, "m", committer=WHO)
    held = "refs/agentos/main/runs/held/run"
    refs.add_if_new(common(repo), held, a, "m", committer=WHO)
    Path(common(repo), held + ".lock").write_text("")
    before = git(repo, "for-each-ref", "--format=%(objectname) %(refname)")
    assert refs.count_loose_refs(common(repo)) == 8

    assert refs.pack_refs(common(repo), batch=3) == 7

    assert git(repo, "for-each-ref", "--format=%(objectname) %(refname)") == before
    for name in names:
        assert not Path(common(repo), name).exists()
    assert Path(common(repo), held).exists()  # locked by someone: left loose
    assert refs.count_loose_refs(common(repo)) == 1
    assert Path(common(repo), "refs/heads/user-loose").read_text().strip() == b
    assert Path(common(repo), "refs/tags/loose-tag").read_text().strip() == a
    packed = Path(common(repo), "packed-refs").read_text()
    assert "refs/heads/user-loose" not in packed and "refs/tags/loose-tag" not in packed
    assert all(name in packed for name in names)
    assert "refs/tags/v1\n^" in packed  # the user's peeled tag line survives
    assert git(repo, "rev-parse", "v1^{commit}").strip() == a
    assert not Path(common(repo), "refs/agentos/main/runs/r0").exists()  # emptied directories go
    assert not Path(common(repo), "packed-refs.lock").exists()
    git(repo, "fsck", "--strict")
    # the packed refs keep working for compare-and-swap, and git reads them
    refs.set_if_equals(common(repo), names[0], b, a, "m", committer=WHO)
    assert rev_parse(repo, names[0]) == a


def test_pack_refs_gives_way_to_a_held_packed_refs_lock(repo: Path) -> None:
    (a,) = commits(repo, 1)
    refs.add_if_new(common(repo), REF, a, "m", committer=WHO)
    Path(common(repo), "packed-refs.lock").write_text("")
    assert refs.pack_refs(common(repo)) == 0
    assert Path(common(repo), REF).exists()
    assert Path(common(repo), "packed-refs.lock").read_text() == ""


# --------------------------------------------------------------------------------------------
# update_atomically: several refs, all or nothing

REF2 = "refs/agentos/main/runs/r/heads/other"
REF3 = "refs/agentos/main/runs/r/run"


def _moves(*triples: tuple[str, str | None, str | None]) -> list[refs.Move]:
    return [refs.Move(name, old, new, "gitstate: test") for name, old, new in triples]


def test_update_atomically_moves_creates_and_deletes_at_once(repo: Path) -> None:
    a, b, c = commits(repo, 3)
    refs.add_if_new(common(repo), REF, a, "gitstate: create", committer=WHO)  # loose
    refs.add_if_new(common(repo), REF3, c, "gitstate: create", committer=WHO)
    git(repo, "branch", "user-branch")
    refs.update_atomically(common(repo), _moves((REF, a, b), (REF2, None, a), (REF3, c, None)), committer=WHO)
    assert (rev_parse(repo, REF), rev_parse(repo, REF2), rev_parse(repo, REF3)) == (b, a, None)
    assert rev_parse(repo, "user-branch") == a  # the user's refs keep their values
    repo_ = pygit2.Repository(str(repo))
    assert [(e.old, e.new) for e in refs.reflog(repo_, REF)][:1] == [(a, b)]
    assert [(e.old, e.new) for e in refs.reflog(repo_, REF2)] == [(None, a)]
    assert not Path(common(repo), "logs", *REF3.split("/")).exists()  # a deleted ref's log goes too
    assert not list(Path(common(repo)).rglob("*.lock"))
    git(repo, "fsck", "--strict")
    git(repo, "pack-refs", "--all")
    assert (rev_parse(repo, REF), rev_parse(repo, REF2), rev_parse(repo, REF3)) == (b, a, None)


@pytest.mark.parametrize("loose", [True, False], ids=["loose", "packed"])
def test_update_atomically_changes_nothing_on_a_conflict(repo: Path, loose: bool) -> None:
    """A later ref that holds something else: no ref moves, not even the ones before it."""
    a, b, c = commits(repo, 3)
    refs.add_if_new(common(repo), REF, a, "gitstate: create", committer=WHO)
    refs.add_if_new(common(repo), REF3, c, "gitstate: create", committer=WHO)
    if not loose:
        git(repo, "pack-refs", "--all")
    before = Path(common(repo), "packed-refs").read_bytes() if not loose else None
    with pytest.raises(ConflictError) as caught:
        refs.update_atomically(common(repo), _moves((REF, a, b), (REF2, None, a), (REF3, b, None)),
                               committer=WHO)
    assert caught.value.ref == REF3
    assert (rev_parse(repo, REF), rev_parse(repo, REF2), rev_parse(repo, REF3)) == (a, None, c)
    if before is not None:
        assert Path(common(repo), "packed-refs").read_bytes() == before
    assert not list(Path(common(repo)).rglob("*.lock"))


@pytest.mark.parametrize("held", ["ref", "packed-refs"])
def test_update_atomically_changes_nothing_while_a_lock_is_held(repo: Path, held: str) -> None:
    a, b = commits(repo, 2)
    refs.add_if_new(common(repo), REF, a, "gitstate: create", committer=WHO)
    lock = Path(common(repo), *(REF2 if held == "ref" else "packed-refs").split("/")).with_name(
        (REF2.rsplit("/", 1)[1] if held == "ref" else "packed-refs") + ".lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_text("")  # git's: no owner record
    with pytest.raises(LockBusy):
        refs.update_atomically(common(repo), _moves((REF, a, b), (REF2, None, b)), committer=WHO)
    assert (rev_parse(repo, REF), rev_parse(repo, REF2)) == (a, None)
    assert lock.read_text() == ""  # git's lock is left as it was
    assert sorted(p.name for p in Path(common(repo)).rglob("*.lock")) == [lock.name]


def test_update_atomically_of_many_refs_holds_one_descriptor(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A transaction of 300 refs runs with 32 more descriptors allowed than are open: every ref lock but the first is a
    hard link to the first, and each is judged alive (held) while the transaction holds them."""
    import resource

    (a,) = commits(repo, 1)
    names = [f"refs/agentos/main/runs/r{i:03d}/heads/main" for i in range(300)]
    seen: list[tuple[int, int, bool]] = []
    append = refs._append_reflog

    def looking(common_dir: str, name: str, *args: object, **kwargs: object) -> None:
        if not seen:
            for ref in names:
                lock = os.path.join(common_dir, *ref.split("/")) + ".lock"
                st = os.stat(lock)
                seen.append((st.st_ino, st.st_nlink, refs.break_stale_locks(common_dir, ref, 0.0)))
        append(common_dir, name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(refs, "_append_reflog", looking)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 32, hard))  # 32 more than now
    try:
        refs.update_atomically(common(repo), _moves(*((n, None, a) for n in names)), committer=WHO)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert {s[0] for s in seen} == {seen[0][0]} and seen[0][1] == 300  # one inode, 300 names
    assert not any(s[2] for s in seen)  # none broken as stale while held
    assert all(rev_parse(repo, n) == a for n in names)
    assert refs.count_loose_refs(common(repo)) == 0
    assert not list(Path(common(repo)).rglob("*.lock"))
    assert len(refs.reflog(pygit2.Repository(str(repo)), names[-1])) == 1
    git(repo, "fsck", "--strict")


def test_update_atomically_holds_each_lock_where_links_are_refused(repo: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the file system refuses another hard link (EMLINK), the lock is taken on its own."""
    import errno

    a, b = commits(repo, 2)

    def refuse(src: str, dst: str) -> None:
        raise OSError(errno.EMLINK, "too many links", dst)

    real_link = os.link
    monkeypatch.setattr(os, "link", lambda src, dst, **kw: refuse(src, dst) if dst.endswith("/other.lock")
                        else real_link(src, dst, **kw))
    refs.update_atomically(common(repo), _moves((REF, None, a), (REF2, None, b), (REF3, None, a)), committer=WHO)
    assert (rev_parse(repo, REF), rev_parse(repo, REF2), rev_parse(repo, REF3)) == (a, b, a)
    assert not list(Path(common(repo)).rglob("*.lock"))


def test_update_atomically_refuses_a_ref_with_packed_refs_below_it(repo: Path) -> None:
    a, b = commits(repo, 2)
    below = REF + "/deeper"
    refs.update_atomically(common(repo), _moves((below, None, a), (REF2, None, a)), committer=WHO)  # packed
    folder = Path(common(repo), *REF.split("/"))
    if folder.is_dir():
        folder.rmdir()  # only in packed-refs now: no folder tells that refs exist below
    with pytest.raises(StoreWriteError):
        refs.update_atomically(common(repo), _moves((REF, None, b), (REF3, None, b)), committer=WHO)
    assert (rev_parse(repo, REF), rev_parse(repo, REF3), rev_parse(repo, below)) == (None, None, a)
    git(repo, "fsck", "--strict")


def test_a_ref_folder_pack_refs_removes_meanwhile_is_made_again(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``git pack-refs`` removes the empty folders of the refs it packs; one that vanishes between
    gitstate making it and creating the lock there is made again (git tries once), and the ref
    and its reflog land."""
    a, b = commits(repo, 2)
    refs.set_if_equals(common(repo), REF, None, a, "gitstate: create", committer=WHO)
    git(repo, "pack-refs", "--all")  # the loose ref and its folders go
    folder = Path(common(repo), *REF.split("/")[:-1])
    assert not folder.exists()
    real = refs.lockfile.create_held
    pruned: list[str] = []

    def create_held(path: str, *args: object, **kw: object) -> int:
        if len(pruned) < 3 and folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()  # a pack-refs, just after gitstate made the folder
            pruned.append(path)
        return real(path, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(refs.lockfile, "create_held", create_held)
    refs.set_if_equals(common(repo), REF, a, b, "gitstate: move", committer=WHO)
    monkeypatch.undo()
    assert len(pruned) == 3 and rev_parse(repo, REF) == b
    assert git(repo, "reflog", "show", "--format=%H", REF).split()[0] == b
    git(repo, "fsck", "--strict")
