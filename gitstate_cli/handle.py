"""The object on ``ctx.obj``: the store, opened on first use. Importing this module is cheap (no
gitstate, no pygit2), so the group callback can create it before any command runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import gitstate


class StoreHandle:
    """Opens the store of the current repository on first use (``GIT_DIR`` and ``AGENTOS_REPO``
    honoured by :func:`gitstate.open_store`) and closes it when the command ends."""

    def __init__(self, no_pager: bool = False) -> None:
        self._store: gitstate.Store | None = None
        #: ``git agentos --no-pager``: no command pipes its output into a pager.
        self.no_pager = no_pager

    @property
    def store(self) -> gitstate.Store:
        """The open store (opened now if needed)."""
        if self._store is None:
            import gitstate

            self._store = gitstate.open_store()
        return self._store

    def close(self) -> None:
        """Close the store if it was opened."""
        if self._store is not None:
            self._store.close()
            self._store = None
