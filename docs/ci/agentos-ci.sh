#!/bin/sh
# Pull the runs of one CI pipeline from the repository that holds a team's runs, check them, and
# write the picture of them (git agentos view --html) where the CI keeps artifacts. Both
# github-actions.yml and gitlab-ci.yml beside this file run it; it needs git, python3 and
# git-agentos on PATH, in a git checkout.
#
#   AGENTOS_RUNS_URL    the runs repository (a URL git can fetch; credentials as for any git remote)
#   AGENTOS_RUN_PREFIX  only the runs whose id starts with this (e.g. "ci-$PIPELINE_ID-"); empty: all
#   AGENTOS_OUT         the artifact directory (default: agentos-report)
#
# It writes $AGENTOS_OUT/remote-runs.json (what the server holds), pull.json, verify.json and
# runs.html, and exits non-zero when no run matches, a pull fails or verify finds a problem.
set -eu
: "${AGENTOS_RUNS_URL:?set AGENTOS_RUNS_URL to the repository that holds the runs}"
out="${AGENTOS_OUT:-agentos-report}"
prefix="${AGENTOS_RUN_PREFIX:-}"
mkdir -p "$out"

# what the server holds, without fetching anything
git agentos runs --remote "$AGENTOS_RUNS_URL" --json > "$out/remote-runs.json"
ids=$(AGENTOS_RUN_PREFIX="$prefix" python3 -c '
import json, os, sys
prefix = os.environ["AGENTOS_RUN_PREFIX"]
for run in json.load(sys.stdin):
    if run["id"].startswith(prefix) and "\n" not in run["id"]:
        print(run["id"])
' < "$out/remote-runs.json")
if [ -z "$ids" ]; then
    echo "agentos-ci: no run whose id starts with '$prefix' on $AGENTOS_RUNS_URL" >&2
    exit 1
fi
set --
while IFS= read -r id; do set -- "$@" "$id"; done <<IDS
$ids
IDS

# those runs only (each fetched on its own), into this checkout's store; then check and draw them
git agentos clone-runs "$AGENTOS_RUNS_URL" "$@" --json > "$out/pull.json"
git agentos verify --json > "$out/verify.json"
git agentos view "$@" --html "$out/runs.html"
echo "agentos-ci: $# run(s) pulled, verified and drawn in $out/runs.html"
