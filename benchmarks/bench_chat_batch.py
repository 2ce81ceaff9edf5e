"""Exported chats packed for their next turn: the request bodies to send, from a JSONL export.

The user's whole job, timed from the file to the bodies on disk, in one run:
a JSONL export of OpenAI chat conversations (``{"conversation_id",
"messages"}`` per line) becomes, for each conversation, the body of the next
model call under ``--budget`` tokens: the system prompt and the newest
messages.

Four methods are timed.

``cognoxium``
    ``read_openai_conversations(path)``, then ``run_batch`` with one request
    per conversation (``conversation_requests``: ``where:
    metadata.conversation = '<id>'``), no rank, one process: the packs with
    their bodies (the default), as ``cognoxium pack --conversations
    --budget`` writes them.
``cognoxium_ids``
    The same with ``bodies=False``: the item ids only.
``langchain``
    Per line: ``json.loads``, ``convert_to_messages``, ``trim_messages(strategy
    ="last", include_system=True, start_on="human")`` with a per-message
    counter of the same chat costing, ``convert_to_openai_messages``, one
    JSON line written: what LangChain's documentation gives for chat models.
``floor``
    Per line: ``json.loads``, the newest messages priced with tiktoken
    (content tokens plus 4 of framing) until the first that does not fit,
    the system message kept, one JSON line written: the least work the job
    needs.

Two shapes, each at ``--sizes`` conversations (100 and 1,000 by default, 10x
apart): ``support`` chats (20-120 turns of a user and an assistant, one in
ten with a tool exchange, one in twenty-five turns a pasted log of about
1,500 tokens) and ``agent`` loops (:func:`bench_agent_loops.loop`: a task
and 4-40 tool steps, one result in six a long log). Each method runs
``--repeats`` times per size, the methods alternating; the median is
reported with the ratios of Cognoxium to LangChain and to the floor, and
how each method's time grows from the smaller size to the larger.

Usage: ``python benchmarks/bench_chat_batch.py [--sizes 100,1000]
[--budget 4096] [--repeats 3] [--out benchmarks/results]``. Writes
``chat_batch.json`` and ``chat_batch.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from cognoxium.app.batch import conversation_requests, run_batch
from cognoxium.formats.openai import read_openai_conversations
from cognoxium.packing.manifests import read_bodies
from cognoxium.packing.options import PackOptions
from cognoxium.tokens.profiles import get_profile

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
from bench_agent_loops import loop  # noqa: E402

AS_OF = datetime(2030, 1, 1, tzinfo=UTC)
PROFILE = get_profile("cl100k_base")
WORDS = "refund order shipping invoice warranty reset login plan délai заказ müller card".split()
METHODS = ("cognoxium", "cognoxium_ids", "langchain", "floor")


def support_chat(seed: int) -> list[dict[str, Any]]:
    """A support chat: a system prompt, then user and assistant turns, some tool exchanges."""
    rng = random.Random(seed)
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are Acme support."}]
    for turn in range(rng.randint(10, 60)):
        words = rng.choices(WORDS, k=rng.randint(5, 60))
        if rng.randrange(25) == 0:
            words = rng.choices(WORDS, k=1500)  # a pasted log
        messages.append({"role": "user", "content": " ".join(words)})
        if rng.randrange(10) == 0:
            call = {"id": f"call_{seed}_{turn}", "type": "function"}
            call["function"] = {"name": "lookup", "arguments": json.dumps({"order": turn})}
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
            result = " ".join(rng.choices(WORDS, k=rng.randint(5, 40)))
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
        reply = " ".join(rng.choices(WORDS, k=rng.randint(5, 80)))
        messages.append({"role": "assistant", "content": reply})
    messages.append({"role": "user", "content": " ".join(rng.choices(WORDS, k=12))})
    return messages


def agent_loop(seed: int) -> list[dict[str, Any]]:
    """An agent loop of 4 to 40 steps, one result in six a long log."""
    steps = random.Random(seed).randint(4, 40)
    return loop(seed, steps, short=60, long_every=6, long_lines=300)


SHAPES: dict[str, Callable[[int], list[dict[str, Any]]]] = {
    "support": support_chat,
    "agent": agent_loop,
}


def write_export(path: Path, shape: str, size: int) -> None:
    """Write ``size`` conversations of ``shape`` as a JSONL export."""
    make = SHAPES[shape]
    with open(path, "w", encoding="utf-8") as out:
        for k in range(size):
            record = {"conversation_id": f"{shape}-{k:05d}", "messages": make(k)}
            out.write(json.dumps(record, ensure_ascii=False) + "\n")


def cognoxium(export: Path, out: Path, budget: int, *, bodies: bool) -> list[str]:
    """The export read as items and packed by ``run_batch``; returns the conversation ids."""
    store = read_openai_conversations(export)
    requests = conversation_requests(store, budget)
    options = PackOptions(as_of=AS_OF)
    run_batch(store, requests, out_dir=out, options=options, rank="none", bodies=bodies, workers=1)
    return [request.id for request in requests]


def message_tokens(message: dict[str, Any]) -> int:
    """The chat costing of one OpenAI message (as the packer prices it)."""
    return PROFILE.message_tokens(message)


def langchain(export: Path, out: Path, budget: int) -> None:
    """``trim_messages(strategy="last", start_on="human")`` per conversation, bodies written."""
    from langchain_core.messages import (
        convert_to_messages,
        convert_to_openai_messages,
        trim_messages,
    )

    def counter(messages: list[Any]) -> int:
        return sum(message_tokens(m) for m in convert_to_openai_messages(messages))

    with open(export, encoding="utf-8") as lines, open(out, "w", encoding="utf-8") as bodies:
        for line in lines:
            record = json.loads(line)
            kept = trim_messages(
                convert_to_messages(record["messages"]),
                strategy="last",
                include_system=True,
                start_on="human",
                token_counter=counter,
                max_tokens=budget - 3,
            )
            body = {"messages": convert_to_openai_messages(kept)}
            bodies.write(json.dumps({"id": record["conversation_id"], "body": body}) + "\n")


def floor(export: Path, out: Path, budget: int) -> None:
    """The newest messages that fit, priced with tiktoken, and the system message."""
    encoding = PROFILE.encoding
    with open(export, encoding="utf-8") as lines, open(out, "w", encoding="utf-8") as bodies:
        for line in lines:
            record = json.loads(line)
            system, *rest = record["messages"]
            left = budget - 3 - 4 - len(encoding.encode_ordinary(system["content"]))
            kept: list[dict[str, Any]] = []
            for message in reversed(rest):
                text = message.get("content") or ""
                if message.get("tool_calls"):
                    text += json.dumps(message["tool_calls"])
                cost = 4 + len(encoding.encode_ordinary(text))
                if cost > left:
                    break
                left -= cost
                kept.append(message)
            body = {"messages": [system, *kept[::-1]]}
            bodies.write(json.dumps({"id": record["conversation_id"], "body": body}) + "\n")


def timed(work: Callable[[], object]) -> float:
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


def measure(shape: str, size: int, budget: int, repeats: int, work: Path) -> dict[str, Any]:
    """The median seconds of each method over ``repeats`` alternating rounds."""
    export = work / f"{shape}-{size}.jsonl"
    write_export(export, shape, size)
    runs: dict[str, list[float]] = {m: [] for m in METHODS}
    for r in range(repeats):
        out = work / f"{shape}-{size}-{r}"
        out.mkdir()
        calls: dict[str, Callable[[], object]] = {
            "cognoxium": partial(cognoxium, export, out / "c", budget, bodies=True),
            "cognoxium_ids": partial(cognoxium, export, out / "i", budget, bodies=False),
            "langchain": partial(langchain, export, out / "lc.jsonl", budget),
            "floor": partial(floor, export, out / "floor.jsonl", budget),
        }
        for method in METHODS:
            runs[method].append(timed(calls[method]))
    bodies = dict(read_bodies(work / f"{shape}-{size}-0" / "c"))
    sent = sum(len(b["messages"]) for b in bodies.values() if b is not None)
    seconds = {m: statistics.median(t) for m, t in runs.items()}
    print(shape, size, {m: round(s, 2) for m, s in seconds.items()}, flush=True)
    return {
        "shape": shape,
        "conversations": size,
        "messages": sum(len(json.loads(line)["messages"]) for line in export.open()),
        "seconds": seconds,
        "runs": runs,
        "messages_sent": sent,
        "vs_langchain": seconds["cognoxium"] / seconds["langchain"],
        "vs_floor": seconds["cognoxium"] / seconds["floor"],
        "bodies_cost": seconds["cognoxium"] / seconds["cognoxium_ids"],
    }


def markdown(report: dict[str, Any]) -> str:
    rows = report["rows"]
    lines = [
        "## Exported chats packed for their next turn",
        "",
        f"From a JSONL export to the request bodies on disk, budget {report['budget']} tokens, "
        f"median of {report['repeats']} alternating rounds (`benchmarks/bench_chat_batch.py`).",
        "",
        "| shape | conversations | messages | Cognoxium (bodies) s | ids only s | LangChain "
        "trim_messages s | floor s | vs LangChain | vs floor |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        s = row["seconds"]
        lines.append(
            f"| {row['shape']} | {row['conversations']:,} | {row['messages']:,} | "
            f"{s['cognoxium']:.2f} | {s['cognoxium_ids']:.2f} | {s['langchain']:.2f} | "
            f"{s['floor']:.2f} | {row['vs_langchain']:.2f}x | {row['vs_floor']:.2f}x |"
        )
    lines += ["", "Growth from the smaller size to the larger (seconds ratio):", ""]
    for shape in SHAPES:
        small, large = [r for r in rows if r["shape"] == shape][:2]
        growth = ", ".join(f"{m} {large['seconds'][m] / small['seconds'][m]:.1f}x" for m in METHODS)
        factor = large["conversations"] / small["conversations"]
        lines.append(f"- {shape} ({factor:.0f}x the conversations): {growth}")
    lines += ["", f"Machine: Python {report['python']}, load average {report['load']}.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000")
    parser.add_argument("--budget", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "results")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        rows = [
            measure(shape, size, args.budget, args.repeats, Path(tmp))
            for shape in SHAPES
            for size in sizes
        ]
    report = {
        "budget": args.budget,
        "repeats": args.repeats,
        "rows": rows,
        "python": platform.python_version(),
        "load": [round(x, 2) for x in os.getloadavg()],
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "chat_batch.json").write_text(json.dumps(report, indent=2) + "\n")
    (args.out / "chat_batch.md").write_text(markdown(report))
    return report


if __name__ == "__main__":
    main()
