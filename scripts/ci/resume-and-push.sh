#!/bin/sh
# Resume a gitstate run pulled from a remote, then push it back.
#
# Usage: resume-and-push.sh RUN_ID [REMOTE]
# Use it as a CI step or as a git hook wrapper: it pulls the run (fast-forward only; a line that
# advanced on both sides is kept as BRANCH@REMOTE), runs your workflow step on it, and pushes.
# Your workflow resumes from the run's tip, e.g. in Python:
#     run = gitstate.open_store().get_run(os.environ["RUN_ID"]); state = run.head().state
#
# After a diverged pull, reconcile once by hand (keep your line under its own name, put main back
# on the remote's line), e.g.:
#     git agentos fork RUN @main my-line && git agentos rollback RUN @main@origin
# The kept copy main@origin may stay: the remote has that line, so push does not count it as a
# failure (`git agentos branch -d RUN@main@origin` removes it). A restore's unsaved-work branch
# (restore-safety) is never pushed unless you pass --include-safety yourself.
set -eu
RUN_ID="$1"
REMOTE="${2:-origin}"

# Checkpoints may hold secrets: the final push needs the remote in the allow list, set once by
# whoever owns the repository:  git config --add agentos.pushRemotes origin

git agentos pull "$REMOTE" "$RUN_ID"
git agentos log "$RUN_ID" -n 3                 # where we resume from

RUN_ID="$RUN_ID" ${RESUME_COMMAND:-python -m my_agent.resume}

git agentos push "$REMOTE" "$RUN_ID"
