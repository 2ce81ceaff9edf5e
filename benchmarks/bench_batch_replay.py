"""A chat replayed turn by turn as a batch: continuing packs (``previous``) against fresh ones.

Every LoCoMo conversation (the chat records of ``bench_cache.load_conversations``:
a system prompt, speaker A as ``user``, speaker B as ``assistant``) is one
store; at each user turn, one request packs the history so far (its
``as_of`` the turn's time, so later turns are not yet valid) under
``--budget`` tokens, with no rank. Timed, as the user's whole call:

(a) ``batch``: :func:`cognoxium.app.batch.run_batch` of the requests, each a
    fresh pack;
(b) ``batch_previous``: the same requests, each naming the one before it
    as ``previous`` (a continuing pack, billed under ``openai:gpt-5``);
(c) ``python_previous``: the same chain in Python, ``frame.pack(budget,
    as_of=..., previous=<the pack before>)`` per turn, over each
    conversation's frame (no files written): the work a batch continuation
    cannot do with less, so the floor of (b).

The manifests of (b) are checked equal to (c)'s, byte for byte. Reported:
seconds, milliseconds per request, and the ratios (b)/(a) and (b)/(c).

Usage: ``python benchmarks/bench_batch_replay.py [DATA] [--conversations N]
[--budget 4096] [--out benchmarks/results]`` (DATA defaults to
``../shared/data/locomo/locomo7.json``, read in place). Writes
``batch_replay.json`` and ``batch_replay.md``.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import polars as pl

from cognoxium import CognitionFrame
from cognoxium.app.batch import Request, run_batch
from cognoxium.items.model import canonical_json
from cognoxium.items.records import records_to_frame
from cognoxium.packing.manifests import read_manifests
from cognoxium.packing.options import PackOptions

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
from bench_cache import DEFAULT_DATA, load_conversations  # noqa: E402

MODEL = "openai:gpt-5"


def store_and_requests(
    data: Path, limit: int | None, budget: int
) -> tuple[pl.DataFrame, list[Request]]:
    """The conversations as one store and one request per user turn, chained by ``previous``."""
    frames, requests = [], []
    for conv in load_conversations(data, limit):
        records = [
            {**r, "id": f"{conv.sample_id}/{r['id']}", "metadata": {"conversation": conv.sample_id}}
            for r in conv.records
        ]
        frames.append(records_to_frame(records))
        where = f"metadata.conversation = '{conv.sample_id}'"
        before = None
        for record in records:
            if record["role"] != "user":
                continue
            at = datetime.fromisoformat(record["created_at"])
            own = {"previous": before} if before else {}
            request = Request(id=f"{record['id']}@", budget=budget, where=where, as_of=at, **own)
            requests.append(request)
            before = request.id
    return pl.concat(frames), requests


def fresh(requests: Sequence[Request]) -> list[Request]:
    """The requests without ``previous``."""
    return [Request.model_validate({**r.to_record(), "previous": None}) for r in requests]


def timed_batch(store: pl.DataFrame, requests: Sequence[Request], out: Path) -> float:
    """Seconds of one :func:`run_batch` call (rank none, JSONL manifests)."""
    started = time.perf_counter()
    run_batch(
        store, requests, out_dir=out, rank="none", manifests="jsonl",
        options=PackOptions(cache_model=MODEL),
    )  # fmt: skip
    return time.perf_counter() - started


def python_chain(store: pl.DataFrame, requests: Sequence[Request]) -> tuple[float, list[str]]:
    """Seconds of the Python chain of continuing packs, and its manifests as JSON."""
    started = time.perf_counter()
    manifests = []
    frames: dict[str, CognitionFrame] = {}
    packs: dict[str, Any] = {}
    for request in requests:
        frame = frames.get(request.where or "")
        if frame is None:
            sample = (request.where or "").split("'")[1]
            frame = frames[request.where or ""] = CognitionFrame(
                store.filter(pl.col("id").str.starts_with(f"{sample}/"))
            )
        previous = packs.get(request.previous) if request.previous else None
        pack = frame.pack(
            request.budget, as_of=request.as_of, label=request.id, previous=previous,
            cache_model=MODEL,
        )  # fmt: skip
        packs[request.id] = pack
        manifests.append(pack.manifest.to_json())
    return time.perf_counter() - started, manifests


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the replay and write the results."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", nargs="?", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--conversations", type=int, default=None, help="the first N only")
    parser.add_argument("--budget", type=int, default=4096)
    parser.add_argument("--out", type=Path, default=ROOT / "results")
    args = parser.parse_args(argv)
    store, chained = store_and_requests(args.data, args.conversations, args.budget)
    with tempfile.TemporaryDirectory() as work:
        plain = timed_batch(store, fresh(chained), Path(work) / "fresh")
        continued = timed_batch(store, chained, Path(work) / "previous")
        written = {
            m.label: canonical_json(m.to_dict()) for m in read_manifests(Path(work) / "previous")
        }
    chain, manifests = python_chain(store, chained)
    same = all(
        written[r.id] == canonical_json(json.loads(m))
        for r, m in zip(chained, manifests, strict=True)
    )
    n = len(chained)
    report = {
        "command": "python benchmarks/bench_batch_replay.py " + " ".join(argv or sys.argv[1:]),
        "machine": f"{platform.machine()} {platform.python_version()}",
        "requests": n,
        "budget": args.budget,
        "seconds": {"batch": plain, "batch_previous": continued, "python_previous": chain},
        "ms_per_request": {
            "batch": 1000 * plain / n,
            "batch_previous": 1000 * continued / n,
            "python_previous": 1000 * chain / n,
        },
        "batch_previous_over_batch": continued / plain,
        "batch_previous_over_python_previous": continued / chain,
        "manifests_equal_python": same,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "batch_replay.json").write_text(json.dumps(report, indent=2) + "\n")
    ms = report["ms_per_request"]
    lines = [
        "# A chat replayed turn by turn as a batch",
        "",
        f"Command: `{report['command'].strip()}`",
        "",
        f"{n} requests (one per user turn of each conversation), {args.budget} tokens, no rank.",
        "",
        "| method | seconds | ms / request |",
        "|---|---:|---:|",
        f"| batch, fresh packs | {plain:.2f} | {ms['batch']:.1f} |",
        f"| batch, `previous` | {continued:.2f} | {ms['batch_previous']:.1f} |",
        f"| Python chain, `previous` | {chain:.2f} | {ms['python_previous']:.1f} |",
        "",
        f"`previous` / fresh: {report['batch_previous_over_batch']:.2f}x; batch / Python chain: "
        f"{report['batch_previous_over_python_previous']:.2f}x. Manifests equal to the Python "
        f"chain's: {same}. On {report['machine']}.",
    ]
    (args.out / "batch_replay.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return report


if __name__ == "__main__":
    main()
