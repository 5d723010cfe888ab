"""Help topics (``git agentos help TOPIC``): the reference grammar, JSON output, exit codes and
statuses.
One text each, shown by the ``help`` command and copied into docs/CLI.md by
``scripts/gen_cli_docs.py``. Plain text, no imports: ``help`` must stay as cheap as ``--help``."""

from __future__ import annotations

REFS = """\
Naming runs, branches and checkpoints (one grammar for every command)

  RUN                   a run id: the tip of the run's main branch (a LangGraph thread: of the
                        line holding its latest checkpoint, see below)
  RUN@BRANCH            the tip of another branch; BRANCH may hold '@' and '~' (main@origin,
                        a LangGraph fork main~1ef4f797-8335-6428-8001-8a1503f9b875)
  RUN~N, RUN@BRANCH~N   N checkpoints back along first parents
  RUN:node:NAME, RUN@BRANCH:node:NAME
                        the exit (last) checkpoint of the latest boundary of node NAME
  ID, ID~N              a checkpoint id or a prefix of 4+ hex digits naming one checkpoint
                        (other objects sharing it are passed over, as git log does); a
                        prefix of several checkpoints is refused with the list of candidates

Relative forms (TARGET of rollback and fork, read against RUN's branch):

  ~N                    N back from the branch tip
  node:NAME             the node's exit checkpoint on the branch
  @OTHER, @OTHER~N, @OTHER:node:NAME
                        another branch of the same run
  any REF above that names a checkpoint of the same run

What each command takes:

  show, diff, restore, log        any REF (log lists from there back)
  checkpoint, nodes, undo, prune, fork, rollback, branch -d
                                  RUN or RUN@BRANCH (checkpoint: a new run or branch too;
                                  rollback: or a single REF such as RUN~2)
  branches, files, view           RUN (RUN@BRANCH names its run)
  delete                          a run id (branch -d RUN@BRANCH deletes one branch)
  push, pull, export              run ids (whole runs move)

--branch B, where a command has it, is the branch of a bare RUN; a RUN@BRANCH and a --branch
that name different branches are a usage error.

A LangGraph thread's bare RUN (in RUN, RUN~N, RUN:node:NAME and as the branch of nodes, fork,
rollback and prune) is the line holding its latest checkpoint: the one LangGraph's get_state
returns and runs summarises. After time travel (a graph run again from an earlier checkpoint,
update_state on one) that is a fork line main~<checkpoint id>; RUN@main is the first line. For
undo it is the line that moved last (the newest reflog entry among its lines): the one a
rollback, fork or prune just moved, so rollback RUN ~N then undo RUN changes nothing even when
the rollback left another line holding the latest checkpoint; else the line the graph wrote
last. Every other run's bare RUN is its main branch.

Run ids and branch names may contain any character, '@', '~' and ':' included, so a reference
is read in this order, the first match winning:

  1. the whole text is a run id of this worktree (an exact run id always wins);
  2. readings as RUN@BRANCH, ...~N or ...:node:NAME with an existing run: the one whose branch
     exists wins, then the one with the longest run id, then the literal branch name (r@b~3 is
     branch 'b~3' when it exists, else three back from branch 'b');
  3. 4-40 hex digits, optionally with ~N: a checkpoint id or prefix.

Quote references that hold characters your shell treats specially.
"""

JSON = """\
JSON output (--json, on every command)

On success a command prints one JSON document on stdout: keys sorted, two-space indent, strict
JSON (non-finite floats are the strings "NaN", "Infinity" and "-Infinity"; byte strings are
{"$bytes": "<hex>"}; an integer beyond the 8,192 bits gitstate stores, which only data written
elsewhere can hold, is {"$bigint": <bits>, "hex": "<sign and leading hex digits>"}; map keys are
strings; times are ISO 8601 with a UTC offset). Each command's help gives its shape; the shapes
are stable.

On failure the error line goes to stderr as always, and stdout gets one object:

  {"error": "<message>", "type": "<kind>", "exit_code": <code>}

"type" is the gitstate error class (RunNotFound, BranchNotFound, ConflictError, ...),
"UsageError" for a bad command line (exit 2) or "Interrupted" (exit 130). An ambiguous id adds
"candidates": [{"id", "what"}]; a refused restore adds "paths".

Commands that report several outcomes (push, pull, import, verify, setup --check) print their
whole report even when a part failed (its "ok" fields say which), then the error line, and exit 1.
"""

