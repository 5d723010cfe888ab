"""LangGraph integration: :class:`GitCheckpointSaver`, a ``BaseCheckpointSaver`` that keeps each
thread as a gitstate run, and :class:`GitStore`, a ``BaseStore`` (long-term memory) with one branch
per namespace root (install the ``langgraph`` extra of the ``git-agentos`` distribution). The rest of gitstate never imports
this package, so the core works without LangGraph."""

try:
    from gitstate.langgraph.saver import GitCheckpointSaver
    from gitstate.langgraph.serde import StrictSerializer
    from gitstate.langgraph.store import GitStore
except ImportError as exc:  # pragma: no cover - exercised only without the extra installed
    # not "pip install gitstate[...]": that name on PyPI is another project's
    raise ImportError("gitstate.langgraph needs LangGraph: install the langgraph extra of git-agentos "
                      f"(from a checkout: pip install '.[langgraph]') ({exc})") from exc

__all__ = ["GitCheckpointSaver", "GitStore", "StrictSerializer"]
