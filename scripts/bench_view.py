"""Server time of `git agentos view` on large stores, and the size of the static HTML file.

    python scripts/bench_view.py                 # 10,000 runs; a 5,000-checkpoint run; 1,000 for --html
    python scripts/bench_view.py --quick         # small stores (a smoke test)
    python scripts/bench_view.py --work DIR      # keep the stores in DIR and reuse them next time

Stores are built with the public API (creating 10,000 runs takes minutes; --work keeps them).
Each figure is the server's own time (its Server-Timing header) for one request over HTTP on
127.0.0.1: "cold" is the first request of that kind to a fresh server (requests are made in the
order listed, so "then filtered" finds the run listing already in memory; the OS file cache is
warm), "warm" the same request again. Medians with min-max over --repeat rounds;
nothing is asserted."""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import gitstate  # noqa: E402
from gitstate.view.server import make_server  # noqa: E402
from gitstate.view.static import write_html  # noqa: E402


def git_init(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True, env=env)


def build_runs(path: Path, n: int) -> None:
    """``n`` runs of one checkpoint each (a few failed, completed, inside nodes)."""
    git_init(path)
    store = gitstate.open_store(path)
    started = time.monotonic()
    for i in range(n):
        run = store.create_run(workflow=f"flow-{i % 7}", run_id=f"run-{i:05d}", metadata={"ticket": i, "team": "ab"[i % 2]})
        status = ("failed", "completed", None, "interrupted")[i % 4]
        run.checkpoint({"messages": [f"task {i}"], "i": i}, node="plan", trigger="tool_end", status=status)
        if i and i % 1000 == 0:
            print(f"  {i} runs ({time.monotonic() - started:.0f} s)", flush=True)
    store.wait_for_housekeeping()
    store.close()


def build_graph(path: Path, n: int, static_n: int) -> None:
    """Run ``long``: ``n`` checkpoints (one message appended per step, a node every 10 steps), a
    fork, a rollback kept in the reflog; run ``thousand``: ``static_n`` checkpoints for --html."""
    git_init(path)
    store = gitstate.open_store(path)
    started = time.monotonic()
    for run_id, count in (("long", n), ("thousand", static_n)):
        run = store.create_run(workflow="bench", run_id=run_id)
        messages: list[dict[str, Any]] = []
        step = 0
        while step < count:
            with run.node(f"node-{(step // 10) % 5}"):
                for _ in range(8):
                    messages.append({"role": "assistant", "content": f"step {step}: " + "lorem ipsum " * 20})
                    run.checkpoint({"messages": messages, "step": step}, node=f"node-{(step // 10) % 5}",
                                   trigger="tool_end")
                    step += 1
            step += 2
            if step and step % 1000 < 10:
                print(f"  {run_id}: {step} checkpoints ({time.monotonic() - started:.0f} s)", flush=True)
        tip = run.head()
        assert tip is not None
        run.fork(tip.id, "retry")
        for k in range(20):
            run.checkpoint({"messages": messages[:-3] + [{"role": "user", "content": f"retry {k}"}]}, branch="retry")
        history = list(run.history(limit=12))
        run.rollback(history[-1].id)
        for k in range(5):
            run.checkpoint({"messages": messages[:-11] + [{"role": "user", "content": f"after rollback {k}"}]})
    store.wait_for_housekeeping()
    store.close()


def ensure(work: Path, name: str, params: dict[str, int], builder: Any) -> Path:
    path = work / name
    marker = path / ".bench-built"
    if marker.exists() and json.loads(marker.read_text()) == params:
        print(f"reusing {path}")
        return path
    if path.exists():
        shutil.rmtree(path)
    print(f"building {path} {params} ...", flush=True)
    started = time.monotonic()
    builder(path, *params.values())
    marker.write_text(json.dumps(params))
    print(f"  built in {time.monotonic() - started:.0f} s")
    return path


