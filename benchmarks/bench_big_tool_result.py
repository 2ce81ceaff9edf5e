"""A huge awaited message: a chat whose last message is megabytes of text.

Two shapes of OpenAI chat, each ending on ``--mb`` megabytes (10^6 bytes) of
text, the message the model reads next:

tool
    an agent loop: a system prompt, the task, an assistant's tool call and
    its result;
user
    an exported chat: a system prompt, a question, a reply, and the user's
    pasted text.

A fresh pack of it under ``--budget`` tokens (default rank, no settings)
must send the last message cut to what fits (with its call). Two texts:

log
    server log lines, numbered (a realistic tool output);
run
    one character repeated (``x``): a single pre-token, the tokenizer's
    slowest input.

Timed, each in a process of its own (wall-clock seconds, CPU seconds and
peak resident memory of the child), the runs taking turns in every round:

pack
    the user's whole call: ``from_openai_messages(chat).pack(budget, as_of=...)``;
floor
    the least work any exact pack of it does: read the same file and count
    the result's tokens once with the same profile.

Reported, for each shape and text: the medians, and the ratio pack / floor
(each round's, then the median). Results go to ``benchmarks/results/big_tool_result.json`` and
``big_tool_result.md``.

Usage: ``python benchmarks/bench_big_tool_result.py [--mb 50] [--repeats 3] [--out FILE]``
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from processes import measured
from reports import megabyte_args, run_figures, write_report

RESULTS = Path(__file__).resolve().parent / "results"
BUDGET = 8000
AS_OF = "2026-01-01T00:00:00+00:00"

PACK = """
import json, sys
from datetime import datetime
from cognoxium import from_openai_messages
chat = json.loads(open(sys.argv[1], encoding="utf-8").read())
pack = from_openai_messages(chat, conversation_id="loop").pack(
    int(sys.argv[2]), as_of=datetime.fromisoformat(sys.argv[3]))
assert pack.ids[-1] == "loop:3" and pack.manifest.used_tokens <= int(sys.argv[2])
"""

FLOOR = """
import json, sys
from cognoxium.tokens.profiles import get_profile
chat = json.loads(open(sys.argv[1], encoding="utf-8").read())
assert get_profile("o200k_base").count([chat[-1]["content"]])[0] > int(sys.argv[2])
"""


def tool_text(kind: str, size: int) -> str:
    """``size`` bytes of a tool's output: numbered log lines, or one character repeated."""
    if kind == "run":
        return "x" * size
    lines = (
        f"2026-01-01T00:{i // 60 % 60:02d}:{i % 60:02d}Z INFO worker-{i % 17} request "
        f"id={i} path=/api/v1/items/{i * 7 % 1000} status=200 latency={i % 300}ms\n"
        for i in range(size // 60 + 1)
    )
    return "".join(lines)[:size]


def write_chat(path: Path, shape: str, kind: str, megabytes: float) -> None:
    """The chat of ``shape`` (``tool`` or ``user``), its last message the big text."""
    text = tool_text(kind, int(megabytes * 1e6))
    call = {"id": "call_1", "type": "function", "function": {"name": "logs", "arguments": "{}"}}
    last: list[dict[str, Any]] = [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": text},
    ]
    if shape == "user":
        last = [
            {"role": "assistant", "content": "Send me the logs."},
            {"role": "user", "content": text},
        ]
    chat = [
        {"role": "system", "content": "You are an SRE agent. Use the tools."},
        {"role": "user", "content": "Why is the service slow?"},
        *last,
    ]
    path.write_text(json.dumps(chat), encoding="utf-8")


def measure(shape: str, kind: str, megabytes: float, repeats: int, work: Path) -> dict[str, Any]:
    """Both runs ``repeats`` times, taking turns; the medians and the ratio."""
    chat = work / f"{shape}-{kind}.json"
    write_chat(chat, shape, kind, megabytes)
    commands = {
        "pack": [sys.executable, "-c", PACK, str(chat), str(BUDGET), AS_OF],
        "floor": [sys.executable, "-c", FLOOR, str(chat), str(BUDGET)],
    }
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in commands}
    for k in range(repeats):
        for name in list(commands) if k % 2 == 0 else list(commands)[::-1]:
            runs[name].append(asdict(measured(commands[name])))
            print(shape, kind, name, json.dumps(runs[name][-1]), flush=True)
    ratios = [p["wall_s"] / f["wall_s"] for p, f in zip(runs["pack"], runs["floor"], strict=True)]
    return {
        "runs": run_figures(runs),
        "pack_over_floor_median": round(statistics.median(ratios), 3),
    }


def markdown(result: dict[str, Any]) -> str:
    """A Markdown section: each shape's and text's runs, and the ratio pack / floor."""
    rows = [
        f"| {case} | {name} | {r['median_s']:.2f} | {r['cpu_median_s']:.2f} | {r['peak_mb']:,.0f} |"
        for case, figures in result["texts"].items()
        for name, r in figures["runs"].items()
    ]
    ratios = ", ".join(
        f"{case} **{figures['pack_over_floor_median']:.2f}x**"
        for case, figures in result["texts"].items()
    )
    return (
        f"## A {result['megabytes']:g} MB awaited message ({result['repeats']} rounds)\n\n"
        "An agent loop (system prompt, task, tool call) whose last message is a tool result, "
        "and an exported chat (system prompt, question, reply) whose last message is a user's "
        f"paste, each of {result['megabytes']:g} MB, packed fresh under {result['budget']:,} "
        "tokens with no settings (`from_openai_messages(chat).pack(budget)`), against the "
        "floor: reading the same file and counting the last message's tokens once. Each run a "
        "new process; medians and the peak resident memory of the largest run.\n\n"
        "| shape, text | run | median s | CPU median s | peak MB |\n|---|---|---|---|---|\n"
        + "\n".join(rows)
        + f"\n\nPack / floor (each round's ratio, median): {ratios}.\n"
    )


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Parse the arguments, measure both texts, print and write the JSON result."""
    args = megabyte_args(argv, __doc__, RESULTS / "big_tool_result.json")
    with tempfile.TemporaryDirectory() as work:
        texts = {
            f"{shape} {kind}": measure(shape, kind, args.mb, args.repeats, Path(work))
            for shape in ("tool", "user")
            for kind in ("log", "run")
        }
    result = {
        "megabytes": args.mb,
        "budget": BUDGET,
        "repeats": args.repeats,
        "python": platform.python_version(),
        "cores": os.cpu_count(),
        "texts": texts,
    }
    write_report(args.out, result, markdown(result), echo=True)
    return result


if __name__ == "__main__":
    main()
