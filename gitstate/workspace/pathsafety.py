"""Which tree entry names may be written into a worktree: the rules git's own ``verify_path`` applies
(``read-tree``, ``checkout``, ``fsck``), so that a snapshot fetched from an untrusted remote can
neither escape the worktree nor write into ``.git``.

A name is refused when it is empty, ``.`` or ``..``, holds ``/``, ``\\`` or NUL, or is a spelling of
``.git`` that some file system maps onto ``.git``: any case (``.GIT``), with the Unicode code points
HFS+ ignores (``.g\\u200cit``), or NTFS forms (``.git.``, ``.git ``, ``git~1``, ``.git::$INDEX_ALLOCATION``).
Symbolic links may not be named ``.gitmodules``, ``.gitattributes``, ``.gitignore`` or ``.mailmap``
(git refuses them too), and gitlinks (submodule entries) are never written.

Names a file system cannot hold are refused too, before anything is written, rather than failing
half way through a restore: a name longer than :data:`NAME_MAX` bytes, and, where file names are
not byte strings (macOS, Windows), a name that is not UTF-8. (Trees hold names as bytes; pygit2 and
gitstate decode the bytes that are not UTF-8 as lone surrogates, which ``os`` functions encode
back to the same bytes on Linux and the other POSIX systems.)"""

from __future__ import annotations

import os
import sys

from gitstate.git.objects import MODE_BLOB, MODE_COMMIT, MODE_EXEC, MODE_LINK, MODE_TREE

#: Longest file name (one path component) written, in bytes: the limit of ext4, XFS, Btrfs, APFS
#: and NTFS alike.
NAME_MAX = 255
#: Whether this system's file names are byte strings, so that one that is not UTF-8 can be created
#: as git stores it.
BYTE_NAMES = (os.name == "posix" and sys.platform != "darwin"
              and sys.getfilesystemencoding() == "utf-8" and sys.getfilesystemencodeerrors() == "surrogateescape")

# Code points HFS+ drops when comparing names (git: next_hfs_char in utf8.c).
_HFS_IGNORABLE = frozenset(
    [*range(0x200C, 0x2010), *range(0x202A, 0x202F), *range(0x206A, 0x2070), 0xFEFF]
)
_LINK_PROTECTED = (".gitmodules", ".gitattributes", ".gitignore", ".mailmap")
WRITABLE_MODES = frozenset({MODE_BLOB, MODE_EXEC, MODE_LINK, MODE_TREE, 0o100664})


def hfs_fold(name: str) -> str:
    """``name`` as HFS+ compares it: ignorable code points dropped, case folded."""
    if name.isascii():  # none of the ignorable code points is ASCII
        return name.lower()
    return "".join(c for c in name if ord(c) not in _HFS_IGNORABLE).lower()


def is_hfs_dotgit(name: str) -> bool:
    """``name`` equals ``.git`` once HFS+ drops ignorable code points and folds case."""
    return hfs_fold(name) == ".git"


def is_ntfs_dotgit(name: str) -> bool:
    """``name`` names ``.git`` on NTFS: ``.git`` or its short name ``git~1`` (any case) followed only
    by spaces and periods, or by an alternate data stream (``:``)."""
    low = name.lower()
    if low.startswith(".git"):
        rest = name[4:]
    elif low.startswith("git~1"):
        rest = name[5:]
    else:
        return False
    for ch in rest:
        if ch == ":":
            return True
        if ch not in ". ":
            return False
    return True


def _is_protected_link_name(name: str) -> bool:
    folded = hfs_fold(name).rstrip(". ")
    if folded.split(":", 1)[0] in _LINK_PROTECTED:
        return True
    # NTFS short names of .gitmodules (git: is_ntfs_dotgitmodules checks "gi7eba~N")
    return folded.startswith("gi7eba~")


def _is_utf8(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_name(name: str, mode: int) -> str | None:
    """Why a tree entry of this name and mode must not be written (``None`` when it is fine)."""
    if name in ("", ".", ".."):
        return "empty, '.' or '..' path component"
    if "/" in name or "\\" in name or "\x00" in name:
        return "path component holds a separator or NUL"
    raw = name.encode("utf-8", "surrogateescape")
    if len(raw) > NAME_MAX:
        return f"name of {len(raw):,} bytes is longer than file systems allow ({NAME_MAX})"
    if not BYTE_NAMES and not name.isascii() and not _is_utf8(name):
        return "name is not UTF-8, which this system's file names cannot hold"
    if is_hfs_dotgit(name) or is_ntfs_dotgit(name):
        return "path component names .git"
    if mode == MODE_COMMIT:
        return "gitlink (submodule) entries are never restored"
    if mode not in WRITABLE_MODES:
        return f"unsupported file mode {mode:o}"
    if mode == MODE_LINK and _is_protected_link_name(name):
        return "symbolic link in place of a git control file"
    return None
