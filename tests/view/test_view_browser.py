"""`git agentos view` in a real headless browser (Debian's chromium, driven by Playwright): the
runs page, a run's graph with a fork and a rolled-back line, one checkpoint, the diff of two
checkpoints picked in the graph, a checkpoint written by another process appearing live, and the
same on the one-file HTML of `--html` opened with the network cut. Hostile state renders as text.

The browser is installed by scripts/install-browser.sh (scripts/test.sh runs it); these tests fail,
never skip, when it is missing. Screenshots are kept in test-artifacts/screenshots/; with
UPDATE_DOCS_SCREENSHOT=1 (or when it is missing) the diff screenshot is also written to
docs/view-screenshot.png, the picture README shows."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import gitstate

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "test-artifacts" / "screenshots"
DOCS_SHOT = ROOT / "docs" / "view-screenshot.png"
HOSTILE = "</script><script>window.PWNED=1</script> <img src=x onerror=\"window.PWNED=2\"> javascript:alert(1) {{template}}"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-quic", "--no-first-run",
                 "--disable-default-apps", "--disable-extensions"]


def chromium_path() -> str:
    """Debian's chromium (or $GITSTATE_CHROMIUM); a clear failure when it is missing."""
    for candidate in (os.environ.get("GITSTATE_CHROMIUM"), shutil.which("chromium"), "/usr/bin/chromium",
                      shutil.which("chromium-browser")):
        if candidate and os.path.exists(candidate):
            return candidate
    pytest.fail("Debian's chromium is not installed: run `bash scripts/install-browser.sh` "
                "(as root: apt-get install -y chromium); scripts/test.sh does this first", pytrace=False)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("playwright is not installed: pip install -e '.[dev]' (scripts/test.sh does)", pytrace=False)
    executable = chromium_path()
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


