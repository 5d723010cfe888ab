"""Every example in README.md and in the guides under docs/ runs as written, in order.

The files: README.md and every ``docs/*.md`` but FORMAT.md (the format's specification, whose
blocks are layouts) and CLI.md (generated from the commands' help, tests/cli/test_cli_process.py).
The blocks are read from the files themselves (no copies). Each file's examples run in order in a
fresh repository of their own. What counts as an example, by fence:

- ``python``: each block is a script of its own, run by a fresh interpreter (so each block imports
  what it uses); README's CrewAI block runs in ``.venv-crewai`` (tests_crewai/test_crewai.py), and
  no other file may have a block in a CrewAI section;
- ``console``: every ``$ `` line is a command, run by ``bash`` in the repository, which must exit 0
  (the other lines are sample output; ids in it differ from run to run). ``git agentos view`` serves
  until stopped: it must print its address, then it is stopped;
- ``sh``: the block is one ``bash -e`` script, or line by line when a line starts a server;
  a block of benchmark commands (``.venv/bin/python scripts/bench_*.py``, run from this checkout
  for minutes) is checked by name: each script exists and a test under tests/ runs it;
- ``yaml``: a CI job; each ``run:`` line is a command as in ``console``.

Blocks that are NOT run:

- a fence with the language ``text``, or with no language: sample output, messages, layouts;
- any fence whose line is directly preceded by an HTML comment ``<!-- not run: why -->`` (for a
  block that keeps its highlighting but must not run here, such as ``pip install``).

README's first two blocks are the install-and-demo command and the test command: the second is
what ``.ci/run`` runs, and the first's demo runs from a wheel install in tests/system/test_install.py.

The fresh repository has one commit (``src/app.py``, ``README``) and a bare repository as its remote
``origin``, as a reader's clone would.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
NOT_EXAMPLES = ("FORMAT.md", "CLI.md")  # docs whose blocks are not examples (see the module doc)
DOCS = [README, *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name not in NOT_EXAMPLES)]
FENCE = re.compile(r"^```([a-z]*)\n(.*?)^```", re.S | re.M)
NOT_RUN = re.compile(r"^<!-- not run\b.*-->$")
RUN_LANGS = ("python", "console", "sh", "yaml")
SERVERS = ("git agentos view",)  # commands that serve until stopped
OTHER_VENV = ("### CrewAI",)  # sections whose blocks run in another environment (see the module doc)
DEMO = ('python3 -m venv .venv-demo && .venv-demo/bin/pip install -q . && '
        'PATH="$PWD/.venv-demo/bin:$PATH" git agentos demo')


@dataclass(frozen=True)
class Block:
    """One fenced block of a file: its file, language, text, first line number and section heading,
    and whether a ``<!-- not run -->`` comment precedes it."""

    path: Path
    lang: str
    text: str
    line: int
    section: str
    marked_not_run: bool = False

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line} ({self.section})"


def blocks(path: Path = README) -> list[Block]:
    """Every fenced block of a file, in order."""
    text = path.read_text(encoding="utf-8")
    found = []
    for match in FENCE.finditer(text):
        before = text[: match.start()]
        headings = re.findall(r"^(#+ .*)$", before, re.M)
        previous = before.rstrip("\n").rsplit("\n", 1)[-1] if before.endswith("\n") else ""
        found.append(Block(path, match.group(1), match.group(2), before.count("\n") + 1,
                           headings[-1] if headings else "", bool(NOT_RUN.match(previous))))
    return found


def examples(path: Path = README) -> list[Block]:
    """The blocks this test runs: every example (README's after its first two commands), minus
    the ones marked not to run and the ones of other venvs."""
    found = blocks(path)[2:] if path == README else blocks(path)
    return [b for b in found if b.lang in RUN_LANGS and not b.marked_not_run and b.section not in OTHER_VENV]


def test_readme_starts_with_the_demo_and_the_test_command() -> None:
    first, second = blocks()[:2]
    assert first.lang == second.lang == "sh"
    assert first.text.strip() == DEMO
    assert second.text.strip() == "bash scripts/test.sh"
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "scripts/test.sh" in ci


def test_the_examples_cover_the_guides() -> None:
    names = {p.name for p in DOCS}
    assert {"README.md", "GUIDE.md", "INTEGRATIONS.md", "SECURITY.md", "BENCHMARKS.md"} <= names, names
    assert not names & set(NOT_EXAMPLES)


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_every_fence_is_a_known_kind(path: Path) -> None:
    kinds = {b.lang for b in blocks(path)}
    assert kinds <= {"", "text", *RUN_LANGS}, kinds
    for block in blocks(path):
        if block.section in OTHER_VENV and block.lang in RUN_LANGS and not block.marked_not_run:
            # only README's CrewAI block runs elsewhere (tests_crewai/ reads it); anywhere else it would run nowhere
            assert path == README, f"{block.where}: a CrewAI example outside README runs nowhere"


def test_readme_has_every_kind_and_a_block_for_another_venv() -> None:
    assert {"python", "console", "sh"} <= {b.lang for b in examples()}
    assert any(b.section in OTHER_VENV and b.lang == "python" for b in blocks())


def test_a_marked_block_is_not_run() -> None:
    """The ``<!-- not run -->`` marker is seen (README's install commands carry it), and only the
    fence right after it is exempt."""
    marked = [b for b in blocks() if b.marked_not_run]
    assert marked and all("pip install" in b.text for b in marked)
    assert not set(marked) & set(examples())


def _is_server(command: str) -> bool:
    return command.strip().startswith(SERVERS) and "--html" not in command


def _bench_scripts(block: Block) -> list[str]:
    """The scripts a block of benchmark (and soak) commands names, or [] when it is not one."""
    lines = [line for line in block.text.splitlines() if line.strip()]
    names = [re.match(r"\.venv[-\w]*/bin/python scripts/((?:bench|soak)_\w+\.py)\b", line) for line in lines]
    return [m.group(1) for m in names if m] if all(names) else []


def _commands(block: Block) -> list[str]:
    if block.lang == "sh" and any(_is_server(line) for line in block.text.splitlines()):
        return [line for line in block.text.splitlines() if line.strip()]
    if block.lang == "console":
        return [line[2:] for line in block.text.splitlines() if line.startswith("$ ")]
    if block.lang == "yaml":
        return [m.group(1) for m in re.finditer(r"^\s*- run: (.*)$", block.text, re.M)]
    return [block.text]


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "AGENTOS_"))}
    env.update(HOME=str(home), GIT_CONFIG_NOSYSTEM="1", BROWSER="true", PAGER="cat", GIT_PAGER="cat",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
               GIT_AUTHOR_NAME="Reader", GIT_AUTHOR_EMAIL="reader@example.com",
               GIT_COMMITTER_NAME="Reader", GIT_COMMITTER_EMAIL="reader@example.com")
    return env


def _fresh_repository(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    home = tmp_path / "home"
    home.mkdir()
    env = _env(home)
    repo = tmp_path / "project"
    remote = tmp_path / "origin.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True, env=env)
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True, env=env)
    (repo / "src").mkdir()
    (repo / "src" / "app.py").write_text("print('hello')\n")
    (repo / "README").write_text("a project\n")
    for args in (["add", "-A"], ["commit", "-q", "-m", "initial"], ["remote", "add", "origin", str(remote)]):
        subprocess.run(["git", *args], cwd=repo, check=True, env=env)
    return repo, env


def _serve(command: str, repo: Path, env: dict[str, str]) -> None:
    proc = subprocess.Popen(["bash", "-c", f"exec {command}"], cwd=repo, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "http://127.0.0.1:" in line, line
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_every_example_runs_as_written(tmp_path: Path, path: Path) -> None:
    repo, env = _fresh_repository(tmp_path)
    ran = 0
    for block in examples(path):
        if block.lang == "python":
            script = tmp_path / f"example-line-{block.line}.py"
            script.write_text(block.text, encoding="utf-8")
            done = subprocess.run([sys.executable, str(script)], cwd=repo, env=env,
                                  capture_output=True, text=True, timeout=600)
            assert done.returncode == 0, f"{block.where}\n{done.stdout}\n{done.stderr}"
            ran += 1
            continue
        if _bench_scripts(block):
            tests = [t.read_text(encoding="utf-8") for t in ROOT.joinpath("tests").rglob("test_*.py")]
            for name in _bench_scripts(block):
                assert (ROOT / "scripts" / name).is_file(), name
                assert any(name in t for t in tests), f"{block.where}: no test runs scripts/{name}"
                ran += 1
            continue
        for command in _commands(block):
            if _is_server(command):
                _serve(command.split("#")[0].strip(), repo, env)
                ran += 1
                continue
            done = subprocess.run(["bash", "-e", "-c", command], cwd=repo, env=env, capture_output=True,
                                  text=True, timeout=600)
            assert done.returncode == 0, f"{block.where}: {command}\n{done.stdout}\n{done.stderr}"
            ran += 1
    assert ran >= {"README.md": 12, "GUIDE.md": 30}.get(path.name, 0), ran


def test_the_python_example_does_what_its_comments_say(tmp_path: Path) -> None:
    """The guide's first Python block, alone in a fresh repository: its rollback moved main back to
    the plan checkpoint and its undo moved it forward again, so main ends at the edit's checkpoint,
    with the plan step and the edit node recorded and both moves in main's reflog."""
    repo, env = _fresh_repository(tmp_path)
    block = next(b for b in examples(ROOT / "docs" / "GUIDE.md") if b.lang == "python")
    script = tmp_path / "example.py"
    script.write_text(block.text, encoding="utf-8")
    done = subprocess.run([sys.executable, str(script)], cwd=repo, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    import gitstate

    run = gitstate.open_store(repo).get_run("fix-crash")
    plan, edit = run.load("node:plan"), run.load("node:edit")
    assert run.head().id == edit.id and edit.state == {"messages": ["patched"]}
    assert [cp.id for cp in run.history()] == [edit.id, plan.id]
    assert [(b.node, b.entry, b.exit, b.status) for b in run.nodes()] == [
        ("plan", plan.id, plan.id, "completed"), ("edit", edit.id, edit.id, "completed")]
    undo, rollback = [entry.message for entry in run.store.reflog(run.ref("main"))][:2]  # newest first
    assert rollback.startswith("gitstate: rollback to " + plan.short_id) and "undo" in undo, (rollback, undo)
