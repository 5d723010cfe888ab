"""LangGraph integration: :class:`GitCheckpointSaver`, a ``BaseCheckpointSaver`` that keeps each
thread as a gitstate run (install the ``gitstate[langgraph]`` extra). The rest of gitstate never
imports this package, so the core works without LangGraph."""

from .saver import GitCheckpointSaver

__all__ = ["GitCheckpointSaver"]
