"""Half-finished agent loops packed under a budget: whether the task outlives a long result.

An agent loop: a system prompt, the user's task, then tool steps (an
assistant message calling a tool, the tool's result). Most results are short
(``--short`` words at most); one step in ``--long-every`` returns a long log
(``--long-lines`` lines, about 10 tokens each). After every step the history
so far is packed under ``--budget`` tokens by

(a) ``trim``: ``langchain_core.messages.trim_messages(strategy="last",
    include_system=True, start_on="human")``, what LangChain's documentation
    gives for chat models;
(b) ``trim_any``: the same without ``start_on`` (its default);
(c) ``pack``: ``from_openai_messages(history).pack(budget)``, no settings;
(d) ``pack_start_on``: the same with ``start_on="user"``;
(e) ``pack_anthropic``: the same with ``target="anthropic"``;
(f) ``pack_continue``: ``pack(budget, previous=<the pack of the step
    before>)``, as an application keeping the provider's prompt cache warm.

Each message is priced with the same chat costing (Cognoxium's
``message_tokens``), so every method sees the same costs. Reported per
method: the share of packs that keep the task, that keep the newest step
(the call with its result, whole or cut to fit), that send that result cut,
and both task and step; the messages and tokens sent; and the
whole calls (from the OpenAI message dicts to the messages to send; the
LangChain messages are built in the call). The ceiling is the share of
states in which the system prompt, the task and the newest step fit the
budget together, whole: any packer could keep both there; beyond it, the
newest result can only be sent cut. The floor of the time is
pricing every message once, the least any token-budgeted trimming does.

With ``--tasks-every K``, a second shape: a session of several tasks, the
assistant reporting and the user giving the next task after every ``K``
steps; the task counted is then the newest user message, and a pack is
counted after each step (all states are packed, so continued packs see
every message).

Usage: ``python benchmarks/bench_agent_loops.py [--loops 100] [--steps 12]
[--budget 4096] [--tasks-every 0] [--out benchmarks/results]``. Writes ``agent_loops.json``
and ``agent_loops.md``.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cognoxium.formats.openai import from_openai_messages
from cognoxium.tokens.profiles import get_profile

ROOT = Path(__file__).resolve().parent
AS_OF = datetime(2030, 1, 1, tzinfo=UTC)
PROFILE = get_profile("cl100k_base")
SYSTEM = "You are a coding agent. Use the tools to read, run and edit the repository. " * 8
WORDS = "read file test error line value module import path config build run fix".split()
METHODS = ("trim", "trim_any", "pack", "pack_start_on", "pack_anthropic", "pack_continue")


def loop(
    seed: int, steps: int, short: int, long_every: int, long_lines: int, tasks_every: int = 0
) -> list[dict]:
    """One agent loop as OpenAI messages: the system prompt, the task, ``steps`` tool steps.

    With ``tasks_every`` > 0, after every ``tasks_every`` steps the assistant
    reports and the user gives the next task (a session of several tasks).
    """
    rng = random.Random(seed)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": f"Task {seed}: fix the failing test in tests/test_{seed}.py."},
    ]
    for step in range(steps):
        if tasks_every and step and step % tasks_every == 0:
            report = " ".join(rng.choices(WORDS, k=rng.randint(20, 80)))
            messages.append({"role": "assistant", "content": f"Done: {report}"})
            messages.append({"role": "user", "content": f"Next, task {seed}.{step}: {report[:40]}"})
        call_id = f"call_{seed}_{step}"
        arguments = json.dumps({"path": f"src/{rng.choice(WORDS)}_{step}.py"})
        messages.append(
            {
                "role": "assistant",
                "content": " ".join(rng.choices(WORDS, k=rng.randint(5, 30))),
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": "read_file", "arguments": arguments},
                    }
                ],
            }
        )
        if rng.randrange(long_every) == 0:
            lines = [f"{i:05d} " + " ".join(rng.choices(WORDS, k=6)) for i in range(long_lines)]
            result = "\n".join(lines)
        else:
            result = " ".join(rng.choices(WORDS, k=rng.randint(10, short)))
        messages.append({"role": "tool", "tool_call_id": call_id, "content": result})
    return messages


def langchain(messages: list[dict[str, Any]]) -> list[Any]:
    """The messages as LangChain messages, each with its place as its id."""
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

    out: list[Any] = []
    for at, m in enumerate(messages):
        if m["role"] == "assistant":
            calls = [
                {"name": c["function"]["name"], "args": json.loads(c["function"]["arguments"]),
                 "id": c["id"], "type": "tool_call"}
                for c in m.get("tool_calls", [])
            ]  # fmt: skip
            out.append(AIMessage(content=m["content"], tool_calls=calls, id=str(at)))
        elif m["role"] == "tool":
            out.append(
                ToolMessage(content=m["content"], tool_call_id=m["tool_call_id"], id=str(at))
            )
        else:
            kind = SystemMessage if m["role"] == "system" else HumanMessage
            out.append(kind(content=m["content"], id=str(at)))
    return out


Kept = tuple[list[int], set[int], int]
"""What a method sent: the places of the messages kept, those sent cut, the tokens sent."""


def trimmer(start_on: str | None) -> Callable[[list[dict[str, Any]], int], Kept]:
    """``trim_messages`` over the history; returns what it sent (nothing is cut)."""

    def trim(history: list[dict[str, Any]], budget: int) -> Kept:
        from langchain_core.messages import trim_messages

        costs = [PROFILE.message_tokens(m) for m in history]
        kept = trim_messages(
            langchain(history),
            max_tokens=budget - PROFILE.tokens_per_pack,
            token_counter=lambda batch: sum(costs[int(m.id)] for m in batch),
            strategy="last",
            include_system=True,
            start_on=start_on,
        )
        places = [int(m.id) for m in kept]
        return places, set(), sum(costs[i] for i in places)

    return trim


def sent(result: Any) -> Kept:
    """What a pack sent: its messages' places, those it cut, its tokens but the reply priming."""
    places = [int(i.rsplit(":", 1)[1]) for i in result.ids]
    cut = {int(t.id.rsplit(":", 1)[1]) for t in result.manifest.truncations}
    return places, cut, result.used_tokens - PROFILE.tokens_per_pack


