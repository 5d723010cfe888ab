#!/usr/bin/env python3
"""Time ``gitstate.format.encoding.loads`` (allow-list scan, then cbor2) against the decoder it
replaced (cbor2 with a deny-list of tags, no canonical-form checks), on the blobs the read path
decodes most:

- ``meta``: a checkpoint ``meta.cbor`` map (~200 bytes);
- ``chunk``: a state list chunk of 32 chat messages (~11 kB; messages as in ``bench_core.py``);
- ``numbers``: 1,000 floats and ints (~7 kB), a worst case for the scan (many tiny items).

Columns (microseconds per call, medians over ``--rounds`` batches of ``--number`` calls; the
contenders run in turn inside every round, so machine noise hits all alike, and are timed in
process CPU time, which other processes on a busy machine disturb far less than wall time):

- ``old``: the previous decoder;
- ``new``: ``loads`` on a payload it has not seen (its memo of checked payloads emptied first);
- ``new again``: ``loads`` on the same bytes object again, as when the state reader decodes a list
  chunk from its blob cache (payloads of 1 kB or more are scanned once per object);
- ``cbor2``: bare ``cbor2.loads``, no checks at all (the floor);
- ``re-encode``: ``cbor2.dumps(value, canonical=True)``, what a "re-encode and compare" check would
  add on top of decoding.

Usage: ``python scripts/bench_encoding.py [--rounds 41] [--number 200]``.
"""

from __future__ import annotations

import argparse
import io
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

import cbor2

from gitstate.errors import CorruptObjectError
from gitstate.format import encoding

# -- the decoder before the allow-list (gitstate/format/encoding.py as of 14e7f91) ---------------

_REFUSED_TAGS = (0, 1, 4, 5, 25, 28, 29, 30, 35, 36, 37, 52, 54, 100, 256, 258, 260, 261, 1004, 55799)


def _refuse(decoder: Any) -> Any:
    raise cbor2.CBORDecodeError("CBOR tags are not allowed in gitstate payloads")


def _refuse_unknown(decoder: Any, tag: Any) -> Any:
    raise cbor2.CBORDecodeError(f"CBOR tag {tag.tag} is not allowed in gitstate payloads")


_SEMANTIC = {tag: _refuse for tag in _REFUSED_TAGS}


def old_loads(data: bytes, oid: str = "?") -> Any:
    stream = io.BytesIO(data)
    try:
        value = cbor2.CBORDecoder(stream, semantic_decoders=_SEMANTIC, tag_hook=_refuse_unknown,
                                  max_depth=encoding.MAX_DEPTH + 8).decode()
    except Exception as exc:
        raise CorruptObjectError(oid, f"does not decode as CBOR: {exc}") from exc
    if stream.tell() != len(data):
        raise CorruptObjectError(oid, f"{len(data) - stream.tell()} bytes of garbage after the CBOR value")
    return value


# -- blobs ------------------------------------------------------------------------------------------

_WORDS = ("agent plan tool result file patch test failure retry branch commit review model prompt "
          "context token budget summary issue fix regression parser module function argument return "
          "the a an of to in for with on by from into over under after before while because").split()


def _message(rng: random.Random, step: int) -> dict[str, Any]:
    role = ("user", "assistant", "tool", "assistant", "assistant")[step % 5]
    text = ""
    while len(text) < 300:
        text += " ".join(rng.choice(_WORDS) for _ in range(rng.randint(6, 16))).capitalize() + ". "
    item: dict[str, Any] = {"role": role, "content": text[:rng.randint(300, 340)].rstrip(), "step": step}
    if role == "tool":
        item["tool"] = rng.choice(("read_file", "run_tests", "grep", "apply_patch"))
        item["ok"] = rng.random() > 0.2
    return item


def blobs() -> dict[str, bytes]:
    rng = random.Random(7)
    meta = {"format": "agentos.checkpoint", "v": 1, "run": "run-2026-01-01", "branch": "main",
            "workflow": "triage", "worktree": "main", "node": "plan", "step": 17, "trigger": "step",
            "status": "running", "node_status": "ok", "created_at": "2026-01-01T00:00:00.000000Z",
            "files_paths": ["src", "docs"]}
    numbers = [rng.random() * 1000 if i % 2 else rng.randint(-10**6, 10**6) for i in range(1000)]
    return {"meta": encoding.dumps(meta), "chunk": encoding.dumps([_message(rng, i) for i in range(32)]),
            "numbers": encoding.dumps(numbers)}


# -- timing -----------------------------------------------------------------------------------------


def batch(fn: Callable[[], Any], number: int) -> float:
    """CPU seconds per call over one batch of ``number`` calls."""
    start = time.process_time()
    for _ in range(number):
        fn()
    return (time.process_time() - start) / number


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=41)
    parser.add_argument("--number", type=int, default=200)
    args = parser.parse_args()
    columns = ("old", "new", "new again", "cbor2", "re-encode")
    print(f"{'blob':8} {'bytes':>6} " + "".join(f"{name:>11}" for name in columns)
          + f"{'new/old':>9}{'again/old':>10}")
    for name, data in blobs().items():
        value = encoding.loads(data)
        assert old_loads(data) == value and encoding.dumps(value) == data

        def fresh(data: bytes = data) -> Any:
            encoding._MEMO.clear()
            return encoding.loads(data)

        contenders: dict[str, Callable[[], Any]] = {
            "old": lambda data=data: old_loads(data),
            "new": fresh,
            "new again": lambda data=data: encoding.loads(data),
            "cbor2": lambda data=data: cbor2.loads(data),
            "re-encode": lambda value=value: cbor2.dumps(value, canonical=True),
        }
        times: dict[str, list[float]] = {k: [] for k in contenders}
        for _ in range(args.rounds):
            for label, fn in contenders.items():
                times[label].append(batch(fn, args.number))
        med = {k: statistics.median(v) * 1e6 for k, v in times.items()}
        print(f"{name:8} {len(data):6d} " + "".join(f"{med[k]:11.2f}" for k in columns)
              + f"{med['new'] / med['old']:8.2f}x{med['new again'] / med['old']:9.2f}x")


if __name__ == "__main__":
    main()
