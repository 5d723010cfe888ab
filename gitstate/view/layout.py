"""The layout of a commit graph as ``git log --graph`` draws it: an order of the commits (children
before parents, one line of history kept together) and a lane (column) for each, with the edge
segments between consecutive rows. Pure data, no git: the view draws it as SVG.

A segment ``(a, b, k)`` of a row's ``down`` list runs from lane ``a`` at that row to lane ``b`` at the
next row; the next row's ``up`` list holds the same segments, so each row can be drawn alone
(top half from ``up``, bottom half from ``down``). ``k`` is 1 when the edge leaves a commit that only
the reflog reaches (a rolled-back line), else 0."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

Segment = tuple[int, int, int]


@dataclass
class Row:
    """One commit of the graph: its lane and the segments drawn above and below it."""

    id: str
    col: int
    up: list[Segment] = field(default_factory=list)
    down: list[Segment] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        """A JSON-friendly form."""
        return {"id": self.id, "col": self.col, "up": [list(s) for s in self.up],
                "down": [list(s) for s in self.down]}


def topo_order(parents: Mapping[str, Sequence[str]], starts: Sequence[str]) -> list[str]:
    """The commits reachable from ``starts`` (in ``parents``), children before parents, one line
    at a time as ``git log --topo-order`` shows them: ``starts`` come in the given priority order,
    and a commit appears only after all its children in the set."""
    children: dict[str, int] = {oid: 0 for oid in parents}
    for ps in parents.values():
        for p in ps:
            if p in children:
                children[p] += 1
    out: list[str] = []
    seen: set[str] = set()
    # LIFO: the first start is popped first and its line followed down to a commit whose other
    # children are not shown yet; then the next start, and so on.
    stack = [s for s in reversed(list(dict.fromkeys(starts))) if s in children and children[s] == 0]
    while stack:
        oid = stack.pop()
        if oid in seen:
            continue
        seen.add(oid)
        out.append(oid)
        for p in reversed(parents[oid]):
            if p in children:
                children[p] -= 1
                if children[p] == 0:
                    stack.append(p)
    if len(out) < len(children):  # a cycle (impossible in git) or unreachable entries: append them
        out += [oid for oid in parents if oid not in seen]
    return out


def assign_lanes(order: Sequence[str], parents: Mapping[str, Sequence[str]],
                 dimmed: frozenset[str] | set[str] = frozenset()) -> tuple[list[Row], int]:
    """Lanes for commits in ``order`` (children first); returns the rows and the graph's width in
    lanes. A lane carries the commit it expects next; a commit sits in the first lane expecting it
    (lanes of other children join it there) or in the first free lane (a new line)."""
    lanes: list[str | None] = []
    kinds: list[int] = []
    sources: list[int] = []
    rows: list[Row] = []
    width = 0
    for oid in order:
        col = lanes.index(oid) if oid in lanes else _free(lanes, kinds, sources)
        if rows:
            rows[-1].down = [(sources[j], col if exp == oid else j, kinds[j])
                             for j, exp in enumerate(lanes) if exp is not None]
        row = Row(oid, col, up=list(rows[-1].down) if rows else [])
        rows.append(row)
        sources[:] = range(len(lanes))  # lanes go straight down unless a commit opens them below
        for j, exp in enumerate(lanes):
            if exp == oid:
                lanes[j] = None
        kind = 1 if oid in dimmed else 0
        for n, p in enumerate(p for p in parents.get(oid, ()) if p in parents):
            slot = col if n == 0 else _free(lanes, kinds, sources)
            lanes[slot], kinds[slot], sources[slot] = p, kind, col
        while lanes and lanes[-1] is None:
            lanes.pop()
            kinds.pop()
            sources.pop()
        width = max(width, len(lanes), col + 1)
    if rows:  # edges to parents outside the set run off the bottom
        rows[-1].down = [(sources[j], j, kinds[j]) for j, exp in enumerate(lanes) if exp is not None]
    return rows, width


def _free(lanes: list[str | None], kinds: list[int], sources: list[int]) -> int:
    for j, exp in enumerate(lanes):
        if exp is None:
            return j
    lanes.append(None)
    kinds.append(0)
    sources.append(len(lanes) - 1)
    return len(lanes) - 1


def layout(parents: Mapping[str, Sequence[str]], starts: Sequence[str],
           dimmed: frozenset[str] | set[str] = frozenset()) -> tuple[list[Row], int]:
    """:func:`topo_order` then :func:`assign_lanes`."""
    return assign_lanes(topo_order(parents, starts), parents, dimmed)
