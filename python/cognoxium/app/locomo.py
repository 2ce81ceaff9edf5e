"""The LoCoMo evaluation: pack a context per question and budget, and report evidence recall.

LoCoMo (Maharana et al., "Evaluating Very Long-Term Conversational Memory of
LLM Agents", ACL 2024) holds long two-person conversations, split into dated
sessions, with questions whose ``evidence`` lists the dialog turns
(``D<session>:<turn>``) that answer them. Packing a context for each question
under a token budget and measuring how much evidence lands in the pack
(evidence recall) tests retrieval and packing together.

The conversations become items and the questions pack requests as
:mod:`cognoxium.app.locomo_dataset` describes; :func:`run_locomo` packs them
with :func:`cognoxium.app.batch.run_batch` and :func:`evaluate` measures
evidence recall per token budget and question category.
"""

from __future__ import annotations

import os
import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from cognoxium.app._outputs import committed_output
from cognoxium.app._workers import open_part
from cognoxium.app.batch import (
    BatchStats,
    RankMethod,
    Request,
    check_rank_method,
    run_batch,
)
from cognoxium.app.locomo_dataset import (
    ANSWERABLE_CATEGORIES,
    DEFAULT_BUDGETS,
    file_sha256,
    read_locomo,
)
from cognoxium.exceptions import RecordError
from cognoxium.items.io import write_parquet
from cognoxium.items.model import canonical_json
from cognoxium.packing.manifests import (
    PACKS,
    ManifestForm,
    part_files,
    read_manifests,
    scan_packs,
)
from cognoxium.packing.options import PackOptions
from cognoxium.packing.packer import PackManifest
from cognoxium.retrieval.scope import RRF_K, RetrievalSettings

__all__ = [
    "TUNING_CONVERSATIONS",
    "evaluate",
    "run_locomo",
]

TUNING_CONVERSATIONS: tuple[str, ...] = ("conv-26", "conv-30")
"""The conversations on which the default retrieval settings were chosen."""

# ---------------------------------------------------------------------------
# evaluation


def _mean(values: Sequence[float]) -> float | None:
    return float(np.mean(values)) if values else None


def evaluate(
    packs: Iterable[Mapping[str, Any]],
    requests: Sequence[Request],
    *,
    stats: BatchStats | None = None,
) -> dict[str, Any]:
    """Measure evidence recall of packs, per token budget.

    For one question, recall is the share of its evidence turns that are in
    its pack; the all-evidence hit rate is the share of questions whose pack
    holds every evidence turn. Questions without valid evidence are excluded
    from both and counted.

    Parameters
    ----------
    packs
        Pack records with ``request_id`` and ``ids`` (the rows of a batch's
        packs, :func:`~cognoxium.packing.manifests.scan_packs`; see
        :func:`cognoxium.app.batch.run_batch`).
    requests
        The requests, with their ``evidence`` and the question category as
        the integer ``labels["category"]`` (see
        :func:`~cognoxium.app.locomo_dataset.locomo_requests`).
    stats
        The batch's statistics; when given, each budget gets ``packs_per_s``
        (requests over the sum of their per-pack latencies) and
        ``p50_ms``/``p95_ms``. Its ``latencies_ms`` must follow ``requests``.

    Returns
    -------
    dict
        ``{"budgets": {"<budget>": {...}}}`` where each budget has:
        ``questions``, ``evaluated``, ``excluded_no_evidence``,
        ``recall_answerable`` (mean recall over categories 1-4),
        ``recall_all`` (all categories), ``hit_rate_answerable``,
        ``hit_rate_all``, ``per_category`` (``{"<c>": {"questions",
        "recall", "hit_rate"}}``) and ``mean_used_tokens`` (when the packs
        carry ``used_tokens``). A mean over no questions is ``None``.

    Raises
    ------
    RecordError
        If a request has no pack, or its ``labels`` lack an integer
        ``category``; the error names the request and the field.

    Examples
    --------
    >>> reqs = [Request(id="q1", budget=64, evidence=["a", "b"], labels={"category": 1}),
    ...         Request(id="q2", budget=64, evidence=["c"], labels={"category": 5})]
    >>> out = evaluate([{"request_id": "q1", "ids": ["a"]},
    ...                 {"request_id": "q2", "ids": ["c"]}], reqs)["budgets"]["64"]
    >>> out["recall_answerable"], out["recall_all"], out["hit_rate_all"]
    (0.5, 0.75, 0.5)
    """
    by_id: dict[str, Mapping[str, Any]] = {}
    for record in packs:
        by_id[str(record["request_id"])] = record
    latencies = stats.latencies_ms if stats is not None else ()
    if stats is not None and len(latencies) != len(requests):
        raise RecordError(
            f"stats has {len(latencies)} latencies for {len(requests)} requests",
            field="latencies_ms",
        )
    groups: dict[int, list[int]] = {}
    for position, request in enumerate(requests):
        groups.setdefault(request.budget, []).append(position)
    report: dict[str, Any] = {}
    for budget, positions in sorted(groups.items()):
        entry = _budget_recall([requests[p] for p in positions], by_id)
        if stats is not None:
            entry |= _latency_figures([latencies[p] for p in positions])
        report[str(budget)] = entry
    return {"budgets": report}


