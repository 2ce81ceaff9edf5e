"""Prompt cache with cut messages: a chat whose long pastes are cut to fit, repacked every turn.

A support chat: a required system prompt, then user and assistant messages
of about 40 tokens, where every ``--paste-every``-th user message is a long
paste (a log of ``--paste-lines`` lines, about 12 tokens each) marked
truncatable (``{"truncate": {"side": "tail", "min_tokens": 50}}``: its last
lines are kept). At each user turn the history so far is packed under the
budget by

(a) ``trim``: ``langchain_core.messages.trim_messages(strategy="last",
    include_system=True, start_on="human", allow_partial=True)``, which cuts
    the first message that does not fit to its last lines, counted with the
    same chat costing as Cognoxium's (reply priming taken off the budget);
(b) ``fresh``: ``CognitionFrame.pack(budget)``, each turn on its own;
(c) ``continue``: ``CognitionFrame.pack(budget, previous=<the pack of the
    turn before>)``, which cuts what the earlier pack cut alike.

Each request is billed against the one before it by
:func:`cognoxium.packing.cache_models.bill` (``openai:gpt-5``, cached input
at 0.1x; ``anthropic:claude-sonnet-4-5``, breakpoints at the end of the
system prompt and of the request, writes at 1.25x). Two requests share the
tokens of their longest common run of leading messages (equal role and
content). Costs are in units of one uncached input token; the floor is what
the requests would cost if every token but the new turn's were read from the
cache (each request's input less its newest messages since the last pack,
at the cached price), the least any repacking could pay. Each method's
whole calls are timed too: from the records to the request's messages
(LangChain messages built for ``trim``, the frame for the packs).

Usage: ``python benchmarks/bench_cache_cuts.py [--messages 400] [--budget 4096]
[--out benchmarks/results]``. Writes ``cache_cuts.json`` and ``cache_cuts.md``.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench_cache import billed, langchain_messages, trimmed
from cognoxium import CognitionFrame
from cognoxium.packing.cache import shared_prefix_tokens
from cognoxium.packing.cache_models import get_cache_model
from cognoxium.tokens.profiles import get_profile

ROOT = Path(__file__).resolve().parent
AS_OF = datetime(2030, 1, 1, tzinfo=UTC)
START = datetime(2029, 12, 1, tzinfo=UTC)
PROFILE = get_profile("cl100k_base")
MODELS = {"openai_0.1x": "openai:gpt-5", "anthropic_writes": "anthropic:claude-sonnet-4-5"}
METHODS = ("trim", "fresh", "continue")
SYSTEM = "You are the support assistant of a hosting company. " * 40


def chat(n: int, paste_every: int, paste_lines: int) -> list[dict[str, Any]]:
    """The chat's records: the system prompt, then ``n`` messages with a paste every so often."""
    records: list[dict[str, Any]] = [
        {"id": "system", "role": "system", "text": SYSTEM, "retention": "required"}
    ]
    for i in range(n):
        role = "user" if i % 2 == 0 else "assistant"
        record: dict[str, Any] = {"id": f"m{i:04}", "role": role}
        if role == "user" and (i // 2) % paste_every == paste_every - 1:
            lines = [
                f"{i}.{k} ERROR worker {k % 7} failed: timeout after 30 s"
                for k in range(paste_lines)
            ]
            record["text"] = "Here is the log:\n" + "\n".join(lines)
            record["metadata"] = {"truncate": {"side": "tail", "min_tokens": 50}}
        else:
            record["text"] = f"Message {i} about the server, the refund and the invoice. " * 3
        records.append(record)
    for k, record in enumerate(records):
        record["created_at"] = (START + timedelta(seconds=k)).isoformat()
    return records


def trim(records: list[dict[str, Any]], budget: int) -> list[dict[str, Any]]:
    """``trim_messages`` with ``allow_partial`` over the records, as OpenAI messages."""
    roles = {"system": "system", "human": "user", "ai": "assistant"}

    def as_openai(message: Any) -> dict[str, Any]:
        return {"role": roles[message.type], "content": message.content}

    def count(batch: Sequence[Any]) -> int:
        return sum(PROFILE.message_tokens(as_openai(m)) for m in batch)

    kept = trimmed(langchain_messages(records), budget, count, allow_partial=True)
    return [as_openai(m) for m in kept]


class Ledger:
    """One method's requests, billed turn by turn against the request before."""

    def __init__(self) -> None:
        self.previous: list[dict[str, Any]] | None = None
        self.previous_tokens = 0
        self.previous_marks: dict[str, list[int]] = {}
        self.billed = dict.fromkeys(MODELS, 0.0)
        self.cached = self.input = 0

    def add(self, messages: list[dict[str, Any]]) -> None:
        """Bill one request (OpenAI messages) against the one before it."""
        tokens = [PROFILE.message_tokens(m) for m in messages]
        total = sum(tokens) + PROFILE.tokens_per_pack
        shared = shared_prefix_tokens(self.previous or [], messages, tokens)
        system = tokens[0] if messages and messages[0]["role"] == "system" else 0
        for name, model_name in MODELS.items():
            charged, marks = billed(
                get_cache_model(model_name),
                (total, sum(tokens), system, shared),
                None if self.previous is None else self.previous_tokens,
                self.previous_marks.get(name, []),
            )
            self.billed[name] += charged.billed_tokens
            self.previous_marks[name] = marks
            if name == "openai_0.1x":
                self.cached += charged.cached_tokens
        self.input += total
        self.previous, self.previous_tokens = messages, total


def replay(records: list[dict[str, Any]], budget: int) -> dict[str, Any]:
    """Pack every user turn with each method; their bills, cuts and the floor."""
    ledgers = {method: Ledger() for method in METHODS}
    seconds = dict.fromkeys(METHODS, 0.0)
    floor = 0.0
    previous = None
    last_row = 0
    cut_turns = 0
    for row, record in enumerate(records):
        if record["role"] != "user":
            continue
        history = records[: row + 1]
        started = time.perf_counter()
        sent = {"trim": trim(history, budget)}
        seconds["trim"] += time.perf_counter() - started
        started = time.perf_counter()
        sent["fresh"] = CognitionFrame(history).pack(budget, as_of=AS_OF).messages
        seconds["fresh"] += time.perf_counter() - started
        started = time.perf_counter()
        previous = CognitionFrame(history).pack(budget, as_of=AS_OF, previous=previous)
        seconds["continue"] += time.perf_counter() - started
        sent["continue"] = previous.messages
        cut_turns += bool(previous.manifest.truncations)
        for method, messages in sent.items():
            ledgers[method].add(list(messages))
        new = sum(
            PROFILE.message_tokens({"role": r["role"], "content": r["text"]})
            for r in records[last_row + 1 : row + 1]
        )
        tokens = ledgers["continue"].previous_tokens
        floor += 0.1 * max(tokens - new, 0) + min(new, tokens)
        last_row = row
    return {
        "turns": sum(r["role"] == "user" for r in records),
        "turns_with_a_cut": cut_turns,
        "floor_openai_0.1x": round(floor, 1),
        "methods": {
            method: {
                "billed": {name: round(value, 1) for name, value in ledger.billed.items()},
                "cached_share_openai": round(ledger.cached / ledger.input, 4),
                "input_tokens": ledger.input,
                "seconds": round(seconds[method], 3),
            }
            for method, ledger in ledgers.items()
        },
    }


def write_markdown(path: Path, report: dict[str, Any]) -> None:
    s = report["settings"]
    lines = [
        "# Prompt cache with cut messages",
        "",
        f"Command: `{report['command']}`",
        "",
        f"{s['messages']} messages, a paste of {s['paste_lines']} lines every {s['paste_every']} "
        f"user turns (truncatable, tail kept), budget {s['budget']} tokens; "
        f"{report['turns']} user turns, {report['turns_with_a_cut']} of whose continuing "
        "packs cut a paste. Billed input in units of one uncached token.",
        "",
        "| method | OpenAI 0.1x | Anthropic (writes) | cached share (OpenAI) | "
        "x cheaper than trim (OpenAI / Anthropic) | input tokens | whole calls (s) |",
        "|---|---:|---:|---:|---|---:|---:|",
    ]
    trim = report["methods"]["trim"]["billed"]
    for method, m in report["methods"].items():
        b = m["billed"]
        openai = trim["openai_0.1x"] / b["openai_0.1x"]
        anthropic = trim["anthropic_writes"] / b["anthropic_writes"]
        ratio = f"{openai:.2f} / {anthropic:.2f}"
        lines.append(
            f"| {method} | {b['openai_0.1x']:,.0f} | {b['anthropic_writes']:,.0f} | "
            f"{m['cached_share_openai']:.3f} | {ratio} | {m['input_tokens']:,} | "
            f"{m['seconds']:.2f} |"
        )
    cont = report["methods"]["continue"]["billed"]["openai_0.1x"]
    lines += [
        "",
        f"Floor (every token but each turn's new messages read from the cache, OpenAI 0.1x): "
        f"{report['floor_openai_0.1x']:,.0f}; the continuing packs pay "
        f"{cont / report['floor_openai_0.1x']:.2f}x the floor.",
        "",
        f"Replay time: {report['seconds']:.1f} s on {report['machine']}.",
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=400)
    parser.add_argument("--budget", type=int, default=4096)
    parser.add_argument("--paste-every", type=int, default=15)
    parser.add_argument("--paste-lines", type=int, default=400)
    parser.add_argument("--out", type=Path, default=ROOT / "results")
    args = parser.parse_args(argv)
    records = chat(args.messages, args.paste_every, args.paste_lines)
    started = time.perf_counter()
    report = replay(records, args.budget)
    report |= {
        "command": " ".join(
            ["python benchmarks/bench_cache_cuts.py", *(sys.argv[1:] if argv is None else argv)]
        ),
        "settings": {
            "messages": args.messages,
            "budget": args.budget,
            "paste_every": args.paste_every,
            "paste_lines": args.paste_lines,
        },
        "seconds": time.perf_counter() - started,
        "machine": f"{platform.machine()} {platform.python_version()}",
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "cache_cuts.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    write_markdown(args.out / "cache_cuts.md", report)
    print((args.out / "cache_cuts.md").read_text(encoding="utf-8"))
    return report


if __name__ == "__main__":
    main()
