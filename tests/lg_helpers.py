"""Small LangGraph graphs for the tests: a chain of nodes from START to END."""

from __future__ import annotations

from typing import Any

from langgraph.graph import END, START, StateGraph


def chain(state: type, *nodes: tuple[str, Any]) -> StateGraph:
    """An uncompiled graph of ``state`` running ``nodes`` (name, function or compiled subgraph) one
    after the other, START to END."""
    graph = StateGraph(state)
    previous = START
    for name, action in nodes:
        graph.add_node(name, action)
        graph.add_edge(previous, name)
        previous = name
    graph.add_edge(previous, END)
    return graph
