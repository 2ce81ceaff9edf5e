"""Ingest benchmark: records, chat messages, JSONL and Parquet into a frame, against floors.

For each size (10k and 100k chat-like records, 1M with ``--sizes``), one run times:

``records``
    ``CognitionFrame.from_records(records)`` (the records of
    ``bench_items_io.chat_records``: id, role, text, ISO ``created_at``,
    priority, one source, a small metadata object), against the floor
    ``pyarrow.Table.from_pylist(records, schema)`` plus sha256 of every text
    (building the columns and hashing, no checks).
``records_nested``
    The same with a nested object in each metadata (``{"route": {"queue":
    ..., "tags": [...]}}``, as tenant, access-control or source fields
    often are), against the same floor with that struct in its schema.
``openai``
    ``from_openai_messages`` of the same turns as OpenAI chat dicts
    (``{"role", "content"}``, every tenth with a ``name``), against
    ``from_pylist`` + sha256.
``langchain``
    ``from_langchain_messages`` of the same turns as LangChain
    ``HumanMessage``/``AIMessage`` objects with ids, against reading their
    attributes into columns + ``from_pylist`` + sha256.
``jsonl``
    ``CognitionFrame.read_jsonl`` of the records written one per line,
    against Polars' own ``pl.read_ndjson``.
``parquet``
    ``CognitionFrame.read_parquet`` of the frame written by
    ``write_parquet``, against Polars' own ``pl.read_parquet``.

With ``--peer``, the published ``cognoxium`` 0.1.1 (an unrelated project of
the same name on the package index) is installed into its own virtual
environment (``~/.cache/cognoxium-bench/peer-0.1.1``, created with
``python -m venv`` and ``pip install cognoxium==0.1.1`` on first use) and run
in a child process: it reads the same records from a temporary JSONL file
before timing, renames ``text`` to its own ``content`` field, and times its
own ``CognitionFrame.from_records`` on them. It is never imported here.
Against it, Cognoxium's ``from_records`` takes the records read from the same
file in the same way, in two forms (:data:`RECORD_FORMS`: as ``json.loads``
gives them, and with interned keys as a program's dict literals give them),
and the two sides take turns, one call each per round, so that a change of
the machine's speed during the run weighs on both.

Every timing is the minimum and the median of ``--repeats`` rounds of the
user's whole call; ratios compare figures of the same run.

Usage: ``python benchmarks/bench_ingest.py [--sizes 10000,100000] [--repeats 5] [--peer]
[--out benchmarks/results/ingest.json]``
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa

from bench_items_io import chat_records
from cognoxium import CognitionFrame
from cognoxium.formats.interop import from_langchain_messages
from cognoxium.formats.openai import from_openai_messages
from cognoxium.items.io import write_parquet

PEER_VERSION = "0.1.1"
PEER_VENV = Path.home() / ".cache" / "cognoxium-bench" / f"peer-{PEER_VERSION}"
RESULTS = Path(__file__).resolve().parent / "results"

RECORD_SCHEMA = pa.schema(
    [
        ("id", pa.large_string()),
        ("role", pa.large_string()),
        ("text", pa.large_string()),
        ("created_at", pa.large_string()),
        ("priority", pa.int64()),
        ("sources", pa.large_list(pa.struct([("uri", pa.string()), ("kind", pa.string())]))),
        ("metadata", pa.struct([("conversation", pa.string()), ("turn", pa.int64())])),
    ]
)
ROUTE = pa.struct([("queue", pa.string()), ("tags", pa.list_(pa.string()))])
NESTED_SCHEMA = RECORD_SCHEMA.set(
    RECORD_SCHEMA.get_field_index("metadata"),
    pa.field(
        "metadata",
        pa.struct([("conversation", pa.string()), ("turn", pa.int64()), ("route", ROUTE)]),
    ),
)
MESSAGE_SCHEMA = pa.schema([("role", pa.large_string()), ("content", pa.large_string())])


def load_records(path: str, interned: bool) -> list[dict]:
    """The records of a JSONL file, each line read by ``json.loads``.

    ``interned``: every object rebuilt with interned keys, as the dict
    literals of a program give them (one key object shared by every record),
    instead of each line's own key objects.
    """
    import json
    import sys

    def rebuild(value):
        if type(value) is dict:
            return {sys.intern(k): rebuild(v) for k, v in value.items()}
        if type(value) is list:
            return [rebuild(v) for v in value]
        return value

    with open(path, encoding="utf-8") as handle:
        records = [json.loads(line) for line in handle]
    return [rebuild(r) for r in records] if interned else records


RECORD_FORMS = {"jsonl": False, "interned": True}
"""The two constructions of the same records timed against the peer: ``json.loads``
of each line, and the same with interned keys (records as a program builds them)."""

PEER_SCRIPT = (
    inspect.getsource(load_records)
    + """