EXIT_CODES = """\
Exit codes

  0    success
  1    a store error: unknown run, branch or checkpoint, a lost compare-and-swap, corrupt data,
       a refused restore or branch deletion, a push, pull or import that did not fully succeed,
       problems found by verify, a setup --check that fails, output that cannot be written
       (a full disk)
  2    a usage error: unknown command or option, missing argument, a --state file that cannot
       be read (a device, bad JSON) or stored (text that is not Unicode)
  130  interrupted (Ctrl-C)
  141  the reader of the output went away (`git agentos log | head`), as git's 128 + SIGPIPE;
       nothing is printed

Errors are one line, 'error: <message>', on stderr (plus the JSON object with --json). A bad
argument never changes the store; push, pull and import say which refs moved before a failure.
"""

STATUS = """\
Statuses: runs, LangGraph threads, checkpoints and nodes

Each word means one thing:

  running      still being written: a node block is open, or a run has not recorded an end
  completed    finished
  failed       ended with an error (a node block raised, a LangGraph task wrote an error)
  interrupted  waits for an answer: a LangGraph task called interrupt() and the question is
               pending, an Agent Framework workflow has a pending request, or a writer said so
               (--status interrupted, paused)
  stopped      ended without finishing and without an error: the process died inside a node
               block (killed), a LangGraph thread stopped before a task that did not run, or a
               writer said so (--status stopped, cancelled, aborted)
  saved        an integration that never says it finished (OpenAI Agents sessions, Agent
               Framework checkpoints, LangGraph memory, CrewAI flows): its latest write is saved
               and nothing more is known

A checkpoint records a status when it is written (--status, or what an integration records):
running, completed, failed, interrupted or stopped (synonyms such as done or error are
normalised), or none. A run's status (runs, branches, the view) comes from the newest checkpoint
of the branch summarised, its main branch:

  plain run          the tip's recorded status; else failed when the tip ends a failed node;
                     else running: a run is running until it records a terminal status
  integration run    the tip's recorded status; else saved (see above)
  LangGraph thread   summarised on the line of its latest checkpoint (the one LangGraph's
                     get_state returns), whose recorded status the saver derives from the graph:
                       failed       a task wrote an error there
                       interrupted  a task called interrupt() there (the interrupt is pending)
                       stopped      a task is scheduled there that has not written (as
                                    get_state's next shows it) and nothing came after it: the
                                    graph stopped before it (an interrupt_before breakpoint, a
                                    process that ended) or a process is still running it,
                                    which the store cannot tell apart
                       completed    nothing is scheduled: the graph reached END
                       running      every task scheduled there wrote, but no checkpoint came
                                    after them (a rollback to such a step); or a thread written
                                    before statuses were recorded

log shows what each checkpoint recorded (a LangGraph checkpoint with tasks scheduled: running)
and, on the branch's tip, the status of the line; show does the same for a tip. A node boundary
(nodes) is running while its block is open, then completed or failed (stopped when the process
that opened it ended inside the block, e.g. killed: it is never closed); a LangGraph node step is
completed, failed (it wrote an error) or interrupted (it called interrupt(), not resumed yet).
Stores written before stopped existed may hold interrupted for a cancelled or aborted run.
"""

#: Topic name → (one-line summary, text).
TOPICS: dict[str, tuple[str, str]] = {
    "refs": ("how to name runs, branches and checkpoints", REFS),
    "json": ("what --json prints, on success and on failure", JSON),
    "exit-codes": ("what the exit codes mean", EXIT_CODES),
    "status": ("what the statuses of runs, LangGraph threads, checkpoints and nodes mean", STATUS),
}