def packer(**options: Any) -> Callable[[list[dict[str, Any]], int], Kept]:
    """``pack`` over the history; returns what it sent."""

    def pack(history: list[dict[str, Any]], budget: int) -> Kept:
        return sent(
            from_openai_messages(history, conversation_id="loop").pack(
                budget, as_of=AS_OF, **options
            )
        )

    return pack


class Continuing:
    """``pack`` over the history, continuing the pack of the step before in the same loop."""

    def __init__(self) -> None:
        self.previous: Any = None

    def reset(self) -> None:
        """Start a new loop: the next pack continues none."""
        self.previous = None

    def __call__(self, history: list[dict[str, Any]], budget: int) -> Kept:
        """What the pack sent."""
        result = from_openai_messages(history, conversation_id="loop").pack(
            budget, as_of=AS_OF, previous=self.previous
        )
        self.previous = result
        return sent(result)


def task_of(history: list[dict[str, Any]]) -> int:
    """The place of the newest user message: the task the newest step works on."""
    return max(i for i, m in enumerate(history) if m["role"] == "user")


def ceiling(history: list[dict[str, Any]], budget: int) -> bool:
    """Whether the system prompt, the task and the newest step fit the budget together."""
    kept = [history[0], history[task_of(history)], *history[-2:]]
    return PROFILE.tokens_per_pack + sum(PROFILE.message_tokens(m) for m in kept) <= budget


