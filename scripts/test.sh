#!/usr/bin/env bash
# Install gitstate with its test dependencies into .venv and run the whole suite:
# linter, type checker, then pytest; then the CrewAI tests in .venv-crewai (CrewAI pins openai<3,
# the OpenAI Agents SDK in .venv needs openai>=3). README.md and .ci/run both run exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v git >/dev/null || { echo "git is required (apt-get install git)" >&2; exit 1; }
python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[dev]'
bash scripts/install-browser.sh
export PATH="$PWD/.venv/bin:$PATH"
.venv/bin/python -m ruff check .
.venv/bin/python -m mypy
# A worker per core (up to 4), each taking whole files, so module fixtures are built once.
.venv/bin/python -m pytest --numprocesses auto --maxprocesses 4 --dist loadfile "$@"
python3 -m venv .venv-crewai
.venv-crewai/bin/python -m pip install -q --upgrade pip
.venv-crewai/bin/python -m pip install -q -e '.[crewai]' 'pytest>=8' 'pytest-asyncio>=0.23' 'pytest-timeout>=2.1'
.venv-crewai/bin/python -m pytest tests_crewai
