"""CrewAI flow state on gitstate: :class:`GitFlowPersistence` is a ``FlowPersistence`` (install the
``crewai`` extra of ``git-agentos``) for ``@persist(GitFlowPersistence())``.

A flow instance (its state ``id``) is a gitstate run (run id = the flow's uuid, workflow ``crewai``);
every ``save_state`` after a flow method is one checkpoint named after the method, so
``git agentos log <flow id>`` shows the flow's steps and ``git agentos show`` its state. A state
is kept as CrewAI's ``SQLiteFlowPersistence`` keeps it (pydantic models as ``model_dump(mode="json")``,
then JSON: sets and tuples become lists, dates ISO text), and ``load_state`` returns what it returns.
A pending human-feedback request rides along in the checkpoints until it is cleared."""

from __future__ import annotations

import os
from datetime import date, datetime
from typing import TYPE_CHECKING, Any

try:
    from crewai.flow.persistence.base import FlowPersistence
    from pydantic import BaseModel, Field, PrivateAttr
except ImportError as exc:  # pragma: no cover - exercised only without the extra installed
    # not "pip install gitstate[...]": that name on PyPI is another project's
    raise ImportError("gitstate.crewai needs CrewAI: install the crewai extra of git-agentos "
                      f"(from a checkout: pip install '.[crewai]') ({exc})") from exc

from gitstate.errors import EncodingError, UsageError
from gitstate.format import frameworks
from gitstate.format.checkpoint import Checkpoint
from gitstate.integrations import RunHandle, check_payload, json_data, store_at
from gitstate.store.run import NO_CHANGE
from gitstate.store.store import Store
from gitstate.store.transaction import Transaction

if TYPE_CHECKING:
    from crewai.flow.async_feedback.types import PendingFeedbackContext

__all__ = ["GitFlowPersistence"]

WORKFLOW = frameworks.CREWAI
KIND = frameworks.KINDS[WORKFLOW]


def _json_default(obj: Any) -> Any:
    """What CrewAI's SQLite persistence turns non-JSON values into; anything else is refused
    (SQLite would store ``str(obj)``, losing the value silently)."""
    if isinstance(obj, BaseModel):
        try:
            return obj.model_dump(mode="json")
        except Exception:  # noqa: BLE001 - as CrewAI: fall back to the python dump
            return obj.model_dump(mode="python")
    if isinstance(obj, set | tuple):
        return list(obj)
    if isinstance(obj, date | datetime):
        return obj.isoformat()
    raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")


def _plain(value: Any, what: str) -> Any:
    try:
        return json_data(value, what, default=_json_default)
    except EncodingError as exc:  # not a TypeError here: CrewAI reports it as a persistence failure
        raise EncodingError(exc.path, exc.reason) from None


