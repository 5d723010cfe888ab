"""The CI recipes under docs/ci/ run: the commands of the GitHub Actions workflow's steps and of
the GitLab job's script, as the runner would run them (package installation aside: the package
under test is installed here), against a runs repository holding two pipelines' runs."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import make_repo
from remote_helpers import bare, machine

import gitstate

DOCS_CI = Path(__file__).resolve().parents[2] / "docs" / "ci"
yaml = pytest.importorskip("yaml")


def github_commands() -> list[tuple[str, dict[str, str]]]:
    """``(command, env)`` of each ``run`` step of the workflow, ``${{ … }}`` filled in."""
    doc = yaml.safe_load((DOCS_CI / "github-actions.yml").read_text())
    steps = next(iter(doc["jobs"].values()))["steps"]
    fill = {"github.run_id": "42", "vars.AGENTOS_RUNS_URL": "${RUNS_URL}"}

    def expand(text: Any) -> str:
        return re.sub(r"\$\{\{\s*([^}]+?)\s*\}\}", lambda m: fill[m.group(1)], str(text))

    return [(s["run"], {k: expand(v) for k, v in (s.get("env") or {}).items()}) for s in steps if "run" in s]


def gitlab_commands() -> list[tuple[str, dict[str, str]]]:
    doc = yaml.safe_load((DOCS_CI / "gitlab-ci.yml").read_text())
    job = doc["agent-runs"]
    env = {k: str(v).replace("${CI_PIPELINE_ID}", "42") for k, v in job.get("variables", {}).items()}
    env["AGENTOS_RUNS_URL"] = "${RUNS_URL}"  # a CI/CD variable set in the project
    return [(line, env) for line in job["script"]]


@pytest.fixture(scope="module")
def runs_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A runs repository holding the runs of pipeline 42 and of pipeline 7."""
    base = tmp_path_factory.mktemp("ci")
    url = bare(base / "runs.git").as_uri()
    store = gitstate.open_store(machine(base / "agent", url))
    for run_id in ("ci-42-plan", "ci-42-fix", "ci-7-plan"):
        run = store.create_run(run_id=run_id, workflow="agent")
        run.checkpoint({"messages": [f"{run_id} started"]}, node="start")
        run.checkpoint({"messages": [f"{run_id} started", "done"]}, node="end")
    assert all(r.ok for r in gitstate.push(store))
    return url


@pytest.mark.parametrize("recipe", ["github", "gitlab"])
def test_a_recipe_pulls_verifies_and_draws_its_pipelines_runs(recipe: str, runs_url: str, tmp_path: Path) -> None:
    commands = github_commands() if recipe == "github" else gitlab_commands()
    assert any("docs/ci/agentos-ci.sh" in command for command, _ in commands)
    checkout = make_repo(tmp_path / "checkout")  # the runner's checkout of the code repository
    shutil.copytree(DOCS_CI, checkout / "docs" / "ci")
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    ran = 0
    for command, step_env in commands:
        if command.startswith("pip install"):
            continue  # the runner installs the package; the one under test is installed here
        full = dict(env, **{k: v.replace("${RUNS_URL}", runs_url) for k, v in step_env.items()})
        done = subprocess.run(command, shell=True, cwd=checkout, env=full, capture_output=True, text=True,
                              timeout=300, check=False)
        assert done.returncode == 0, (command, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr
        ran += 1
    assert ran == 1
    report = checkout / "agentos-report"
    html = (report / "runs.html").read_text()
    assert "ci-42-plan" in html and "ci-42-fix" in html and "ci-7-plan" not in html
    assert json.loads((report / "verify.json").read_text())["ok"] is True
    pulled = sorted(run["run"] for run in json.loads((report / "pull.json").read_text()))
    assert pulled == ["ci-42-fix", "ci-42-plan"]
    listed = sorted(run["id"] for run in json.loads((report / "remote-runs.json").read_text()))
    assert listed == ["ci-42-fix", "ci-42-plan", "ci-7-plan"]
    assert sorted(r.id for r in gitstate.open_store(checkout).list_runs()) == ["ci-42-fix", "ci-42-plan"]


def test_the_script_fails_when_no_run_of_the_pipeline_is_there(runs_url: str, tmp_path: Path) -> None:
    checkout = make_repo(tmp_path / "checkout")
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
               AGENTOS_RUNS_URL=runs_url, AGENTOS_RUN_PREFIX="ci-99-")
    done = subprocess.run(["sh", str(DOCS_CI / "agentos-ci.sh")], cwd=checkout, env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 1 and "no run whose id starts with 'ci-99-'" in done.stderr
    assert gitstate.open_store(checkout).list_runs() == []
