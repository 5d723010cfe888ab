"""Generate the sharded-memory fixture for tests/compat/test_compat_memory.py: LangGraph long-term
memory (GitStore) with one namespace of more than 256 items and one root of more than 256
namespaces, which the format stores in shards (state version 3), beside a small namespace of
another root (version 2).

RUN ONLY TO CREATE A NEW FIXTURE VERSION, with the gitstate code of the format it pins: the fixtures
under tests/compat/fixtures/ must never be regenerated in place. ``memory-format3.tar.gz`` was
written by the code that introduced shards:

    .venv/bin/python tests/compat/make_memory_fixture.py --output tests/compat/fixtures/memory-format3.tar.gz

Times differ at every run; the values do not."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from make_fixture import make_fixture  # noqa: E402

BIG = ("users", "ada")
SMALL = ("docs",)
COUNT = 300  # > 256: shards
TENANTS = 260  # namespaces ("tenants", "t<n>"): > 256, namespace shards


def value(n: int) -> dict[str, Any]:
    """Item ``n``'s value (keys in no sorted order)."""
    return {"zeta": n, "alpha": f"fact {n}", "mid": [n, {"y": 1, "b": 2}]}


def write(repo: Path) -> None:
    from langgraph.store.base import PutOp

    from gitstate.langgraph import GitStore

    store = GitStore.from_path(repo)
    store.batch([PutOp(BIG, f"k{n}", value(n)) for n in range(COUNT - 1)])
    store.put(BIG, "k299", value(COUNT - 1))
    store.put(SMALL, "readme", value(-1))
    store.batch([PutOp(("tenants", f"t{n}"), "profile", value(n)) for n in range(TENANTS)])


def main() -> None:
    make_fixture(__doc__, None, write)


if __name__ == "__main__":
    main()
