"""Peer benchmark: keep the newest chat messages under a token budget, plus the system message.

The same work, in one run, with one tokenizer (tiktoken ``cl100k_base``, as
``cognoxium.tokens.profiles.get_profile("cl100k_base")``) and one cost model:

- a message costs its content tokens plus the chat framing of its role
  (``TokenProfile.framing``: 3 tokens + the role's tokens, OpenAI Cookbook);
- a request pays ``tokens_per_pack`` (3) once, so the peers get
  ``max_tokens = budget - 3`` and Cognoxium the budget itself.

Methods (each times only the trimming; building its own input objects is
measured separately as ``build_s``):

``cognoxium``
    ``CognitionFrame(store).rank("recency").pack(budget)``, the system message
    ``required``: cold (empty token-count cache) and warm (repeat).
``cognoxium_no_rank``
    ``CognitionFrame(store).pack(budget)`` with no rank, over the store with
    every priority 0 (as the chat importers give; drawn priorities would
    order the messages first): conversation items newest first, stopping at
    the first that does not fit (``gaps="stop"``, the default), cold cache
    (a new frame each time). Its selection is checked against
    ``trim_messages`` (``no_rank_equals_langchain``).
``cognoxium_whole_call``
    The user's whole call from the same LangChain messages that
    ``trim_messages`` gets: ``from_langchain_messages(messages)
    .rank("recency").pack(budget)``, conversion included, cold cache.
``langchain_trim_messages``
    ``langchain_core.messages.trim_messages(strategy="last",
    include_system=True, token_counter=<per-message counter>)``.
``llamaindex_chat_memory_buffer``
    ``llama_index.core.memory.ChatMemoryBuffer(token_limit=...,
    tokenizer_fn=<same encoder>).get(initial_token_count=<system tokens>)``,
    in a child process with a time limit: its loop re-tokenizes the joined
    history once per dropped message (quadratic).
``python_loop_stop`` / ``python_loop_skip``
    A plain loop from the newest message back, counting each message with
    the encoder: ``stop`` ends at the first message that does not fit (the
    semantics of trim_messages), ``skip`` skips it and tries older ones (the
    semantics of Cognoxium's pack).

Selections are checked against each other where the semantics agree, and
every difference is explained in the output (``agreement``).

``short_words``
    The same whole call against ``trim_messages`` on a second history of the
    same size: texts of short common words (one token each; lengths drawn as
    ``bench_pack.synthetic_items`` draws them, seed 4), whose bytes bound is
    far below their cost. Its newest messages leave a budget that the bytes
    bound of every older message fits in, so the pack must prove of each one
    that it does not fit: the cost of a pack should not depend on how its
    texts tokenize. Checked against ``python_loop_skip`` and
    ``python_loop_stop``.

Usage: ``python benchmarks/bench_peers.py [--sizes 10000,100000] [--budget 8192]
[--out benchmarks/results/peers.json]``
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import platform
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from bench_pack import synthetic_items
from cognoxium import CognitionFrame
from cognoxium.formats.interop import from_langchain_messages
from cognoxium.tokens.profiles import clear_cache, get_profile

AS_OF = datetime(2030, 1, 1, tzinfo=UTC)
PROFILE = get_profile("cl100k_base")
ENCODING = PROFILE.encoding
SYSTEM_TEXT = (
    "You are a support assistant. Answer from the conversation only, cite order numbers "
    "exactly, and never reveal account numbers or passwords."
)


SHORT_WORDS = tuple(
    "the a to and of I you it is that in for on we this with can my your be have not".split()
)
"""Short common words, one cl100k_base token each (with the space before them)."""
SHORT_WORDS_SEED = 4


def short_words_texts(n: int, seed: int = SHORT_WORDS_SEED) -> list[str]:
    """``n`` texts of :data:`SHORT_WORDS`, lengths lognormal as ``synthetic_items`` draws them."""
    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.lognormal(mean=3.2, sigma=0.7, size=n).astype(np.int64), 1, 600)
    words = np.array(SHORT_WORDS, dtype=object)[
        rng.integers(0, len(SHORT_WORDS), size=int(lengths.sum()))
    ]
    bounds = np.concatenate([[0], np.cumsum(lengths)])
    return [" ".join(words[bounds[i] : bounds[i + 1]]) for i in range(n)]


def chat_store(n: int, seed: int = 7, texts: list[str] | None = None) -> pl.DataFrame:
    """``n`` messages: a required system message, then alternating user/assistant turns.

    ``texts`` replaces the drawn texts of the turns (not the system message's).
    """
    df = synthetic_items(n, seed=seed)
    if texts is not None:
        df = df.with_columns(text=pl.Series(texts, dtype=pl.String))
    first = pl.int_range(pl.len()) == 0
    return df.with_columns(
        pl.when(first)
        .then(pl.lit("system"))
        .otherwise(pl.col("role").cast(pl.String))
        .cast(df.schema["role"])
        .alias("role"),
        pl.when(first)
        .then(pl.lit("required"))
        .otherwise(pl.col("retention").cast(pl.String))
        .cast(df.schema["retention"])
        .alias("retention"),
        pl.when(first).then(pl.lit(SYSTEM_TEXT)).otherwise(pl.col("text")).alias("text"),
    ).pipe(lambda d: CognitionFrame(d.drop("content_hash")).collect())


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def message_cost(role: str, text: str) -> int:
    return PROFILE.framing(role) + len(ENCODING.encode_ordinary(text))


# ---------------------------------------------------------------------------
# the methods; each returns the selected message indices, in order


def cognoxium_select(frame: CognitionFrame, budget: int) -> tuple[list[int], dict[str, Any]]:
    pack = frame.rank("recency").pack(budget, as_of=AS_OF)
    positions = pack.manifest.to_polars().filter(pl.col("decision") == "included")
    info = {
        "used_tokens": pack.used_tokens,
        "counted_items": pack.manifest.totals.counted,
    }
    return positions.get_column("position").to_list(), info


def cognoxium_no_rank(frame: CognitionFrame, budget: int) -> list[int]:
    """Pack with no rank (newest first, stop at the first miss): the selected positions."""
    pack = frame.pack(budget, as_of=AS_OF)
    positions = pack.manifest.to_polars().filter(pl.col("decision") == "included")
    return positions.get_column("position").to_list()


def cognoxium_whole_call(messages: list[Any], budget: int) -> list[int]:
    """Convert LangChain messages, rank by recency and pack: the selected message indices."""
    pack = from_langchain_messages(messages).rank("recency").pack(budget, as_of=AS_OF)
    positions = pack.manifest.to_polars().filter(pl.col("decision") == "included")
    return positions.get_column("position").to_list()


def python_loop(roles: list[str], texts: list[str], budget: int, *, skip: bool) -> list[int]:
    remaining = budget - PROFILE.tokens_per_pack - message_cost(roles[0], texts[0])
    chosen = []
    for i in range(len(texts) - 1, 0, -1):
        cost = message_cost(roles[i], texts[i])
        if cost <= remaining:
            chosen.append(i)
            remaining -= cost
        elif not skip:
            break
    return [0, *reversed(chosen)]


def langchain_messages(roles: list[str], texts: list[str]) -> list[Any]:
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

    kinds = {"system": SystemMessage, "user": HumanMessage, "assistant": AIMessage}
    return [
        kinds[r](content=t, id=str(i)) for i, (r, t) in enumerate(zip(roles, texts, strict=True))
    ]


def langchain_select(messages: list[Any], budget: int) -> list[int]:
    from langchain_core.messages import BaseMessage, trim_messages

    roles = {"system": "system", "human": "user", "ai": "assistant"}

    def count(messages: list[BaseMessage]) -> int:
        # What trim_messages does with a per-message counter: sum it over the list.
        return sum(
            PROFILE.framing(roles[m.type]) + len(ENCODING.encode_ordinary(m.content))
            for m in messages
        )

    kept = trim_messages(
        messages,
        max_tokens=budget - PROFILE.tokens_per_pack,
        token_counter=count,
        strategy="last",
        include_system=True,
    )
    return [int(m.id) for m in kept]


def llamaindex_messages(roles: list[str], texts: list[str]) -> list[Any]:
    from llama_index.core.llms import ChatMessage

    return [ChatMessage(role=r, content=t) for r, t in zip(roles, texts, strict=True)]


def llamaindex_select(messages: list[Any], budget: int, system_tokens: int) -> list[int]:
    from llama_index.core.memory import ChatMemoryBuffer

    history = messages[1:]  # the system message is paid for by initial_token_count
    memory = ChatMemoryBuffer.from_defaults(
        chat_history=history,
        token_limit=budget - PROFILE.tokens_per_pack,
        tokenizer_fn=ENCODING.encode_ordinary,
    )
    kept = memory.get(initial_token_count=system_tokens)
    return [0, *range(len(messages) - len(kept), len(messages))]


def _child(conn: Any, fn: Callable[[], Any]) -> None:
    seconds, value = timed(fn)
    conn.send((seconds, value))
    conn.close()


def with_time_limit(fn: Callable[[], Any], limit_s: float) -> tuple[float, Any] | None:
    """Run ``fn`` in a forked child; ``None`` if it has not finished after ``limit_s`` seconds."""
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    process = ctx.Process(target=_child, args=(child, fn))
    process.start()
    child.close()
    if parent.poll(limit_s):
        result = parent.recv()
        process.join()
        return result  # type: ignore[no-any-return]
    process.terminate()
    process.join()
    return None


# ---------------------------------------------------------------------------


def contiguous_newest(selection: list[int], n: int) -> list[int]:
    """The newest contiguous run of a selection (without the system message at 0)."""
    run = []
    expected = n - 1
    for i in reversed(selection):
        if i != expected or i == 0:
            break
        run.append(i)
        expected -= 1
    return list(reversed(run))


def run_size(n: int, budget: int, *, repeats: int, llamaindex_limit_s: float) -> dict[str, Any]:
    build_s, store = timed(lambda: chat_store(n))
    roles = store.get_column("role").cast(pl.String).to_list()
    texts = store.get_column("text").to_list()
    frame = CognitionFrame(store)
    out: dict[str, Any] = {"messages": n, "budget": budget, "methods": {}}
    methods = out["methods"]

    cold, warm = [], []
    info: dict[str, Any] = {}
    for _ in range(repeats):
        clear_cache()
        seconds, (cog, info) = timed(lambda: cognoxium_select(frame, budget))
        cold.append(seconds)
        seconds, (again, _) = timed(lambda: cognoxium_select(frame, budget))
        warm.append(seconds)
        assert again == cog
    methods["cognoxium"] = {
        "seconds": statistics.median(cold),
        "warm_seconds": statistics.median(warm),
        "build_s": build_s,
        "selected": len(cog),
        **info,
    }

    no_rank_times = []
    plain = store.with_columns(pl.lit(0, pl.Int64).alias("priority"))
    for _ in range(repeats):
        clear_cache()
        seconds, no_rank = timed(lambda: cognoxium_no_rank(CognitionFrame(plain), budget))
        no_rank_times.append(seconds)
    methods["cognoxium_no_rank"] = {
        "seconds": statistics.median(no_rank_times),
        "build_s": build_s,
        "selected": len(no_rank),
    }

    stop_s, stop = timed(lambda: python_loop(roles, texts, budget, skip=False))
    skip_s, skip = timed(lambda: python_loop(roles, texts, budget, skip=True))
    methods["python_loop_stop"] = {"seconds": stop_s, "build_s": 0.0, "selected": len(stop)}
    methods["python_loop_skip"] = {"seconds": skip_s, "build_s": 0.0, "selected": len(skip)}

    lc_build, lc_messages = timed(lambda: langchain_messages(roles, texts))
    lc_times = []
    for _ in range(repeats):
        seconds, lc = timed(lambda: langchain_select(lc_messages, budget))
        lc_times.append(seconds)
    methods["langchain_trim_messages"] = {
        "seconds": statistics.median(lc_times),
        "min_seconds": min(lc_times),
        "build_s": lc_build,
        "selected": len(lc),
    }
    whole_times = []
    for _ in range(repeats):
        clear_cache()
        seconds, whole = timed(lambda: cognoxium_whole_call(lc_messages, budget))
        whole_times.append(seconds)
    methods["cognoxium_whole_call"] = {
        "seconds": statistics.median(whole_times),
        "min_seconds": min(whole_times),
        "build_s": lc_build,
        "selected": len(whole),
    }
    out["whole_call"] = {
        "langchain_over_cognoxium_median": statistics.median(lc_times)
        / statistics.median(whole_times),
        "langchain_over_cognoxium_min": min(lc_times) / min(whole_times),
    }

    li_build, li_messages = timed(lambda: llamaindex_messages(roles, texts))
    system_tokens = message_cost(roles[0], texts[0])
    result = with_time_limit(
        lambda: llamaindex_select(li_messages, budget, system_tokens), llamaindex_limit_s
    )
    li = None
    if result is None:
        methods["llamaindex_chat_memory_buffer"] = {
            "seconds": None,
            "timed_out_after_s": llamaindex_limit_s,
            "build_s": li_build,
            "selected": None,
        }
    else:
        li = result[1]
        methods["llamaindex_chat_memory_buffer"] = {
            "seconds": result[0],
            "build_s": li_build,
            "selected": len(li),
        }

    base = methods["cognoxium"]["seconds"]
    for entry in methods.values():
        entry["over_cognoxium"] = None if entry["seconds"] is None else entry["seconds"] / base

    run = contiguous_newest(cog, n)
    extra = sorted(set(cog) - set(lc))
    out["agreement"] = {
        "cognoxium_whole_call_equals_cognoxium": whole == cog,
        "no_rank_equals_langchain": no_rank == lc,
        "langchain_equals_python_loop_stop": lc == stop,
        "cognoxium_equals_python_loop_skip": cog == skip,
        "cognoxium_newest_run_equals_langchain": [0, *run] == lc,
        "cognoxium_contains_langchain": set(lc) <= set(cog),
        "cognoxium_extra_older_messages": len(extra),
        "cognoxium_extra_all_older_than_langchain": all(i < min(lc[1:], default=n) for i in extra),
    }
    out["short_words"] = short_words_case(n, budget, repeats=repeats)
    if li is not None:
        joined = " ".join(texts[i] for i in li[1:])
        li_tokens = len(ENCODING.encode_ordinary(joined)) + system_tokens
        first = li[1] if len(li) > 1 else n
        out["agreement"] |= {
            "llamaindex_is_a_newest_suffix": li[1:] == list(range(first, n)),
            "llamaindex_starts_on_user": first >= n or roles[first] == "user",
            "llamaindex_joined_tokens_within_limit": li_tokens <= budget - PROFILE.tokens_per_pack,
            "llamaindex_minus_langchain_messages": len(li) - len(lc),
        }
    return out


def short_words_case(n: int, budget: int, *, repeats: int) -> dict[str, Any]:
    """The whole call against ``trim_messages`` on ``n`` messages of short common words."""
    store = chat_store(n, texts=short_words_texts(n))
    roles = store.get_column("role").cast(pl.String).to_list()
    texts = store.get_column("text").to_list()
    messages = langchain_messages(roles, texts)
    lc_times, whole_times = [], []
    lc: list[int] = []
    whole: list[int] = []
    for _ in range(repeats):
        seconds, lc = timed(lambda: langchain_select(messages, budget))
        lc_times.append(seconds)
        clear_cache()
        seconds, whole = timed(lambda: cognoxium_whole_call(messages, budget))
        whole_times.append(seconds)
    skip = python_loop(roles, texts, budget, skip=True)
    stop = python_loop(roles, texts, budget, skip=False)
    used = PROFILE.tokens_per_pack + sum(message_cost(roles[i], texts[i]) for i in whole)
    return {
        "messages": n,
        "cognoxium_whole_call_seconds": statistics.median(whole_times),
        "langchain_trim_messages_seconds": statistics.median(lc_times),
        "langchain_over_cognoxium_median": statistics.median(lc_times)
        / statistics.median(whole_times),
        "langchain_over_cognoxium_min": min(lc_times) / min(whole_times),
        "selected": len(whole),
        "langchain_selected": len(lc),
        "budget_left_tokens": budget - used,
        "agreement": {
            "cognoxium_whole_call_equals_python_loop_skip": whole == skip,
            "langchain_equals_python_loop_stop": lc == stop,
        },
    }


NOTES = {
    "cost_model": (
        "A message costs framing(role) + content tokens (cl100k_base; framing = 3 + role "
        "tokens, i.e. 4 for system/user/assistant); the peers get max_tokens = budget - 3, "
        "the reply priming Cognoxium charges once per pack."
    ),
    "langchain_vs_cognoxium": (
        "trim_messages(strategy='last') keeps the longest run of newest messages that fits and "
        "stops at the first message that does not; Cognoxium's pack skips a message that does "
        "not fit and keeps trying older ones, so it holds the same newest run plus older "
        "messages that fill the remaining budget. python_loop_stop reproduces trim_messages "
        "and python_loop_skip reproduces Cognoxium, exactly."
    ),
    "langchain_cost": (
        "trim_messages (langchain-core 1.x) first counts every message to test whether all "
        "fit, then binary-searches the number of newest messages, counting each candidate "
        "run again: about twice the history is tokenized per call. Cognoxium tokenizes the "
        "candidates in selection order and skips, uncounted, those whose lower bound cannot "
        "fit (counted_items)."
    ),
    "llamaindex": (
        "ChatMemoryBuffer.get counts len(tokenizer(' '.join(contents))): no per-message "
        "framing, so it keeps more messages than the framed budget allows; it also drops "
        "leading assistant/tool messages so the history starts on a user message, and it "
        "re-tokenizes the whole remaining history once per dropped message (quadratic), so "
        "it runs in a child process with a time limit. Its documented replacement, "
        "llama_index.core.memory.Memory, trims on insertion (flushing fixed-size chunks of "
        "the oldest messages to memory blocks, with chat_history_token_ratio of the limit "
        "for the history), not as a budgeted selection at read time, so it is not the same "
        "work."
    ),
    "timing": (
        "seconds = median over repeats of the trimming call alone, on input objects built "
        "beforehand (build_s, not included); Cognoxium 'seconds' starts from an empty "
        "token-count cache, 'warm_seconds' repeats with it filled."
    ),
    "short_words": (
        "The whole call against trim_messages again on a history of short common words "
        "(one token a word, seed 4), whose newest messages leave a budget in which the bytes "
        "bound of every older message fits: Cognoxium must prove of each older message that "
        "it does not fit, without tokenizing it (budget_left_tokens is what the pack leaves)."
    ),
    "whole_call": (
        "cognoxium_whole_call times from_langchain_messages + rank('recency') + pack on the "
        "LangChain messages trim_messages gets (conversion included, empty token-count cache), "
        "so it compares the user's whole call with trim_messages on the same input objects."
    ),
}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--budget", type=int, default=8192)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--llamaindex-limit-s", type=float, default=120.0)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/peers.json"))
    args = parser.parse_args(argv)
    import langchain_core
    import llama_index.core

    PROFILE.count(["warm up"])
    # First calls pay for lazy imports and caches; keep them out of the timings.
    warm_roles, warm_texts = ["system", "user", "assistant"], ["Be brief.", "Hi", "Hello"]
    langchain_select(langchain_messages(warm_roles, warm_texts), 64)
    llamaindex_select(llamaindex_messages(warm_roles, warm_texts), 64, 8)
    cognoxium_select(CognitionFrame(chat_store(100)), 64)
    cognoxium_whole_call(langchain_messages(warm_roles, warm_texts), 64)
    results: dict[str, Any] = {
        "profile": PROFILE.name,
        "budget": args.budget,
        "repeats": args.repeats,
        "versions": {
            "python": platform.python_version(),
            "polars": pl.__version__,
            "numpy": np.__version__,
            "langchain_core": langchain_core.__version__,
            "llama_index_core": llama_index.core.__version__,
        },
        "notes": NOTES,
        "sizes": [],
    }
    for n in (int(s) for s in args.sizes.split(",")):
        entry = run_size(
            n, args.budget, repeats=args.repeats, llamaindex_limit_s=args.llamaindex_limit_s
        )
        results["sizes"].append(entry)
        print(json.dumps(entry), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    return results


if __name__ == "__main__":
    main()
