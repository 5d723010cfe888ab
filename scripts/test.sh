#!/usr/bin/env bash
# Install gitstate with its test dependencies into .venv and run the whole suite:
# linter, type checker, then pytest. README.md and .ci/run both run exactly this.
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
.venv/bin/python -m pytest "$@"
