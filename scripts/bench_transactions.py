"""What an atomic multi-ref transaction costs: a checkpoint that moves one ref (compare-and-swap
of the branch), one that moves two (a node step: the branch and its node log, committed together
by one rename of packed-refs), and the same two moves made one after the other as gitstate made
them before transactions were atomic, side by side in one process, interleaved, in stores holding
--refs packed refs (the cost of the atomic path grows with packed-refs).

    python scripts/bench_transactions.py [--refs 200 2000 20000] [--rounds 30]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import gitstate
from gitstate.git import refs
from gitstate.store import base
from gitstate.store.transaction import Transaction, apply_one


def _sequential(common_dir: str, tx: Transaction, *, fsync: bool) -> None:
    """The moves one at a time (no atomicity): the old behaviour, for comparison."""
    for update in tx.updates[tx.moved:]:
        apply_one(common_dir, tx, update, fsync)
        tx.moved += 1


def _store(root: Path, count: int) -> gitstate.Store:
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    subprocess.run(["git", "-C", str(root), "commit", "-q", "--allow-empty", "-m", "init"], check=True)
    store = gitstate.open_store(root, pack_in_background=False)
    for i in range(count):
        store.create_run(run_id=f"r{i}")
    refs.pack_refs(store.location.common_dir)
    return store


def _median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--refs", type=int, nargs="+", default=[200, 2000, 20000])
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    real = base.apply_updates
    print(f"{'packed refs':>11} {'1 ref ms':>9} {'2 refs atomic':>14} {'2 refs one by one':>18} {'atomic/1':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        for count in args.refs:
            store = _store(Path(tmp) / f"s{count}", count)
            run = store.create_run(run_id="bench")
            run.checkpoint({"i": -1}, node="warm")
            one: list[float] = []
            atomic: list[float] = []
            seq: list[float] = []

            def timed(out: list[float], call: Callable[[], object]) -> None:
                start = time.perf_counter()
                call()
                out.append(time.perf_counter() - start)

            for i in range(args.rounds):
                order = [0, 1, 2] if i % 2 == 0 else [2, 1, 0]
                for k in order:
                    if k == 0:
                        timed(one, lambda i=i, r=run: r.checkpoint({"i": i}, mark_node=False))
                    elif k == 1:
                        timed(atomic, lambda i=i, r=run: r.checkpoint({"i": i}, node="n"))
                    else:
                        base.apply_updates = _sequential
                        try:
                            timed(seq, lambda i=i, r=run: r.checkpoint({"i": i}, node="n"))
                        finally:
                            base.apply_updates = real
            print(f"{count:>11} {_median_ms(one):>9.2f} {_median_ms(atomic):>14.2f} {_median_ms(seq):>18.2f} "
                  f"{_median_ms(atomic) / _median_ms(one):>9.2f}")
            store.close()


if __name__ == "__main__":
    main()
