"""Plumbing shared by the framework integrations (:mod:`gitstate.openai_agents`,
:mod:`gitstate.agent_framework`, :mod:`gitstate.crewai`, ``gitstate.langgraph.GitStore``): the run
an integration owns (created on first write, refused when another workflow wrote it), JSON-like
values checked the way the framework's own backend checks them, and small helpers. Imports no
framework."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from gitstate.errors import (
    CorruptObjectError,
    ForeignRunError,
    NotSerializableError,
    RunExistsError,
    RunNotFound,
    UnsupportedFormatError,
)
from gitstate.format import frameworks
from gitstate.format.names import check_name, run_info_ref
from gitstate.store.run import Run
from gitstate.store.store import Store, open_store


def store_at(path: str | os.PathLike[str] | None, store: Store | None) -> Store:
    """``store`` if given, else the store of the repository at (or above) ``path`` (the current
    directory when ``None``), found as :func:`gitstate.open_store` finds it."""
    if isinstance(store, (str, os.PathLike)):
        return open_store(store)  # a path given where a store was expected: open the store there
    if store is not None:
        return store
    return open_store(path)


class RunHandle:
    """The run an integration keeps its data in: looked up on first use, created (with the
    integration's workflow name) on first write, and refused with :class:`ForeignRunError` when a
    run of that id belongs to another workflow. The handle caches the run; :meth:`ensure`
    re-creates the run record if someone deleted the run meanwhile."""

    def __init__(self, store: Store, run_id: str, workflow: str, metadata: Mapping[str, Any] | None = None) -> None:
        check_name("run id", run_id)
        self.store = store
        self.run_id = run_id
        self.workflow = workflow
        self.metadata = dict(metadata or {})
        self._run: Run | None = None
        self._lock = threading.Lock()

    def _checked(self, run: Run) -> Run:
        if run.workflow != self.workflow:
            raise ForeignRunError(run.id, run.workflow, self.workflow)
        return run

    def get(self) -> Run | None:
        """The run, or ``None`` if it does not exist (nothing is written)."""
        run = self._run
        if run is not None:
            return run
        try:
            run = self._checked(self.store.get_run(self.run_id))
        except RunNotFound:
            return None
        self._run = run
        return run

    def ensure(self) -> Run:
        """The run, created if it does not exist (also after it was deleted)."""
        with self._lock:
            run = self._run
            if run is not None and self.store.core.read_ref(run_info_ref(run.worktree, run.id)) is not None:
                return run
            self._run = None
            try:
                run = self._checked(self.store.get_run(self.run_id))
            except RunNotFound:
                try:
                    run = self.store.create_run(workflow=self.workflow, run_id=self.run_id,
                                                metadata=self.metadata or None)
                except RunExistsError:
                    run = self._checked(self.store.get_run(self.run_id))
            self._run = run
            return run

    def forget(self) -> None:
        """Drop the cached run (after it was deleted)."""
        self._run = None


def json_data(value: Any, what: str, default: Callable[[Any], Any] | None = None) -> Any:
    """``value`` as the framework's JSON backend gives it back: ``json.loads(json.dumps(value))``
    (tuples become lists, non-text keys text). A value ``json.dumps`` refuses raises
    :class:`NotSerializableError` (a ``TypeError`` and a :class:`GitStateError`)."""
    try:
        return json.loads(json.dumps(value, default=default))
    except (TypeError, ValueError, RecursionError) as exc:
        raise NotSerializableError(what, f"not JSON-serialisable: {exc}") from None


def check_payload(workflow: str, state: Any, oid: str) -> None:
    """Raise :class:`CorruptObjectError` (:class:`UnsupportedFormatError` for a newer version)
    unless ``state`` is a sound payload of the integration's kind."""
    problem = frameworks.check_state(workflow, state)
    if problem is None:
        return
    if "is not supported" in problem:
        raise UnsupportedFormatError(oid, problem)
    raise CorruptObjectError(oid, problem)


def sql_time(when: float | None = None) -> str:
    """UTC time as SQLite's ``CURRENT_TIMESTAMP`` writes it: ``YYYY-MM-DD HH:MM:SS``."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(time.time() if when is None else when))


class OrderClock:
    """Increasing integers from the clock (nanoseconds), strictly increasing within a process, so
    orders written by several processes interleave by time."""

    def __init__(self) -> None:
        self._last = 0
        self._lock = threading.Lock()

    def next(self) -> int:
        """The next number."""
        with self._lock:
            self._last = max(self._last + 1, time.time_ns())
            return self._last


SEQUENCE = OrderClock()

__all__ = ["SEQUENCE", "OrderClock", "RunHandle", "check_payload", "json_data", "sql_time", "store_at"]
