"""Temporarily setting process environment variables, restored exactly afterwards."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager


@contextmanager
def scoped_environ(changes: Mapping[str, str | None]) -> Iterator[None]:
    """Set (``str``) or remove (``None``) variables for the duration of the block; every variable
    named is put back as it was, present or absent, even when the block raises."""
    saved = {key: os.environ.get(key) for key in changes}
    try:
        for key, value in changes.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        yield
    finally:
        for key, old in saved.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old
