"""Opening private files without ever blocking: a FIFO (or a device, a socket) in the place of a
file under ``.git/agentos/`` is an ``OSError`` at once, never an ``open`` that waits for ever for the
other end; a regular file opens as with the built-in ``open``."""

from __future__ import annotations

import fcntl
import os
import socket
from pathlib import Path

import pytest
from conftest import bounded

from gitstate.git import safeopen
from gitstate.git.safeopen import NotRegularFileError


def test_a_fifo_is_refused_at_once_for_reading_and_writing(tmp_path: Path) -> None:
    fifo = tmp_path / "git-version"
    os.mkfifo(fifo)
    for mode in ("r", "rb", "w", "wb", "a"):
        with pytest.raises(OSError):
            bounded(lambda m=mode: safeopen.open_file(fifo, m), 5)
    with pytest.raises(NotRegularFileError, match="a FIFO"):
        bounded(lambda: safeopen.open_file(fifo, "rb"), 5)
    assert fifo.is_fifo()  # refused, left alone


def test_a_fifo_with_a_writer_is_refused_too(tmp_path: Path) -> None:
    fifo = tmp_path / "tx-packs"
    os.mkfifo(fifo)
    writer = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)  # the other end is open: open() would not block
    try:
        with pytest.raises(NotRegularFileError):
            bounded(lambda: safeopen.open_file(fifo, "rb"), 5)
    finally:
        os.close(writer)


def test_a_directory_and_a_socket_are_refused(tmp_path: Path) -> None:
    folder = tmp_path / "packs"
    folder.mkdir()
    with pytest.raises(IsADirectoryError):
        safeopen.open_file(folder, "rb")
    sock_path = tmp_path / "s"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(sock_path))
        with pytest.raises(OSError):
            safeopen.open_file(sock_path, "rb")
        assert not safeopen.regular_or_absent(sock_path)


def test_a_regular_file_opens_as_with_open_and_blocks_as_usual(tmp_path: Path) -> None:
    path = tmp_path / "f"
    with safeopen.open_file(path, "w", encoding="ascii") as fh:
        fh.write("one\n")
    with safeopen.open_file(path, "a", encoding="ascii") as fh:
        fh.write("two\n")
    with safeopen.open_file(path, encoding="ascii") as fh:
        assert fh.read() == "one\ntwo\n"
        assert not fcntl.fcntl(fh.fileno(), fcntl.F_GETFL) & os.O_NONBLOCK  # cleared once checked
    with safeopen.open_file(path, "wb") as fh:
        fh.write(b"x")
    assert path.read_bytes() == b"x"
    with pytest.raises(FileNotFoundError):
        safeopen.open_file(tmp_path / "missing", "rb")


def test_replace_special_makes_a_new_file_where_a_fifo_was(tmp_path: Path) -> None:
    fifo = tmp_path / "loose.journal"
    os.mkfifo(fifo)
    fd = bounded(lambda: safeopen.open_fd(fifo, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644,
                                          replace_special=True), 5)
    try:
        os.write(fd, b"abc\n")
    finally:
        os.close(fd)
    assert fifo.is_file() and fifo.read_bytes() == b"abc\n"


def test_remove_special_removes_only_fifos_devices_and_sockets(tmp_path: Path) -> None:
    regular, folder, link, fifo = (tmp_path / n for n in ("regular", "folder", "link", "fifo"))
    regular.write_text("x")
    folder.mkdir()
    os.mkfifo(fifo)
    link.symlink_to(fifo)
    assert [safeopen.remove_special(p) for p in (regular, folder, link)] == [False, False, False]
    assert regular.exists() and folder.exists() and link.is_symlink()
    assert not safeopen.regular_or_absent(link)  # a link to a FIFO
    assert safeopen.remove_special(fifo) and not os.path.lexists(fifo)
    assert safeopen.regular_or_absent(regular) and safeopen.regular_or_absent(tmp_path / "missing")
    assert not safeopen.regular_or_absent(folder)


def test_a_folder_removed_meanwhile_is_made_again(tmp_path: Path) -> None:
    """A concurrent ``git prune`` removes an empty fan-out folder between its ``mkdir`` and the
    temporary file made in it: the folder is made again and the file created."""
    folder = tmp_path / "ab"
    tries: list[int] = []

    def make() -> int:
        tries.append(1)
        if len(tries) <= 3 and folder.exists():
            folder.rmdir()  # a prune, just before our open
        return os.open(folder / "tmp_obj_x", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o444)

    os.close(safeopen.in_folder(str(folder), make))
    assert (folder / "tmp_obj_x").exists() and len(tries) == 4


def test_a_folder_that_keeps_vanishing_fails_after_bounded_tries(tmp_path: Path) -> None:
    tries: list[int] = []

    def make() -> None:
        tries.append(1)
        raise FileNotFoundError(2, "gone again", str(tmp_path / "cd" / "tmp_obj_y"))

    with pytest.raises(FileNotFoundError, match="gone again"):
        safeopen.in_folder(str(tmp_path / "cd"), make)
    assert len(tries) == safeopen.FOLDER_ATTEMPTS
