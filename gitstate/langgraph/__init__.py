"""LangGraph integration: :class:`GitCheckpointSaver`, a ``BaseCheckpointSaver`` that keeps each
thread as a gitstate run, and :class:`GitStore`, a ``BaseStore`` (long-term memory) with one branch
per namespace root (install the ``gitstate[langgraph]`` extra). The rest of gitstate never imports
this package, so the core works without LangGraph."""

try:
    from gitstate.langgraph.saver import GitCheckpointSaver
    from gitstate.langgraph.serde import StrictSerializer
    from gitstate.langgraph.store import GitStore
except ImportError as exc:  # pragma: no cover - exercised only without the extra installed
    raise ImportError(f"gitstate.langgraph needs LangGraph: pip install 'gitstate[langgraph]' ({exc})") from exc

__all__ = ["GitCheckpointSaver", "GitStore", "StrictSerializer"]