def replay(loops: list[list[dict[str, Any]]], budget: int) -> dict[str, Any]:
    """Pack every state of every loop with every method; tally what each keeps."""
    methods = {
        "trim": trimmer("human"),
        "trim_any": trimmer(None),
        "pack": packer(),
        "pack_start_on": packer(start_on="user"),
        "pack_anthropic": packer(target="anthropic"),
        "pack_continue": Continuing(),
    }
    tally = {name: dict.fromkeys(("task", "newest", "cut", "both", "messages", "tokens"), 0)
             for name in methods}  # fmt: skip
    seconds = dict.fromkeys([*methods, "floor"], 0.0)
    states = could = 0
    for messages in loops:
        for method in methods.values():
            if isinstance(method, Continuing):
                method.reset()
        for end in range(4, len(messages) + 1, 2):
            history = messages[:end]
            tallied = history[-1]["role"] == "tool"  # a step just ended
            states += tallied
            could += tallied and ceiling(history, budget)
            started = time.perf_counter()
            [PROFILE.message_tokens(m) for m in history]
            seconds["floor"] += time.perf_counter() - started
            for name, method in methods.items():
                started = time.perf_counter()
                kept = method(history, budget)
                seconds[name] += time.perf_counter() - started
                if tallied:
                    count(tally[name], history, kept, end)
    return {"states": states, "ceiling": could / states, "tally": tally, "seconds": seconds}


def count(tally: dict[str, int], history: list[dict[str, Any]], kept: Kept, end: int) -> None:
    places, cut, tokens = kept
    task, newest = task_of(history) in places, end - 1 in places and end - 2 in places
    tally["task"] += task
    tally["newest"] += newest
    tally["cut"] += newest and end - 1 in cut
    tally["both"] += task and newest
    tally["messages"] += len(places)
    tally["tokens"] += tokens


def write_markdown(path: Path, report: dict[str, Any]) -> None:
    s, states = report["settings"], report["states"]
    floor, trim = report["seconds"]["floor"], report["seconds"]["trim"]
    lines = [
        "# Half-finished agent loops under a budget",
        "",
        f"Command: `{report['command']}`",
        "",
        f"{s['loops']} loops of {s['steps']} tool steps (one in {s['long_every']} returns a "
        f"log of {s['long_lines']} lines"
        + (f"; a new task every {s['tasks_every']} steps" if s.get("tasks_every") else "")
        + f"), packed after every step at {s['budget']} tokens: "
        f"{states} packs. Ceiling (system prompt, task and newest step fit together whole): "
        f"{report['ceiling']:.3f} of the packs.",
        "",
        "| method | task kept | newest step kept | its result cut | both | messages / pack | "
        "tokens / pack | whole calls (s) | x trim | x the floor |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name in METHODS:
        t = report["tally"][name]
        sec = report["seconds"][name]
        lines.append(
            f"| {name} | {t['task'] / states:.3f} | {t['newest'] / states:.3f} | "
            f"{t['cut'] / states:.3f} | {t['both'] / states:.3f} | {t['messages'] / states:.1f} | "
            f"{t['tokens'] / states:,.0f} | {sec:.2f} | {sec / trim:.2f} | {sec / floor:.1f} |"
        )
    lines += [
        "",
        f"Floor (pricing every message once): {floor:.2f} s. Replay time: "
        f"{report['seconds_total']:.1f} s on {report['machine']}.",
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loops", type=int, default=100)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--short", type=int, default=300, help="most words of a short result")
    parser.add_argument("--long-every", type=int, default=4)
    parser.add_argument("--long-lines", type=int, default=600)
    parser.add_argument("--budget", type=int, default=4096)
    parser.add_argument("--tasks-every", type=int, default=0, help="steps per task (0: one task)")
    parser.add_argument("--out", type=Path, default=ROOT / "results")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    loops = [
        loop(seed, args.steps, args.short, args.long_every, args.long_lines, args.tasks_every)
        for seed in range(args.loops)
    ]
    report = {
        "command": "python benchmarks/bench_agent_loops.py " + " ".join(sys.argv[1:]),
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
        **replay(loops, args.budget),
        "machine": f"{platform.machine()} {platform.python_version()}",
    }
    report["seconds_total"] = time.perf_counter() - started
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "agent_loops.json").write_text(json.dumps(report, indent=2) + "\n")
    write_markdown(args.out / "agent_loops.md", report)
    print((args.out / "agent_loops.md").read_text())
    return report


if __name__ == "__main__":
    main()
