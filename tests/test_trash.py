"""A large restore moves what it replaces into a trash, unlinked there by a background thread."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import gitstate
from gitstate.errors import WorktreeWriteError
from gitstate.workspace import trash
from gitstate.workspace.trash import Trash


def _tree(root: Path) -> dict[str, tuple[str, bytes]]:
    """Every file and link of the worktree (not .git): path -> (kind, content or target)."""
    out: dict[str, tuple[str, bytes]] = {}
    for dirpath, dirs, files in os.walk(root):
        if Path(dirpath) == root and ".git" in dirs:
            dirs.remove(".git")
        for name in files + [d for d in dirs if (Path(dirpath) / d).is_symlink()]:
            full = Path(dirpath) / name
            rel = str(full.relative_to(root))
            out[rel] = ("link", os.readlink(full).encode()) if full.is_symlink() else ("file", full.read_bytes())
    return out


def _files(repo: Path, count: int = 120) -> None:
    for i in range(count):
        folder = repo / f"pkg{i % 5}"
        folder.mkdir(exist_ok=True)
        (folder / f"m{i:03d}.txt").write_text(f"value {i}\n")
    os.symlink("pkg0/m000.txt", repo / "link")


def _trash_root(repo: Path) -> Path:
    return repo / ".git" / "agentos" / "trash"


def _edit_all(repo: Path, count: int = 120) -> None:
    for i in range(count):
        (repo / f"pkg{i % 5}" / f"m{i:03d}.txt").write_text(f"edited {i}\n")


def test_large_restore_moves_old_files_through_a_trash_that_is_emptied(repo: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    _files(repo)
    (repo / ".gitignore").write_text("*.log\n")
    run = gitstate.open_store(repo).create_run()
    c1 = run.checkpoint({}, files=True)
    before = _tree(repo)
    _edit_all(repo)
    (repo / "pkg1" / "new.txt").write_text("created since\n")  # removed by the restore
    os.link(repo / "pkg2" / "m002.txt", repo / "hard.log")  # (ignored) another name of a file it replaces
    moved: list[str] = []
    discard = Trash.discard

    def spying(self: Trash, parent: int, name: str) -> bool:
        done = discard(self, parent, name)
        if done:
            moved.append(name)
        return done

    monkeypatch.setattr(Trash, "discard", spying)
    result = run.restore(c1, force=True)
    trash.wait()
    after = _tree(repo)
    assert after == {**before, "hard.log": ("file", b"edited 2\n")}  # the other link keeps what it had
    assert result.written == 120 and result.removed == ("pkg1/new.txt",)
    assert len(moved) == 121 and "new.txt" in moved  # every replaced and removed file went there
    assert os.listdir(_trash_root(repo)) == []  # and the trash is gone once emptied
    assert not [name for name in os.listdir(repo / ".git" / "agentos") if name.startswith("trash") and name != "trash"]


def test_a_small_restore_unlinks_in_place(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _files(repo, 10)
    run = gitstate.open_store(repo).create_run()
    c1 = run.checkpoint({}, files=True)
    _edit_all(repo, 10)
    monkeypatch.setattr(Trash, "open", classmethod(lambda cls, *a: pytest.fail("no trash for 10 files")))
    assert run.restore(c1, force=True).written == 10
    assert (repo / "pkg3" / "m003.txt").read_text() == "value 3\n"


def test_a_failing_rename_falls_back_to_unlink(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _files(repo)
    run = gitstate.open_store(repo).create_run()
    c1 = run.checkpoint({}, files=True)
    before = _tree(repo)
    _edit_all(repo)
    real = os.rename
    calls = []

    def cross_device(src: object, dst: object, *, src_dir_fd: int | None = None,
                     dst_dir_fd: int | None = None) -> None:
        if src_dir_fd is not None and dst_dir_fd is not None:
            calls.append(src)
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        real(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)  # type: ignore[arg-type]

    monkeypatch.setattr(trash.os, "rename", cross_device)
    run.restore(c1, force=True)
    monkeypatch.setattr(trash.os, "rename", real)
    trash.wait()
    assert _tree(repo) == before and len(calls) == 120
    assert os.listdir(_trash_root(repo)) == []


def test_no_trash_on_another_file_system(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = os.stat

    def other_device(path: object, *args: object, **kwargs: object) -> os.stat_result:
        st = real(path, *args, **kwargs)  # type: ignore[arg-type]
        if str(path).endswith(os.path.join("agentos", "trash")):
            fields = list(st)
            fields[2] += 1  # st_dev
            return os.stat_result(fields)
        return st

    monkeypatch.setattr(trash.os, "stat", other_device)
    assert Trash.open(str(repo / ".git"), str(repo)) is None
    monkeypatch.setattr(trash.os, "stat", real)
    opened = Trash.open(str(repo / ".git"), str(repo))
    assert opened is not None
    opened.close()
    assert os.listdir(_trash_root(repo)) == []


def test_a_directory_found_at_the_name_is_put_back_and_never_deleted(repo: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    (repo / "d").mkdir()
    (repo / "d" / "keep.txt").write_text("precious\n")
    (repo / "f.txt").write_text("a file\n")
    parent = os.open(repo, os.O_RDONLY | os.O_DIRECTORY)
    try:
        bin_ = Trash.open(str(repo / ".git"), str(repo))
        assert bin_ is not None
        assert bin_.discard(parent, "d") is False  # (the rename took it; it went back)
        assert (repo / "d" / "keep.txt").read_text() == "precious\n"
        assert bin_.discard(parent, "f.txt") is True and not (repo / "f.txt").exists()
        with pytest.raises(FileNotFoundError):
            bin_.discard(parent, "absent")
        # the directory cannot go back (something took its name): it stays in the trash, untouched
        real = os.rename
        state = {"n": 0}

        def second_fails(src: object, dst: object, **kwargs: object) -> None:
            state["n"] += 1
            if state["n"] == 2:
                raise OSError(errno.EEXIST, "File exists")
            real(src, dst, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(trash.os, "rename", second_fails)
        with pytest.raises(WorktreeWriteError, match="could not be put back"):
            bin_.discard(parent, "d")
        monkeypatch.setattr(trash.os, "rename", real)
        assert bin_.discard(parent, "other") is False  # takes nothing more
        bin_.close()
        trash.wait()
    finally:
        os.close(parent)
    [left] = os.listdir(_trash_root(repo))
    kept = _trash_root(repo) / left
    [name] = os.listdir(kept)  # the file moved there before it was unlinked
    assert (kept / name / "keep.txt").read_text() == "precious\n"


def test_trash_of_a_dead_process_is_emptied_by_the_next_large_restore(repo: Path) -> None:
    _files(repo)
    run = gitstate.open_store(repo).create_run()
    c1 = run.checkpoint({}, files=True)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    root = _trash_root(repo)
    gone = root / f"{dead.stdout.strip()}-0badc0de"
    (gone / "7").mkdir(parents=True)  # a directory it could not put back: left alone
    (gone / "7" / "inside.txt").write_text("kept\n")
    (gone / "3").write_text("old file\n")
    os.symlink("/nonexistent", gone / "4")
    live = root / f"{os.getppid()}-00000000"  # a live process's: untouched
    live.mkdir()
    (live / "0").write_text("in use\n")
    _edit_all(repo)
    run.restore(c1, force=True)
    trash.wait()
    assert sorted(os.listdir(root)) == sorted([gone.name, live.name])
    assert os.listdir(gone) == ["7"] and (gone / "7" / "inside.txt").read_text() == "kept\n"
    assert (live / "0").read_text() == "in use\n"


def test_a_process_that_exits_after_a_restore_leaves_no_trash(repo: Path) -> None:
    _files(repo, 400)
    run = gitstate.open_store(repo).create_run(run_id="exit")
    c1 = run.checkpoint({}, files=True)
    _edit_all(repo, 400)
    code = textwrap.dedent(f"""
        import gitstate
        run = gitstate.open_store({str(repo)!r}).get_run("exit")
        run.restore({c1.id!r}, force=True)
    """)  # exits at once: the interpreter waits for the trash thread
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
    assert os.listdir(_trash_root(repo)) == []
    assert (repo / "pkg4" / "m399.txt").read_text() == "value 399\n"