import json, sys, time
import cognoxium
path = sys.argv[1]
# The peer's record form names the text 'content'.
def peer_form(r):
    return {**{k: v for k, v in r.items() if k != "text"}, "content": r["text"]}
inputs = {
    form: [peer_form(r) for r in load_records(path, interned)]
    for form, interned in json.loads(sys.argv[2]).items()
}
for line in sys.stdin:
    records = inputs[line.strip()]
    start, start_cpu = time.perf_counter(), time.process_time()
    frame = cognoxium.CognitionFrame.from_records(records)
    wall, cpu = time.perf_counter() - start, time.process_time() - start_cpu
    print(json.dumps({"wall": wall, "cpu": cpu, "rows": len(frame.collect())}), flush=True)
print(json.dumps({"module": cognoxium.__file__}), flush=True)
"""
)
"""The peer's child: it loads the records in every form, then times one
``from_records`` per line read from its standard input (the form's name)."""


def rounds(repeats: int, call: Callable[[], object]) -> dict[str, float]:
    """Minimum and median wall-clock seconds of ``repeats`` calls, and the least CPU time."""
    times, cpu = [], []
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        call()
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return {"min_s": min(times), "median_s": statistics.median(times), "cpu_min_s": min(cpu)}


def sha256_texts(kind: bytes, texts: list[str]) -> list[str]:
    """sha256 hex of ``kind``, NUL and each text's UTF-8 bytes (the content hash, bare)."""
    prefix = hashlib.sha256(kind + b"\x00")
    out = []
    for text in texts:
        digest = prefix.copy()
        digest.update(text.encode("utf-8"))
        out.append(digest.hexdigest())
    return out


def openai_messages(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records' turns as OpenAI chat dicts, every tenth with a ``name``."""
    return [
        {"role": r["role"], "content": r["text"], **({"name": "ada"} if i % 10 == 0 else {})}
        for i, r in enumerate(records)
    ]


def langchain_messages(records: list[dict[str, Any]]) -> list[Any]:
    """The records' turns as LangChain messages with ids."""
    from langchain_core.messages import AIMessage, HumanMessage

    kinds = {"user": HumanMessage, "assistant": AIMessage}
    return [kinds[r["role"]](content=r["text"], id=r["id"]) for r in records]


def floor_records(records: list[dict[str, Any]]) -> None:
    table = pa.Table.from_pylist(records, schema=RECORD_SCHEMA)
    sha256_texts(b"text", table.column("text").to_pylist())


def nested(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``records`` with a nested object in each metadata."""
    queues = ("billing", "shipping", "returns")
    return [
        {
            **r,
            "metadata": {
                **r["metadata"],
                "route": {"queue": queues[k % 3], "tags": ["vip"] if k % 7 == 0 else []},
            },
        }
        for k, r in enumerate(records)
    ]


def floor_nested(records: list[dict[str, Any]]) -> None:
    table = pa.Table.from_pylist(records, schema=NESTED_SCHEMA)
    sha256_texts(b"text", table.column("text").to_pylist())


def floor_messages(messages: list[dict[str, Any]]) -> None:
    table = pa.Table.from_pylist(messages, schema=MESSAGE_SCHEMA)
    sha256_texts(b"text", table.column("content").to_pylist())


def floor_langchain(messages: list[Any]) -> None:
    columns = {
        "role": [m.type for m in messages],
        "content": [m.content for m in messages],
        "id": [m.id for m in messages],
    }
    pa.Table.from_pydict(columns)
    sha256_texts(b"text", columns["content"])


def peer_python() -> Path:
    """The peer's interpreter, installing cognoxium 0.1.1 into its own venv on first use."""
    python = PEER_VENV / "bin" / "python"
    if not python.exists():
        PEER_VENV.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "venv", str(PEER_VENV)], check=True)
    probe = [str(python), "-c", "import importlib.metadata as m; print(m.version('cognoxium'))"]
    found = subprocess.run(probe, capture_output=True, text=True, cwd=tempfile.gettempdir())
    if found.stdout.strip() != PEER_VERSION:
        install = [str(python), "-m", "pip", "install", "--quiet", f"cognoxium=={PEER_VERSION}"]
        subprocess.run(install, check=True)
    return python


class Peer:
    """The peer's child process, timing one ``from_records`` call at a time."""

    def __init__(self, python: Path, path: Path) -> None:
        self.tmp = tempfile.TemporaryDirectory()
        script = Path(self.tmp.name) / "peer_from_records.py"
        script.write_text(PEER_SCRIPT, encoding="utf-8")
        self.child = subprocess.Popen(
            [str(python), str(script), str(path), json.dumps(RECORD_FORMS)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=self.tmp.name,  # never the project's own package
        )
        if self.child.stdin is None or self.child.stdout is None:
            raise RuntimeError("the peer's child has no pipes")
        self.stdin, self.stdout = self.child.stdin, self.child.stdout

    def time(self, form: str, n: int) -> tuple[float, float]:
        """Wall-clock and CPU seconds of one call on the records of ``form``."""
        self.stdin.write(form + "\n")
        self.stdin.flush()
        out = json.loads(self.stdout.readline())
        if out["rows"] != n:
            raise RuntimeError(f"the peer made {out['rows']} rows of {n} records")
        return out["wall"], out["cpu"]

    def close(self) -> None:
        """End the child and check it imported the peer from its own venv."""
        self.stdin.close()
        out = json.loads(self.stdout.readline())
        if self.child.wait() != 0:
            raise RuntimeError("the peer's child failed")
        self.tmp.cleanup()
        if str(PEER_VENV) not in out["module"]:
            raise RuntimeError(f"the peer child imported {out['module']}, not the peer's venv")


def summary(walls: list[float], cpus: list[float]) -> dict[str, float]:
    return {"min_s": min(walls), "median_s": statistics.median(walls), "cpu_min_s": min(cpus)}


def against_peer(peer: Peer, path: Path, n: int, repeats: int) -> dict[str, Any]:
    """Our ``from_records`` and the peer's on the same records, in alternating rounds.

    Both sides load the JSONL file the same way (:data:`RECORD_FORMS`); each
    round times one call of each, the first of the two alternating, so a
    change of the machine's speed weighs on both.
    """
    out: dict[str, Any] = {}
    for form, interned in RECORD_FORMS.items():
        records = load_records(str(path), interned)
        CognitionFrame.from_records(records)  # warm
        times: dict[str, tuple[list[float], list[float]]] = {
            "cognoxium": ([], []),
            "peer_0_1_1": ([], []),
        }
        for round_ in range(repeats):
            for side in ("cognoxium", "peer_0_1_1")[:: 1 if round_ % 2 == 0 else -1]:
                if side == "peer_0_1_1":
                    wall, cpu = peer.time(form, n)
                else:
                    start, start_cpu = time.perf_counter(), time.process_time()
                    CognitionFrame.from_records(records)
                    wall, cpu = time.perf_counter() - start, time.process_time() - start_cpu
                times[side][0].append(wall)
                times[side][1].append(cpu)
        mine, theirs = (summary(*times[side]) for side in ("cognoxium", "peer_0_1_1"))
        out[form] = {
            "cognoxium": mine,
            "peer_0_1_1": theirs,
            "speedup_min": theirs["min_s"] / mine["min_s"],
            "speedup_median": theirs["median_s"] / mine["median_s"],
            "speedup_cpu": theirs["cpu_min_s"] / mine["cpu_min_s"],
        }
        print(json.dumps({"n": n, "peer": form, **out[form]}), flush=True)
    return out


def write_inputs(tmp: Path, records: list[dict[str, Any]]) -> tuple[Path, Path]:
    """The records as a JSONL file and as the Parquet file ``write_parquet`` writes."""
    jsonl = tmp / "records.jsonl"
    with jsonl.open("w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
    parquet = tmp / "items.parquet"
    write_parquet(CognitionFrame.from_records(records).collect(), parquet)
    return jsonl, parquet


def run_size(n: int, repeats: int, peer: Path | None) -> dict[str, Any]:
    """Every method on ``n`` records, in one run."""
    records = chat_records(n)
    records_nested = nested(records)
    openai = openai_messages(records)
    langchain = langchain_messages(records)
    out: dict[str, Any] = {"n": n}
    with tempfile.TemporaryDirectory() as name:
        jsonl, parquet = write_inputs(Path(name), records)
        cases: dict[str, tuple[Callable[[], object], str, Callable[[], object]]] = {
            "records": (
                lambda: CognitionFrame.from_records(records),
                "floor",
                lambda: floor_records(records),
            ),
            "records_nested": (
                lambda: CognitionFrame.from_records(records_nested),
                "floor",
                lambda: floor_nested(records_nested),
            ),
            "openai": (
                lambda: from_openai_messages(openai),
                "floor",
                lambda: floor_messages(openai),
            ),
            "langchain": (
                lambda: from_langchain_messages(langchain),
                "floor",
                lambda: floor_langchain(langchain),
            ),
            "jsonl": (
                lambda: CognitionFrame.read_jsonl(jsonl),
                "polars",
                lambda: pl.read_ndjson(jsonl),
            ),
            "parquet": (
                lambda: CognitionFrame.read_parquet(parquet),
                "polars",
                lambda: pl.read_parquet(parquet),
            ),
        }
        for case, (ours, label, other) in cases.items():
            mine, theirs = rounds(repeats, ours), rounds(repeats, other)
            out[case] = {
                "cognoxium": mine,
                label: theirs,
                f"over_{label}_min": mine["min_s"] / theirs["min_s"],
                f"over_{label}_median": mine["median_s"] / theirs["median_s"],
            }
            print(json.dumps({"n": n, case: out[case]}), flush=True)
        if peer is not None:
            child = Peer(peer, jsonl)
            try:
                out["peer"] = against_peer(child, jsonl, n, repeats)
            finally:
                child.close()
    return out


LABELS = {
    "records": "`CognitionFrame.from_records`",
    "records_nested": "`CognitionFrame.from_records`, nested metadata",
    "openai": "`from_openai_messages`",
    "langchain": "`from_langchain_messages`",
    "jsonl": "`CognitionFrame.read_jsonl`",
    "parquet": "`CognitionFrame.read_parquet`",
}
BASELINES = {
    "floor": "`pa.Table.from_pylist` + sha256 per text",
    "polars": "Polars' own reader",
}
FORM_LABELS = {
    "jsonl": "each line of a JSONL file read by `json.loads`",
    "interned": "the same, rebuilt with interned keys as a program's dict literals give them",
}


def markdown(result: dict[str, Any]) -> str:
    """A Markdown section: per size, every case against its baseline (and the peer)."""
    lines = [
        f"## Ingest: records, chat messages and files into a frame ({result['repeats']} rounds)\n"
    ]
    for size in result["sizes"]:
        lines += [
            f"### {size['n']:,} records\n",
            "| call | Cognoxium s (min / median) | baseline | baseline s (min / median) "
            "| Cognoxium / baseline (min) |",
            "|---|---|---|---|---|",
        ]
        for case, label in LABELS.items():
            entry = size[case]
            base = "floor" if "floor" in entry else "polars"
            mine, theirs = entry["cognoxium"], entry[base]
            lines.append(
                f"| {label} | {mine['min_s']:.3f} / {mine['median_s']:.3f} | {BASELINES[base]} "
                f"| {theirs['min_s']:.3f} / {theirs['median_s']:.3f} "
                f"| {entry[f'over_{base}_min']:.1f}x |"
            )
        for form, entry in size.get("peer", {}).items():
            mine, peer = entry["cognoxium"], entry["peer_0_1_1"]
            lines.append(
                f"\nPublished cognoxium {PEER_VERSION} `CognitionFrame.from_records` on the same "
                f"records ({FORM_LABELS[form]}), in alternating rounds: "
                f"{peer['min_s']:.3f} / {peer['median_s']:.3f} s (min / median) against "
                f"Cognoxium's {mine['min_s']:.3f} / {mine['median_s']:.3f} s: "
                f"Cognoxium is **{entry['speedup_min']:.1f}x** faster (min), "
                f"{entry['speedup_median']:.1f}x (median), {entry['speedup_cpu']:.1f}x in CPU "
                f"time ({peer['cpu_min_s']:.3f} s against {mine['cpu_min_s']:.3f} s).\n"
            )
        lines.append("")
    load = result.get("load_average")
    if load is not None:
        before, after = (", ".join(f"{x:.2f}" for x in load[k]) for k in ("before", "after"))
        lines.append(
            f"Load average (1, 5, 15 minutes) on {os.cpu_count()} cores: {before} before the "
            f"run, {after} after.\n"
        )
    lines.append(
        "Each figure times the user's whole call on inputs built beforehand. The floor builds "
        "the same columns with pyarrow and hashes every text, without any check; Cognoxium also "
        "validates every value (enumerations, ids, times, Unicode, JSON), canonicalises JSON and "
        "lays out the canonical schema. The published 0.1.1 runs in its own virtual environment, "
        "in a child process that reads the records from a JSONL file before timing; against "
        "it, Cognoxium reads the same file the same way, and the two take turns, a call each. "
        "CPU time (least of the rounds, every thread of the process) is the steadier figure "
        "on a shared machine.\n"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000", help="1000000 for the 1M run.")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--peer", action="store_true", help="Also time cognoxium 0.1.1.")
    parser.add_argument("--out", type=Path, default=RESULTS / "ingest.json")
    args = parser.parse_args(argv)
    import langchain_core

    warm = chat_records(100)
    CognitionFrame.from_records(warm)
    from_langchain_messages(langchain_messages(warm))
    peer = peer_python() if args.peer else None
    load_before = os.getloadavg()
    result: dict[str, Any] = {
        "repeats": args.repeats,
        "versions": {
            "python": platform.python_version(),
            "polars": pl.__version__,
            "pyarrow": pa.__version__,
            "langchain_core": langchain_core.__version__,
            "peer": PEER_VERSION if peer is not None else None,
        },
        "sizes": [run_size(int(n), args.repeats, peer) for n in args.sizes.split(",")],
    }
    result["load_average"] = {"before": load_before, "after": os.getloadavg()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    args.out.with_suffix(".md").write_text(markdown(result))
    return result


if __name__ == "__main__":
    main()