def _budget_recall(
    requests: Sequence[Request], by_id: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    """The recall figures of one budget's requests (see :func:`evaluate`)."""
    recall: dict[int, list[float]] = {}
    hits: dict[int, list[float]] = {}
    used: list[int] = []
    for request in requests:
        category = _category(request)
        packed = by_id.get(request.id)
        if packed is None:
            raise request.error("has no pack", field="id")
        if "used_tokens" in packed:
            used.append(int(packed["used_tokens"]))
        evidence = set(request.evidence)
        if not evidence:
            continue
        found = len(evidence.intersection(packed["ids"]))
        recall.setdefault(category, []).append(found / len(evidence))
        hits.setdefault(category, []).append(1.0 if found == len(evidence) else 0.0)
    evaluated = sum(len(values) for values in recall.values())
    answerable = [c for c in recall if c in ANSWERABLE_CATEGORIES]
    entry: dict[str, Any] = {
        "questions": len(requests),
        "evaluated": evaluated,
        "excluded_no_evidence": len(requests) - evaluated,
        "recall_answerable": _mean([v for c in answerable for v in recall[c]]),
        "recall_all": _mean([v for values in recall.values() for v in values]),
        "hit_rate_answerable": _mean([v for c in answerable for v in hits[c]]),
        "hit_rate_all": _mean([v for values in hits.values() for v in values]),
        "per_category": {
            str(c): {
                "questions": len(recall[c]),
                "recall": _mean(recall[c]),
                "hit_rate": _mean(hits[c]),
            }
            for c in sorted(recall)
        },
    }
    if used:
        entry["mean_used_tokens"] = float(np.mean(used))
    return entry


def _category(request: Request) -> int:
    """The request's integer question category (``labels["category"]``)."""
    category = request.labels.get("category")
    if not isinstance(category, int) or isinstance(category, bool):
        raise request.error(
            f"an evaluation request needs an integer question category, got {category!r}",
            field="labels.category",
        )
    return category


def _latency_figures(latencies: Sequence[float]) -> dict[str, float | None]:
    """Packs per second (requests over the sum of their latencies) and p50/p95, in ms."""
    total_s = sum(latencies) / 1000.0
    return {
        "packs_per_s": len(latencies) / total_s if total_s > 0 else None,
        "p50_ms": float(np.percentile(latencies, 50)),
        "p95_ms": float(np.percentile(latencies, 95)),
    }


# ---------------------------------------------------------------------------
# the whole run


def run_locomo(
    path: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    budgets: Sequence[int] = DEFAULT_BUDGETS,
    rank: RankMethod = "learned",
    profile: str = "cl100k_base",
    *,
    progress: bool = False,
    compare: Sequence[RankMethod] = (),
    retrieval: RetrievalSettings | None = None,
    tuning: Sequence[str] = TUNING_CONVERSATIONS,
    loco: bool = False,
    manifests: ManifestForm = "parquet",
) -> dict[str, Any]:
    """Import LoCoMo, pack a context per question and budget, and report evidence recall.

    Writes, in ``out_dir``: ``items.parquet``
    (:func:`~cognoxium.app.locomo_dataset.load_locomo`), ``requests.jsonl``
    (:func:`~cognoxium.app.locomo_dataset.locomo_requests`, one canonical JSON
    object per line), the packs and the manifests in parts (``packs/``,
    ``manifests/`` and ``manifest_headers/``, or ``packs/`` and ``manifests/``
    in the ``jsonl`` form; see :func:`cognoxium.app.batch.run_batch`) and
    ``report.json`` (canonical JSON,
    sorted keys). All of them are committed in one step, as by
    :func:`~cognoxium.app.batch.run_batch`: ``out_dir`` becomes a link to a
    fresh version directory ``<out_dir>.<run id>``, so a reader sees every
    file of the previous run or every file of this one; a second run into
    the same ``out_dir`` is refused while one writes.

    Parameters
    ----------
    path
        The LoCoMo JSON file.
    out_dir
        Output directory: missing, empty, or written by an earlier run.
    budgets
        Token budgets; every question is packed once per budget.
    rank
        One of :func:`cognoxium.app.batch.batch_rank_methods`; the default,
        ``learned``, scores each turn with the shipped logistic model over
        ranking features (the ``hybrid-lineage`` fusion of BM25, embeddings,
        neighbour windows and lineage expansion, plus BM25 views, speaker,
        time and cost features; see :func:`cognoxium.app.batch.run_batch`).
        The shipped model was fitted on locomo7: for honest figures on that
        file use ``loco``.
    profile
        Token profile name.
    progress
        Show a progress bar when standard error is a terminal.
    compare
        Other rank methods to run on the same requests in the same run, for
        the report's ``compare`` section; their files go to
        ``out_dir/compare/<method>/``.
    retrieval
        Model, RRF constant and neighbour expansion of the retrieval rank
        methods (see :class:`cognoxium.retrieval.scope.RetrievalSettings`).
    tuning
        Conversations on which settings were chosen; the report's
        ``splits`` gives recall on them and on the others (held out) apart.
    loco
        Leave one conversation out for the ``learned`` method (as ``rank``
        or compared): each conversation's questions are ranked by a model
        fitted on the other conversations only
        (:func:`cognoxium.app.ranker.fit_fold_models`, written to
        ``<method folder>/models/<sample_id>.json``), instead of the shipped
        model, which has seen every conversation. The report's
        ``per_conversation`` then gives each conversation's recall.
    manifests
        How the manifests are stored: ``"parquet"`` or ``"jsonl"`` (see
        :mod:`cognoxium.packing.manifests`).

    Returns
    -------
    dict
        The report: ``source`` (file name and sha256), ``settings``,
        ``import`` (counts of conversations, sessions, turns, observations,
        summaries, questions, dropped evidence ids), ``batch``
        (:class:`~cognoxium.app.batch.BatchStats` figures), ``budgets``
        (:func:`evaluate`), ``splits`` (``{"tuning": ..., "held_out": ...}``,
        each ``{"conversations", "budgets"}``) and ``compare`` (per compared
        method: ``batch``, ``budgets`` and ``splits``).

    Raises
    ------
    RecordError
        If the file is not LoCoMo-shaped.
    PlanError
        If ``rank`` or a ``compare`` method is not one of
        :func:`~cognoxium.app.batch.batch_rank_methods`.
    OutputError
        If another run is writing ``out_dir``, or it is a non-empty
        directory or a link that no run wrote.
    """
    for method in (rank, *compare):
        check_rank_method(method)
    imported = read_locomo(path)
    conversations = imported.sample_ids
    run = _Run(
        path=path,
        items=imported.items(),
        requests=imported.requests(budgets),
        conversations=conversations,
        split={
            "tuning": [c for c in conversations if c in set(tuning)],
            "held_out": [c for c in conversations if c not in set(tuning)],
        },
        profile=profile,
        settings=retrieval if retrieval is not None else RetrievalSettings(),
        manifests=manifests,
        loco=loco,
        progress=progress,
    )
    counts = imported.counts
    with committed_output(out_dir) as out:
        _write_inputs(out, run.items, run.requests)
        report: dict[str, Any] = {
            "source": {"file": Path(path).name, "sha256": file_sha256(path)},
            "settings": {
                "budgets": list(budgets),
                "rank": rank,
                "profile": profile,
                "scope": "turns of the question's conversation",
                "retrieval": _retrieval_settings(run.settings, rank),
                "tuning_conversations": run.split["tuning"],
                "leave_one_conversation_out": loco,
            },
            "import": {
                "items": run.items.height,
                **{key: counts[key] for key in sorted(counts)},
            },
            **run.measured(rank, out),
            "compare": {
                method: run.measured(method, out / "compare" / method)
                for method in dict.fromkeys(compare)
                if method != rank
            },
        }
        with (out / "report.json").open("w", encoding="utf-8") as handle:
            handle.write(canonical_json(report))
            handle.write("\n")
    return report


def _write_inputs(out: Path, items: pl.DataFrame, requests: Sequence[Request]) -> None:
    """Write the run's ``items.parquet`` and ``requests.jsonl`` (canonical JSON lines)."""
    write_parquet(items, out / "items.parquet")
    with (out / "requests.jsonl").open("w", encoding="utf-8") as handle:
        for request in requests:
            handle.write(canonical_json(request.to_record()))
            handle.write("\n")


@dataclass(frozen=True)
class _Run:
    """One LoCoMo run's inputs and settings, shared by the rank method and those compared."""

    path: str | os.PathLike[str]
    items: pl.DataFrame
    requests: Sequence[Request]
    conversations: Sequence[str]
    split: dict[str, list[str]]
    profile: str
    settings: RetrievalSettings
    manifests: ManifestForm
    loco: bool
    progress: bool

    def measured(self, method: RankMethod, folder: Path) -> dict[str, Any]:
        """Pack every request with ``method`` into ``folder``; its batch, recall and splits."""
        if method == "learned" and self.loco:
            stats = _run_folds(
                self.path,
                self.items,
                self.requests,
                self.conversations,
                folder,
                self.profile,
                self.settings,
                self.manifests,
            )
        else:
            stats = run_batch(
                self.items,
                self.requests,
                out_dir=folder,
                options=PackOptions(profile=self.profile),
                rank=method,
                progress=self.progress,
                retrieval=self.settings,
                commit=False,  # committed with every other file of the run
                manifests=self.manifests,
                bodies=False,  # recall reads the ids
            )
        packs = scan_packs(folder).collect().to_dicts()
        return {
            "batch": stats.to_dict(),
            **evaluate(packs, self.requests, stats=stats),
            **_by_conversation(packs, self.requests, self.split, self.conversations),
        }


def _by_conversation(
    packs: list[dict[str, Any]],
    requests: Sequence[Request],
    split: dict[str, list[str]],
    conversations: Sequence[str],
) -> dict[str, Any]:
    """The report's ``splits`` (tuning and held out) and ``per_conversation`` figures."""

    def of(members: Collection[str]) -> list[Request]:
        return [r for r in requests if r.id.rsplit(":q", 1)[0] in members]

    return {
        "splits": {
            name: {"conversations": members, **evaluate(packs, of(members))}
            for name, members in split.items()
        },
        "per_conversation": {name: evaluate(packs, of((name,))) for name in conversations},
    }


def _retrieval_settings(settings: RetrievalSettings, rank: RankMethod) -> dict[str, Any]:
    """The report's ``settings.retrieval``: model, the fusion constant ``rank`` uses, neighbours."""
    return {
        "model": settings.model,
        "rrf_k": settings.fusion_k(rank) if rank in RRF_K else settings.rrf_k,
        "neighbours": settings.neighbours,
    }


def _run_folds(
    path: str | os.PathLike[str],
    items: pl.DataFrame,
    requests: Sequence[Request],
    conversations: Sequence[str],
    folder: Path,
    profile: str,
    settings: RetrievalSettings,
    form: ManifestForm,
) -> BatchStats:
    """Pack each conversation's requests with ``learned`` fitted on the other conversations.

    Writes ``folder/models/<sample_id>.json``, the per-fold outputs under
    ``folder/folds/<sample_id>/``, and the packs and the manifests (in
    ``form``) of all requests in request order in ``folder``, as part 0.
    """
    from cognoxium.app.ranker import fit_fold_models

    started = time.perf_counter()
    models = fit_fold_models(path, folder / "models", settings=settings, profile=profile)
    packs: dict[str, str] = {}
    manifests: dict[str, PackManifest] = {}
    latency: dict[str, float] = {}
    for name in conversations:
        mine = [r for r in requests if r.id.rsplit(":q", 1)[0] == name]
        if not mine:
            continue
        out = folder / "folds" / name
        stats = run_batch(
            items,
            mine,
            out_dir=out,
            options=PackOptions(profile=profile),
            rank="learned",
            retrieval=replace(settings, ranker=str(models[name])),
            commit=False,  # inside the run's directory, committed with it
            manifests=form,
            bodies=False,
        )
        pack_lines = [
            line
            for part in part_files(out / PACKS, ".jsonl")
            for line in part.read_text(encoding="utf-8").splitlines()
        ]
        for request, pack_line, manifest, ms in zip(
            mine, pack_lines, read_manifests(out), stats.latencies_ms, strict=True
        ):
            packs[request.id], manifests[request.id], latency[request.id] = (
                pack_line,
                manifest,
                ms,
            )
    with open_part(folder, form, 0) as (handle, writer):
        handle.writelines(packs[r.id] + "\n" for r in requests)
        for request in requests:
            writer.write(request.id, manifests[request.id])
    seconds = time.perf_counter() - started
    latencies = tuple(latency[r.id] for r in requests)
    return BatchStats(
        requests=len(requests),
        seconds=seconds,
        packs_per_s=len(requests) / seconds if seconds > 0 else 0.0,
        p50_ms=float(np.percentile(latencies, 50)) if latencies else 0.0,
        p95_ms=float(np.percentile(latencies, 95)) if latencies else 0.0,
        latencies_ms=latencies,
    )