@pytest.fixture
def page(browser: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    pg = context.new_page()
    problems: list[str] = []
    pg.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
    pg.on("console", lambda msg: problems.append(msg.text) if msg.type == "error" and "Content Security Policy" in msg.text else None)
    pg.problems = problems
    yield pg
    context.close()
    assert problems == []


def shot(pg: Any, name: str) -> Path:
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    pg.screenshot(path=str(path))
    return path


def make_demo(repo: Path) -> dict[str, Any]:
    """A run with node boundaries, files, tools, audit, a fork, a failed node rolled back (kept in
    the reflog), session files and hostile text; and a second run."""
    store = gitstate.open_store(repo)
    run = store.create_run(workflow="triage", run_id="issue-78", metadata={"ticket": "T-78"})
    run.checkpoint({"messages": [{"role": "user", "content": "fix the crash"}], "plan": None}, node="plan",
                   trigger="tool_end", files=True, tools=[{"tool": "grep", "args": "crash", "result": "3 hits"}])
    with run.node("edit", files=True):
        (repo / "app.py").write_text("print('hello')\nprint('world')\n")
        run.checkpoint({"messages": [{"role": "user", "content": "fix the crash"},
                                     {"role": "assistant", "content": "patched app.py"}],
                        "plan": "patch", "blob": b"\x00\x01\x02\x03"}, node="edit", files=True,
                       audit=[{"event": "write", "path": "app.py"}])
    fork_at = run.load("node:edit")
    run.fork(fork_at.id, "retry")
    run.checkpoint({"messages": [{"role": "assistant", "content": "another approach"}], "plan": "retry"},
                   branch="retry", node="test")
    try:
        with run.node("deploy"):
            run.checkpoint({"messages": [{"role": "assistant", "content": "deploying"}], "plan": "deploy"},
                           node="deploy")
            raise RuntimeError("deploy failed")
    except RuntimeError:
        pass
    run.rollback(fork_at.id)
    run.checkpoint({"messages": [{"role": "user", "content": "fix the crash"},
                                 {"role": "assistant", "content": "patched app.py"},
                                 {"role": "assistant", "content": "tests pass"}],
                    "plan": "patch", "note": HOSTILE}, node="test", status="completed", files=True)
    run.files.write("notes.md", "# notes\nfirst\n", author="agent:planner", reason="start notes")
    run.files.write("notes.md", "# notes\nsecond\n", author="agent:tester", reason="update notes")
    other = store.create_run(workflow="other-flow", run_id="run-2")
    other.checkpoint({"x": 1}, node="only")
    ids = {cp.id for tip in run.branches().values() for cp in run.history(tip.branch)}
    store.close()
    return {"ids": ids}


@pytest.fixture
def demo(repo: Path) -> dict[str, Any]:
    return make_demo(repo)


def agentos(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gitstate_cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, check=False)


@pytest.fixture
def served(repo: Path, demo: dict[str, Any]) -> Iterator[str]:
    """`git agentos view --no-open --port 0` in the repository; yields the address it prints."""
    proc = subprocess.Popen([sys.executable, "-m", "gitstate_cli", "view", "--no-open", "--port", "0"], cwd=repo,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        found = re.search(r"http://127\.0\.0\.1:\d+/", line)
        assert found, (line, proc.stderr.read() if proc.stderr else "")
        yield found.group(0)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def playwright_expect() -> Any:
    from playwright.sync_api import expect

    expect.set_options(timeout=10_000)
    return expect


def open_run(page: Any, run_id: str) -> None:
    page.locator("a.run-link", has_text=run_id).first.click()
    page.wait_for_selector("#rows .row")


def test_server_runs_graph_checkpoint_and_diff(served: str, page: Any, demo: dict[str, Any]) -> None:
    page.goto(served)
    page.wait_for_selector("a.run-link")
    for run_id in ("issue-78", "run-2"):
        assert page.locator("a.run-link", has_text=run_id).count() == 1
    shot(page, "server-runs")

    # the filter box: workflow, status, metadata text
    expect = playwright_expect()
    page.fill("#filter", "workflow:other")
    expect(page.locator("a.run-link")).to_have_text(["run-2"])
    page.fill("#filter", "t-78")
    expect(page.locator("a.run-link")).to_have_text(["issue-78"])
    page.fill("#filter", "status:completed")
    expect(page.locator("a.run-link")).to_have_text(["issue-78"])
    page.fill("#filter", "")
    expect(page.locator("a.run-link")).to_have_count(2)

    open_run(page, "issue-78")
    rows = page.locator("#rows .row")
    expect(rows.nth(len(demo["ids"]) - 1)).to_be_attached()
    shown = set(rows.evaluate_all("els => els.map(e => e.dataset.id)"))
    assert demo["ids"] <= shown  # every checkpoint of every branch
    assert len(shown) > len(demo["ids"])  # plus the rolled-back line kept in the reflog
    branches = page.locator("#branches .chip").all_inner_texts()
    assert "main" in branches and "retry" in branches
    assert page.locator("#rows .row.dimmed").count() >= 1  # the rolled-back line, told apart
    assert page.locator("#rows .row .chip.reflog").count() == 1
    assert page.locator("#rows .row .chip.failed").count() >= 1  # the failed node
    page.wait_for_selector("#rows .row .spans .bar")  # node spans
    lanes = set(page.locator("#rows .row svg circle").evaluate_all("els => els.map(e => e.getAttribute('cx'))"))
    assert len(lanes) >= 3  # main, retry and the reflog line in three lanes
    shot(page, "server-graph")

    # one checkpoint: the tip of main
    tip = page.locator("#rows .row").first
    tip.click()
    page.wait_for_selector("#checkpoint")
    detail = page.locator("#checkpoint")
    assert detail.get_attribute("data-id") == tip.get_attribute("data-id")
    text = detail.inner_text()
    assert "tests pass" in text and "fix the crash" in text
    assert HOSTILE in detail.locator("#state").inner_text().replace("\n", " ") or "window.PWNED=1" in text
    assert "git log -1" in page.locator("#git-commands").inner_text() or page.locator("#git-commands").count() == 1
    shot(page, "server-checkpoint")

    # the plan checkpoint: tools, files and a file's content
    plan = page.locator("#rows .row", has_text="plan").last
    plan.click()
    page.wait_for_selector("#checkpoint #tools")
    assert "3 hits" in page.locator("#tools").inner_text()
    page.locator("#files a.file", has_text="README").click()
    page.wait_for_selector("#file-content")
    assert "hello" in page.locator("#file-content").inner_text()

    # tick two checkpoints: their diff
    rows.nth(0).locator("input.pick").check()
    rows.last.locator("input.pick").check()
    page.wait_for_selector("#diff")
    diff = page.locator("#diff")
    kinds = diff.locator(".change").evaluate_all("els => els.map(e => e.dataset.kind || e.dataset.path)")
    assert "appended" in kinds
    assert "app.py" in diff.inner_text() and "+print('world')" in diff.inner_text()
    path = shot(page, "server-diff")
    if os.environ.get("UPDATE_DOCS_SCREENSHOT") == "1" or not DOCS_SHOT.exists():
        shutil.copyfile(path, DOCS_SHOT)

    # session files
    page.locator("#tab-files").click()
    page.locator("#session-files a[data-path='notes.md']").click()
    page.wait_for_selector("#session-files [data-version='2']")
    versions = page.locator("#session-files").inner_text()
    assert "agent:tester" in versions and "update notes" in versions and "+second" in versions
    shot(page, "server-session-files")
    assert page.evaluate("window.PWNED") is None


def test_a_checkpoint_written_by_another_process_appears(served: str, page: Any, repo: Path) -> None:
    page.goto(served + "#run=issue-78")
    page.wait_for_selector("#rows .row")
    before = page.locator("#rows .row").count()
    writer = ("import gitstate; s = gitstate.open_store('.'); r = s.get_run('issue-78'); "
              "print(r.checkpoint({'messages': ['live']}, node='live-node').id)")
    out = subprocess.run([sys.executable, "-c", writer], cwd=repo, capture_output=True, text=True, timeout=60,
                         check=True)
    new_id = out.stdout.strip()
    page.wait_for_selector(f"#rows .row[data-id='{new_id}']", timeout=10_000)  # within a few seconds
    assert page.locator("#rows .row").count() == before + 1
    assert page.locator("#rows .row").first.get_attribute("data-id") == new_id
    shot(page, "server-live-update")
    # and on the runs page, a new run appears
    page.goto(served)
    page.wait_for_selector("a.run-link")
    subprocess.run([sys.executable, "-c", "import gitstate; gitstate.open_store('.').create_run(run_id='late-run')"],
                   cwd=repo, check=True, timeout=60)
    page.wait_for_selector("a.run-link[data-run='late-run']", timeout=10_000)


def test_static_html_without_network(page: Any, repo: Path, demo: dict[str, Any], tmp_path: Path) -> None:
    out = tmp_path / "issue-78.html"
    res = agentos("view", "issue-78", "--html", str(out), cwd=repo)
    assert res.returncode == 0, res.stderr
    requests: list[str] = []
    context = page.context
    context.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file:") else route.abort())
    page.on("request", lambda req: requests.append(req.url))
    context.set_offline(True)
    page.goto(out.as_uri())
    page.wait_for_selector("#rows .row")
    shown = set(page.locator("#rows .row").evaluate_all("els => els.map(e => e.dataset.id)"))
    assert demo["ids"] <= shown
    branches = page.locator("#branches .chip").all_inner_texts()
    assert "main" in branches and "retry" in branches
    shot(page, "static-graph")
    page.locator("#rows .row").first.click()
    page.wait_for_selector("#checkpoint")
    assert "tests pass" in page.locator("#checkpoint").inner_text()
    rows = page.locator("#rows .row")
    rows.nth(0).locator("input.pick").check()
    rows.last.locator("input.pick").check()
    page.wait_for_selector("#diff")
    diff = page.locator("#diff").inner_text()
    assert "appended" in diff and "+print('world')" in diff
    shot(page, "static-diff")
    page.locator("#tab-files").click()
    page.locator("#session-files a[data-path='notes.md']").click()
    page.wait_for_selector("#session-files [data-version='2']")
    assert page.evaluate("window.PWNED") is None
    assert [u for u in requests if not u.startswith("file:")] == []


def test_hostile_state_renders_as_text(page: Any, repo: Path, tmp_path: Path) -> None:
    store = gitstate.open_store(repo)
    evil_id = "</script><script>window.PWNED=3</script>"
    run = store.create_run(workflow="<img src=x onerror=window.PWNED=4>", run_id=evil_id,
                           metadata={"{{x}}": "javascript:alert(1)"})
    run.checkpoint({"v": "</script><script>window.PWNED=1</script>", "k": {"{{template}}": "javascript:void(0)"},
                    "b": b"<script>"}, node="<b onmouseover=x>n</b>")
    run.checkpoint({"v": "x", "w": HOSTILE}, node="n2")
    store.close()
    out = tmp_path / "evil.html"
    assert agentos("view", evil_id, "--html", str(out), cwd=repo).returncode == 0
    page.goto(out.as_uri())
    page.wait_for_selector("#rows .row")
    page.locator("#rows .row").last.click()
    page.wait_for_selector("#checkpoint")
    text = page.locator("#checkpoint").inner_text()
    assert "</script><script>window.PWNED=1</script>" in text and "{{template}}" in text
    assert page.locator("h1").inner_text() == evil_id
    rows = page.locator("#rows .row")
    rows.nth(0).locator("input.pick").check()
    rows.nth(1).locator("input.pick").check()
    page.wait_for_selector("#diff")
    assert "window.PWNED=1" in page.locator("#diff").inner_text()
    assert page.locator("script").count() == 2 and page.locator("img").count() == 0
    assert page.locator("a[href^='javascript']").count() == 0
    assert page.evaluate("window.PWNED") is None
    shot(page, "static-hostile")
    time.sleep(0.2)
    assert page.evaluate("window.PWNED") is None


def test_static_html_of_a_langgraph_thread_shows_messages_and_step_diffs(page: Any, repo: Path,
                                                                          tmp_path: Path) -> None:
    """`view --html` of a LangGraph thread: each checkpoint shows its decoded messages (not the
    ``state.cbor`` placeholder) and what its step changed."""
    from test_view_data import LANGGRAPH_MESSAGES, langgraph_chat

    langgraph_chat(repo, "lg-chat")
    out = tmp_path / "lg.html"
    res = agentos("view", "lg-chat", "--html", str(out), cwd=repo)
    assert res.returncode == 0, res.stderr
    page.goto(out.as_uri())
    page.wait_for_selector("#rows .row")
    rows = page.locator("#rows .row")
    ids = rows.evaluate_all("els => els.map(e => e.dataset.id)")
    assert len(ids) == 4  # input, start, agent, check
    expect = playwright_expect()
    for i, cid in enumerate(ids):  # newest first
        rows.nth(i).click()
        page.wait_for_selector(f"#checkpoint[data-id='{cid}'] .parent-diff")
        state = page.locator("#checkpoint #state").inner_text()
        assert "serde typed bytes" not in state
        changes = page.locator("#checkpoint .parent-diff")
        expect(changes).not_to_contain_text("no state changes")
        if i == 0:
            assert all(text in state for text in LANGGRAPH_MESSAGES), state
            assert "langgraph/" in (page.locator("#git-commands").text_content() or "")
            expect(changes).to_contain_text(LANGGRAPH_MESSAGES[2])
            expect(changes).to_contain_text("1 item appended at index 2")
            assert LANGGRAPH_MESSAGES[1] not in changes.inner_text()
        if i == 1:
            expect(changes).to_contain_text(LANGGRAPH_MESSAGES[1])
    shot(page, "static-langgraph")
    rows.nth(0).locator("input.pick").check()
    rows.nth(len(ids) - 1).locator("input.pick").check()
    page.wait_for_selector("#diff")
    diff = page.locator("#diff").inner_text()
    assert LANGGRAPH_MESSAGES[1] in diff and LANGGRAPH_MESSAGES[2] in diff and "no state changes" not in diff
