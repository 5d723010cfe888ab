"""A regular install works: a wheel built from the checkout, installed (not editable) into a fresh
virtual environment with its dependencies and the LangGraph extra, imports every module of
gitstate and gitstate_cli and runs the CLI. (The test command installs the project editable, which
would hide a package left out of the wheel.)"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _modules() -> list[str]:
    out = []
    for pkg in ("gitstate", "gitstate_cli"):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            if parts[-1] != "__main__":
                out.append(".".join(parts))
    return out


def test_wheel_holds_every_package_and_a_regular_install_imports_them(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(ROOT)],
                   check=True, timeout=300)
    (wheel,) = wheels.glob("git_agentos-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = [m for m in _modules() if f"{m.replace('.', '/')}.py" not in names
               and f"{m.replace('.', '/')}/__init__.py" not in names]
    assert missing == [], f"left out of the wheel: {missing}"
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    # every extra the dev install has (CrewAI pins an older openai and is tested in its own venv)
    subprocess.run([str(py), "-m", "pip", "install", "-q", f"{wheel}[langgraph,openai-agents,agent-framework]"],
                   check=True, timeout=900)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    code = ("import importlib, sys\n"
            f"mods = {[m for m in _modules() if m != 'gitstate.crewai']!r}\n"
            "for m in mods:\n    importlib.import_module(m)\n"
            "import gitstate, gitstate.langgraph\n"
            "assert gitstate.__file__.startswith(sys.prefix), gitstate.__file__\n"
            "from gitstate.langgraph import GitCheckpointSaver\n"
            "from langgraph.graph import StateGraph  # the [langgraph] extra brings graphs too\n"
            "print(len(mods))\n")
    done = subprocess.run([str(py), "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.strip()) == len(_modules()) - 1  # all but gitstate.crewai (its own venv)
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    cli = subprocess.run(["git", "agentos", "runs", "--json"], cwd=repo, env=env, capture_output=True,
                         text=True, timeout=120)
    assert cli.returncode == 0 and cli.stdout.strip() == "[]", cli.stderr
    # README's first command ends with the demo: it runs from this regular install, anywhere.
    # (its temporary repository, which it keeps for the user to explore, made under tmp_path)
    demo = subprocess.run(["git", "agentos", "demo"], cwd=tmp_path, env={**env, "TMPDIR": str(tmp_path)},
                          capture_output=True, text=True, timeout=600)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert "git agentos" in demo.stdout
    assert [p.name.startswith("gitstate-demo-") for p in tmp_path.iterdir()].count(True) == 1


def test_without_langgraph_the_import_error_names_this_project() -> None:
    """The hint must not send users to ``pip install gitstate[...]``: that PyPI name is another
    project's."""
    code = ("import sys; sys.modules['langchain_core'] = None\n"
            "try:\n    import gitstate.langgraph\nexcept ImportError as exc:\n    print(exc)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "needs LangGraph: install the langgraph extra of git-agentos" in proc.stdout
    assert "pip install '.[langgraph]'" in proc.stdout and "gitstate[" not in proc.stdout


@pytest.mark.parametrize(("module", "blocked", "words", "extra"), [
    ("gitstate.openai_agents", "agents", "needs the OpenAI Agents SDK", "openai-agents"),
    ("gitstate.agent_framework", "agent_framework", "needs Microsoft Agent Framework", "agent-framework"),
    ("gitstate.crewai", "crewai", "needs CrewAI", "crewai"),
])
def test_without_its_framework_an_integration_names_the_extra(module: str, blocked: str, words: str,
                                                                extra: str) -> None:
    """Each framework integration imported without its framework says which extra of this project
    brings it (not a bare ``No module named ...``, and not the ``gitstate`` name on PyPI)."""
    code = (f"import sys; sys.modules[{blocked!r}] = None\n"
            f"try:\n    import {module}\nexcept ImportError as exc:\n    print(exc)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert f"{words}: install the {extra} extra of git-agentos" in proc.stdout, proc.stdout + proc.stderr
    assert f"pip install '.[{extra}]'" in proc.stdout and "gitstate[" not in proc.stdout