class GitFlowPersistence(FlowPersistence):
    """CrewAI flow persistence in a git repository.

    ``GitFlowPersistence(path=None)``: ``path`` finds the repository as
    :func:`gitstate.open_store` does (default: the current directory); ``store=`` passes an open
    store. Methods return what ``SQLiteFlowPersistence`` returns for the same calls (``None`` for a
    flow never saved). Values that are not JSON-like (after CrewAI's conversions) raise
    :class:`gitstate.EncodingError` and nothing is written."""

    persistence_type: str = Field(default="GitFlowPersistence")
    path: str | None = None
    _store: Store | None = PrivateAttr(default=None)
    _handles: dict[str, RunHandle] = PrivateAttr(default_factory=dict)

    def __init__(self, path: str | os.PathLike[str] | None = None, /, *, store: Store | None = None,
                 **kwargs: Any) -> None:
        if path is not None:
            kwargs["path"] = os.fspath(path)
        super().__init__(**kwargs)
        self._store = store
        self.init_db()

    @property
    def store(self) -> Store:
        """The gitstate store (opened on first use)."""
        if self._store is None:
            self._store = store_at(self.path, None)
        return self._store

    def init_db(self) -> None:
        """Open the repository's store (nothing to create: runs appear on first save)."""
        _ = self.store

    def _handle(self, flow_uuid: str) -> RunHandle:
        if not isinstance(flow_uuid, str) or not flow_uuid:
            raise UsageError(f"flow_uuid must be a non-empty string, not {flow_uuid!r}")
        handle = self._handles.get(flow_uuid)
        if handle is None:
            handle = self._handles[flow_uuid] = RunHandle(self.store, flow_uuid, WORKFLOW)
        return handle

    @staticmethod
    def _state_dict(state_data: dict[str, Any] | BaseModel) -> dict[str, Any]:
        if isinstance(state_data, BaseModel):
            try:
                data = state_data.model_dump(mode="json")
            except Exception:  # noqa: BLE001 - as CrewAI
                data = state_data.model_dump(mode="python")
        elif isinstance(state_data, dict):
            data = state_data
        else:
            raise UsageError(f"state_data must be either a Pydantic BaseModel or dict, got {type(state_data)}")
        return dict(_plain(data, "state"))

    def _payload(self, cp: Checkpoint | None) -> dict[str, Any] | None:
        if cp is None:
            return None
        state = cp.state
        check_payload(WORKFLOW, state, cp.id)
        return dict(state)

    def _tip(self, flow_uuid: str) -> dict[str, Any] | None:
        run = self._handle(flow_uuid).get()
        return None if run is None else self._payload(run.head())

    def _write(self, flow_uuid: str, node: str, trigger: str, state: dict[str, Any] | None,
               pending: dict[str, Any] | None | bool) -> None:
        """One checkpoint: ``state`` (``None``: keep the tip's) and ``pending`` (``False``: keep the
        tip's, ``None``: clear it; if there is none, nothing is written)."""
        run = self._handle(flow_uuid).ensure()

        def change(tip: Checkpoint | None, _tx: Transaction) -> Any:
            current = self._payload(tip) or {}
            if state is None and pending is None and current.get("pending") is None:
                return NO_CHANGE
            new: dict[str, Any] = {"format": KIND, "v": frameworks.WRITTEN,
                                   "state": current.get("state", {}) if state is None else state}
            keep = current.get("pending") if pending is False else pending
            if keep is not None:
                new["pending"] = keep
            return new

        run.update(change, node=node, trigger=trigger, metadata={"method": node})

    # -- FlowPersistence ----------------------------------------------------------------------

    def save_state(self, flow_uuid: str, method_name: str, state_data: dict[str, Any] | BaseModel) -> None:
        """Save the flow's state after ``method_name`` (one checkpoint)."""
        self._write(flow_uuid, method_name, "method_end", self._state_dict(state_data), False)

    def load_state(self, flow_uuid: str) -> dict[str, Any] | None:
        """The most recently saved state of the flow, or ``None``."""
        payload = self._tip(flow_uuid)
        if payload is None:
            return None
        state = payload.get("state")
        return state if isinstance(state, dict) else None

    def save_pending_feedback(self, flow_uuid: str, context: PendingFeedbackContext,
                              state_data: dict[str, Any] | BaseModel) -> None:
        """Save the state and the pending feedback request (one checkpoint)."""
        state = self._state_dict(state_data)
        pending = {"context": dict(_plain(context.to_dict(), "context")), "state": state}
        self._write(flow_uuid, context.method_name, "pending_feedback", state, pending)

    def load_pending_feedback(self, flow_uuid: str) -> tuple[dict[str, Any], PendingFeedbackContext] | None:
        """The state and context saved with the pending feedback request, or ``None``."""
        from crewai.flow.async_feedback.types import PendingFeedbackContext

        payload = self._tip(flow_uuid)
        pending = None if payload is None else payload.get("pending")
        if not isinstance(pending, dict):
            return None
        return pending["state"], PendingFeedbackContext.from_dict(pending["context"])

    def clear_pending_feedback(self, flow_uuid: str) -> None:
        """Clear the pending feedback request (a checkpoint, if there was one)."""
        if self._handle(flow_uuid).get() is None:
            return
        self._write(flow_uuid, "clear_pending_feedback", "feedback_received", None, None)