def request(port: int, url: str) -> tuple[float, int]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    conn.request("GET", url, headers={"Host": f"127.0.0.1:{port}"})
    resp = conn.getresponse()
    body = resp.read()
    conn.close()
    if resp.status != 200:
        raise RuntimeError(f"{url}: {resp.status} {body[:200]!r}")
    timing = resp.getheader("Server-Timing") or ""
    return float(timing.split("dur=")[1]) / 1000, len(body)


def measure(path: Path, urls: dict[str, str], repeat: int) -> dict[str, dict[str, list[float]]]:
    out: dict[str, dict[str, list[float]]] = {name: {"cold": [], "warm": [], "bytes": []} for name in urls}
    for _ in range(repeat):
        store = gitstate.open_store(path)
        server = make_server(store).start()
        try:
            for name, url in urls.items():
                cold, size = request(server.port, url)
                warm, _ = request(server.port, url)
                out[name]["cold"].append(cold)
                out[name]["warm"].append(warm)
                out[name]["bytes"].append(size)
        finally:
            server.stop()
            store.close()
    return out


def fmt(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:8.1f} ms  ({min(values) * 1000:.1f}-{max(values) * 1000:.1f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=10_000)
    ap.add_argument("--checkpoints", type=int, default=5_000)
    ap.add_argument("--static-checkpoints", type=int, default=1_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--work", help="keep the stores here and reuse them")
    ap.add_argument("--quick", action="store_true", help="small stores, two rounds")
    ap.add_argument("--json", help="write the figures to this file")
    args = ap.parse_args()
    if args.quick:
        args.runs, args.checkpoints, args.static_checkpoints, args.repeat = 150, 200, 100, 2
    for name in ("GIT_DIR", "GIT_WORK_TREE", "AGENTOS_REPO"):
        os.environ.pop(name, None)
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="bench-view-"))
    work.mkdir(parents=True, exist_ok=True)
    runs_repo = ensure(work, "runs", {"runs": args.runs}, build_runs)
    graph_repo = ensure(work, "graph", {"checkpoints": args.checkpoints, "static": args.static_checkpoints},
                        build_graph)

    store = gitstate.open_store(graph_repo)
    tip = store.get_run("long").head()
    assert tip is not None
    store.close()
    figures: dict[str, Any] = {}
    print(f"\nserver time per request, median (min-max) of {args.repeat} fresh servers")
    for label, path, urls in (
        (f"store with {args.runs:,} runs", runs_repo, {
            "runs page (100 newest)": "/api/runs?limit=100",
            "then filtered (status:failed)": "/api/runs?limit=100&q=status%3Afailed",
            "live-update token (all runs)": "/api/token",
        }),
        (f"run with {args.checkpoints:,} checkpoints", graph_repo, {
            "graph (first 300 rows)": "/api/graph?run=long&limit=300",
            "node spans": "/api/nodes?run=long",
            "one checkpoint (tip)": f"/api/checkpoint?id={tip.id}",
            "diff tip vs parent": f"/api/diff?a={tip.id}",
            "live-update token (run)": "/api/token?run=long",
        }),
    ):
        results = measure(path, urls, args.repeat)
        print(f"\n{label}")
        print(f"  {'request':38} {'cold':>30}   {'warm':>30}   bytes")
        for name, r in results.items():
            print(f"  {name:38} {fmt(r['cold'])}   {fmt(r['warm'])}   {int(statistics.median(r['bytes'])):,}")
            figures[name] = {k: statistics.median(v) for k, v in r.items()}

    out = work / "thousand.html"
    store = gitstate.open_store(graph_repo)
    started = time.perf_counter()
    result = write_html(store, ["thousand"], out)
    elapsed = time.perf_counter() - started
    store.close()
    print(f"\nstatic HTML of a run with {result.checkpoints:,} checkpoints: {result.size / 1e6:.2f} MB "
          f"(written in {elapsed:.1f} s): {out}")
    figures["static_html_bytes"] = result.size
    figures["static_html_checkpoints"] = result.checkpoints
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
