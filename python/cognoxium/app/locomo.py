"""The LoCoMo benchmark as context items, pack requests and an evidence-recall report.

LoCoMo (Maharana et al., "Evaluating Very Long-Term Conversational Memory of
LLM Agents", ACL 2024) holds long two-person conversations, split into dated
sessions, with questions whose ``evidence`` lists the dialog turns
(``D<session>:<turn>``) that answer them. Packing a context for each question
under a token budget and measuring how much evidence lands in the pack
(evidence recall) tests retrieval and packing together.

Mapping to items
----------------
Dialog turn (one item per turn)
    ``id`` ``"<sample_id>:<dia_id>"`` (``"conv-26:D1:3"``); ``role``
    ``"user"`` for ``speaker_a`` and ``"assistant"`` for ``speaker_b`` (the
    conversation has two human speakers; the first is cast as the user);
    ``text`` ``"<speaker>: <text>"``, plus ``" [shares an image: <caption>]"``
    when the turn has a ``blip_caption``; ``created_at`` the session's date
    (``"1:56 pm on 8 May, 2023"``, read as UTC) plus the turn's 0-based index
    in seconds, so the order of turns is total; ``sources`` the turn's own
    ``locomo://<sample_id>/<dia_id>`` (kind ``conversation_turn``) and, for
    each shared image url, ``{uri: img_url, kind: "image", title: caption}``;
    ``metadata`` ``{"conversation", "session", "speaker", "dia_id",
    "kind": "turn"}``.
Observation (derived)
    ``id`` ``"<sample_id>:S<session>:observation:<n>"`` (``n`` 1-based in file
    order within the session); ``role`` ``"memory"``; ``parents`` the
    qualified ids of its evidence turns; ``created_at`` the session time;
    ``metadata`` ``{"conversation", "session", "speaker",
    "kind": "observation"}``.
Session summary (derived)
    ``id`` ``"<sample_id>:S<session>:summary"``; ``role`` ``"memory"``;
    ``parents`` every turn of the session; ``metadata`` ``{"conversation",
    "session", "kind": "session_summary"}``.

Items are laid out per conversation and session: the session's turns, then
its observations, then its summary. Event summaries are not imported.

Evidence ids in the data are not all well formed: some hold several ids
(``"D8:6; D9:17"``), some a stray colon (``"D:11:26"``), some nothing usable
(``"D"``), and some point at turns that do not exist. They are split on
``;``, ``,`` and whitespace, normalised to ``D<session>:<turn>``, and ids that
cannot be parsed or name no turn are dropped, deterministically; the counts
go into the report.

Examples
--------
>>> parse_session_time("1:56 pm on 8 May, 2023")
datetime.datetime(2023, 5, 8, 13, 56, tzinfo=datetime.timezone.utc)
>>> normalize_evidence("D8:6; D:9:17, D", known={"D8:6", "D9:17"})
(['D8:6', 'D9:17'], 1, 0)
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from cognoxium.app._outputs import committed_output
from cognoxium.app._workers import open_part
from cognoxium.app.batch import RANK_METHODS, BatchStats, RankMethod, Request, run_batch
from cognoxium.exceptions import PlanError, RecordError
from cognoxium.items.io import write_parquet
from cognoxium.items.model import canonical_json
from cognoxium.items.schema import records_to_frame
from cognoxium.packing.manifests import (
    PACKS,
    ManifestForm,
    part_files,
    read_manifests,
    scan_packs,
)
from cognoxium.packing.packer import PackManifest
from cognoxium.retrieval.scope import RRF_K, RetrievalSettings

__all__ = [
    "ANSWERABLE_CATEGORIES",
    "CATEGORY_NAMES",
    "DEFAULT_BUDGETS",
    "TUNING_CONVERSATIONS",
    "evaluate",
    "file_sha256",
    "load_locomo",
    "locomo_requests",
    "normalize_evidence",
    "parse_session_time",
    "run_locomo",
]

DEFAULT_BUDGETS: tuple[int, ...] = (512, 1024, 2048, 4096)
"""Token budgets of a default LoCoMo run."""

TUNING_CONVERSATIONS: tuple[str, ...] = ("conv-26", "conv-30")
"""The conversations on which the default retrieval settings were chosen."""

CATEGORY_NAMES: dict[int, str] = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}
"""LoCoMo question categories."""

ANSWERABLE_CATEGORIES: frozenset[int] = frozenset({1, 2, 3, 4})
"""Categories whose questions have an answer in the conversation (5 is adversarial)."""

_COUNTS: tuple[str, ...] = (
    "conversations",
    "sessions",
    "turns",
    "turns_with_image",
    "observations",
    "session_summaries",
    "observation_evidence_malformed",
    "observation_evidence_missing",
    "questions",
    "questions_without_evidence",
    "question_evidence_malformed",
    "question_evidence_missing",
)
_SESSION_KEY = re.compile(r"session_(\d+)")
_OBSERVATION_KEY = re.compile(r"session_(\d+)_observation")
_SUMMARY_KEY = re.compile(r"session_(\d+)_summary")
_EVIDENCE_ID = re.compile(r"D:?(\d+):(\d+)")
_EVIDENCE_SPLIT = re.compile(r"[;,\s]+")
_SESSION_TIME = re.compile(
    r"\s*(\d{1,2}):(\d{2})\s*([ap])\.?m\.?\s+on\s+(\d{1,2})\s+([A-Za-z]+),?\s+(\d{4})\s*",
    re.IGNORECASE,
)
_MONTHS = {
    name: number
    for number, names in enumerate(
        [
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ],
        start=1,
    )
    for name in names
}


def parse_session_time(text: str) -> datetime:
    """Parse a LoCoMo session date such as ``"1:56 pm on 8 May, 2023"`` as UTC.

    Parameters
    ----------
    text
        ``"<h>:<mm> am|pm on <day> <Month>, <year>"``; English month names,
        full or abbreviated, any case.

    Returns
    -------
    datetime
        Timezone-aware, UTC.

    Raises
    ------
    ValueError
        If ``text`` does not have that form or names an impossible date.

    Examples
    --------
    >>> parse_session_time("12:09 am on 1 January, 2024").isoformat()
    '2024-01-01T00:09:00+00:00'
    """
    match = _SESSION_TIME.fullmatch(text)
    month = _MONTHS.get(match.group(5).lower()) if match else None
    if match is None or month is None:
        raise ValueError(f"not a LoCoMo date such as '1:56 pm on 8 May, 2023': {text!r}")
    hour, minute = int(match.group(1)), int(match.group(2))
    if not 1 <= hour <= 12:
        raise ValueError(f"hour must be 1..12 in a 12-hour time: {text!r}")
    hour = hour % 12 + (12 if match.group(3).lower() == "p" else 0)
    return datetime(int(match.group(6)), month, int(match.group(4)), hour, minute, tzinfo=UTC)


def normalize_evidence(raw: object, *, known: Iterable[str]) -> tuple[list[str], int, int]:
    """Split, normalise and check LoCoMo evidence ids.

    Parameters
    ----------
    raw
        One id, a string holding several (separated by ``;``, ``,`` or
        whitespace), or a list of such strings.
    known
        The dialog ids (``D<session>:<turn>``) of the conversation's turns.

    Returns
    -------
    ids : list of str
        The valid ids, normalised, in first-seen order, without duplicates.
    malformed : int
        Parts that could not be read as ``D<session>:<turn>``.
    missing : int
        Well-formed ids that name no turn of the conversation.

    Examples
    --------
    >>> normalize_evidence(["D1:3", "D01:3", "D2:9"], known={"D1:3"})
    (['D1:3'], 0, 1)
    """
    known = known if isinstance(known, (set, frozenset)) else set(known)
    parts: list[str] = []
    for value in raw if isinstance(raw, list) else [raw]:
        if not isinstance(value, str):
            parts.append("")
            continue
        parts.extend(p for p in _EVIDENCE_SPLIT.split(value.strip()) if p)
    ids: list[str] = []
    malformed = missing = 0
    for part in parts:
        match = _EVIDENCE_ID.fullmatch(part)
        if match is None:
            malformed += 1
            continue
        dia_id = f"D{int(match.group(1))}:{int(match.group(2))}"
        if dia_id not in known:
            missing += 1
        elif dia_id not in ids:
            ids.append(dia_id)
    return ids, malformed, missing


# ---------------------------------------------------------------------------
# import


@dataclass(slots=True)
class _Conversation:
    """One conversation's items, turn ids, last turn time and questions."""

    sample_id: str
    records: list[dict[str, Any]]
    dia_ids: set[str]
    latest: datetime
    qa: list[Any]


@dataclass(slots=True)
class _Import:
    conversations: list[_Conversation]
    source: str
    counts: Counter[str] = field(default_factory=Counter)


def _read_json(path: str | os.PathLike[str]) -> Any:
    try:
        with Path(path).open(encoding="utf-8") as handle:
            return json.load(handle)
    except OSError as exc:
        raise RecordError(
            f"cannot read the LoCoMo file: {exc.strerror}", source=str(path)
        ) from None
    except json.JSONDecodeError as exc:
        raise RecordError(
            f"invalid JSON: {exc.msg} at column {exc.colno}", source=str(path), line=exc.lineno
        ) from None


def _need(container: Mapping[str, Any], key: str, kind: type, where: str, source: str) -> Any:
    value = container.get(key)
    if not isinstance(value, kind) or (kind is str and not value):
        expected = {str: "a non-empty string", list: "a list", dict: "an object", int: "an integer"}
        raise RecordError(
            f"expected {expected.get(kind, kind.__name__)}, got {type(value).__name__}",
            source=source,
            field=f"{where}.{key}" if where else key,
        )
    return value


def _numbered(keys: Iterable[str], pattern: re.Pattern[str]) -> list[tuple[int, str]]:
    found = [(int(m.group(1)), key) for key in keys if (m := pattern.fullmatch(key))]
    return sorted(found)


@dataclass(slots=True)
class _Sample:
    """What importing one conversation has seen so far, and where it is, for errors."""

    sample_id: str
    source: str
    where: str
    speaker_a: str
    speaker_b: str
    counts: Counter[str]
    times: dict[int, datetime] = field(default_factory=dict)
    turns_of: dict[int, list[str]] = field(default_factory=dict)
    dia_ids: set[str] = field(default_factory=set)
    per_session: dict[int, list[dict[str, Any]]] = field(default_factory=dict)

    @property
    def cwhere(self) -> str:
        """The field path of the sample's ``conversation`` object."""
        return f"{self.where}.conversation"

    @property
    def roles(self) -> dict[str, str]:
        """Item role by speaker name: the first speaker is the user."""
        return {self.speaker_a: "user", self.speaker_b: "assistant"}


def _open_sample(
    sample: Any, index: int, source: str, counts: Counter[str]
) -> tuple[_Sample, dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Check a conversation's shape; return its state, conversation, observations, summaries."""
    where = f"[{index}]"
    if not isinstance(sample, dict):
        raise RecordError("a conversation must be a JSON object", source=source, field=where)
    sample_id: str = _need(sample, "sample_id", str, where, source)
    conv: dict[str, Any] = _need(sample, "conversation", dict, where, source)
    cwhere = f"{where}.conversation"
    speaker_a: str = _need(conv, "speaker_a", str, cwhere, source)
    speaker_b: str = _need(conv, "speaker_b", str, cwhere, source)
    observations: dict[str, Any] = sample.get("observation") or {}
    summaries: dict[str, Any] = sample.get("session_summary") or {}
    if not isinstance(observations, dict) or not isinstance(summaries, dict):
        raise RecordError(
            "observation and session_summary must be objects", source=source, field=where
        )
    state = _Sample(
        sample_id=sample_id,
        source=source,
        where=where,
        speaker_a=speaker_a,
        speaker_b=speaker_b,
        counts=counts,
    )
    return state, conv, observations, summaries


def _checked_turn(state: _Sample, turn: Any, twhere: str) -> tuple[str, str, str]:
    """Check one dialog turn; return its speaker, normalised dia_id and text."""
    source = state.source
    if not isinstance(turn, dict):
        raise RecordError("a turn must be a JSON object", source=source, field=twhere)
    speaker: str = _need(turn, "speaker", str, twhere, source)
    raw_id: str = _need(turn, "dia_id", str, twhere, source)
    text = turn.get("text")
    if not isinstance(text, str):
        raise RecordError("expected a string", source=source, field=f"{twhere}.text")
    if speaker not in state.roles:
        raise RecordError(
            f"speaker {speaker!r} is neither speaker_a ({state.speaker_a!r}) "
            f"nor speaker_b ({state.speaker_b!r})",
            source=source,
            field=f"{twhere}.speaker",
        )
    match = _EVIDENCE_ID.fullmatch(raw_id.strip())
    if match is None:
        raise RecordError(
            f"dia_id {raw_id!r} is not D<session>:<turn>",
            source=source,
            field=f"{twhere}.dia_id",
        )
    dia_id = f"D{int(match.group(1))}:{int(match.group(2))}"
    if dia_id in state.dia_ids:
        raise RecordError(
            f"duplicate dia_id {dia_id!r} in {state.sample_id}",
            source=source,
            field=f"{twhere}.dia_id",
        )
    return speaker, dia_id, text


def _turn_sources(
    sample_id: str, dia_id: str, turn: dict[str, Any], caption: str | None
) -> list[dict[str, Any]]:
    """The turn's own locomo:// source, then one image source per shared image url."""
    urls = turn.get("img_url") or []
    urls = [urls] if isinstance(urls, str) else urls
    sources: list[dict[str, Any]] = [
        {"uri": f"locomo://{sample_id}/{dia_id}", "kind": "conversation_turn"}
    ]
    sources.extend(
        {"uri": url, "kind": "image", "title": caption}
        for url in urls
        if isinstance(url, str) and url
    )
    return sources


def _turn_record(state: _Sample, turn: Any, number: int, key: str, position: int) -> dict[str, Any]:
    """The item record of the turn at ``position`` of session ``number``."""
    speaker, dia_id, text = _checked_turn(state, turn, f"{state.cwhere}.{key}[{position}]")
    state.dia_ids.add(dia_id)
    state.turns_of[number].append(dia_id)
    caption = turn.get("blip_caption")
    caption = caption if isinstance(caption, str) and caption.strip() else None
    body = f"{speaker}: {text}"
    if caption is not None:
        body += f" [shares an image: {caption}]"
        state.counts["turns_with_image"] += 1
    return {
        "id": f"{state.sample_id}:{dia_id}",
        "role": state.roles[speaker],
        "text": body,
        "created_at": state.times[number] + timedelta(seconds=position),
        "sources": _turn_sources(state.sample_id, dia_id, turn, caption),
        "metadata": {
            "conversation": state.sample_id,
            "session": number,
            "speaker": speaker,
            "dia_id": dia_id,
            "kind": "turn",
        },
    }


def _import_session(state: _Sample, conv: dict[str, Any], number: int, key: str) -> None:
    """Read session ``number``'s time and turns into ``state``."""
    turns = _need(conv, key, list, state.cwhere, state.source)
    stamp = _need(conv, f"{key}_date_time", str, state.cwhere, state.source)
    try:
        state.times[number] = parse_session_time(stamp)
    except ValueError as exc:
        raise RecordError(
            str(exc), source=state.source, field=f"{state.cwhere}.{key}_date_time"
        ) from None
    state.turns_of[number] = []
    records = [
        _turn_record(state, turn, number, key, position) for position, turn in enumerate(turns)
    ]
    state.per_session[number] = records
    state.counts["turns"] += len(records)


def _observation_record(
    state: _Sample, number: int, key: str, speaker: str, fact: list[Any], n: int
) -> dict[str, Any]:
    """The memory item of the ``n``-th observation of session ``number``."""
    parents, malformed, missing = normalize_evidence(fact[1], known=state.dia_ids)
    state.counts["observation_evidence_malformed"] += malformed
    state.counts["observation_evidence_missing"] += missing
    state.counts["observations"] += 1
    sample_id = state.sample_id
    return {
        "id": f"{sample_id}:S{number}:observation:{n}",
        "role": "memory",
        "text": fact[0],
        "created_at": state.times[number],
        "parents": [f"{sample_id}:{p}" for p in parents],
        "sources": [{"uri": f"locomo://{sample_id}/{key}", "kind": "observation"}],
        "metadata": {
            "conversation": sample_id,
            "session": number,
            "speaker": speaker,
            "kind": "observation",
        },
    }


def _import_session_observations(state: _Sample, number: int, key: str, by_speaker: Any) -> None:
    """Append session ``number``'s observations, speaker by speaker, in file order."""
    owhere = f"{state.where}.observation.{key}"
    if not isinstance(by_speaker, dict):
        raise RecordError("expected an object", source=state.source, field=owhere)
    n = 0
    for speaker, facts in by_speaker.items():
        if not isinstance(facts, list):
            raise RecordError("expected a list", source=state.source, field=f"{owhere}.{speaker}")
        for position, fact in enumerate(facts):
            if not (isinstance(fact, list) and len(fact) == 2 and isinstance(fact[0], str)):
                raise RecordError(
                    "expected [fact, dia_id or [dia_id, ...]]",
                    source=state.source,
                    field=f"{owhere}.{speaker}[{position}]",
                )
            n += 1
            state.per_session[number].append(
                _observation_record(state, number, key, speaker, fact, n)
            )


def _import_observations(state: _Sample, observations: dict[str, Any]) -> None:
    """Append every session's observations after its turns."""
    for number, key in _numbered(observations, _OBSERVATION_KEY):
        if number not in state.times:
            raise RecordError(
                f"no session {number} in {state.sample_id}",
                source=state.source,
                field=f"{state.where}.observation.{key}",
            )
        _import_session_observations(state, number, key, observations[key])


def _import_summaries(state: _Sample, summaries: dict[str, Any]) -> None:
    """Append every session's summary after its observations."""
    sample_id = state.sample_id
    for number, key in _numbered(summaries, _SUMMARY_KEY):
        swhere = f"{state.where}.session_summary.{key}"
        if number not in state.times:
            raise RecordError(
                f"no session {number} in {sample_id}", source=state.source, field=swhere
            )
        text = summaries[key]
        if not isinstance(text, str):
            raise RecordError("expected a string", source=state.source, field=swhere)
        state.per_session[number].append(
            {
                "id": f"{sample_id}:S{number}:summary",
                "role": "memory",
                "text": text,
                "created_at": state.times[number],
                "parents": [f"{sample_id}:{d}" for d in state.turns_of[number]],
                "sources": [{"uri": f"locomo://{sample_id}/{key}", "kind": "session_summary"}],
                "metadata": {
                    "conversation": sample_id,
                    "session": number,
                    "kind": "session_summary",
                },
            }
        )
        state.counts["session_summaries"] += 1


def _import_conversation(
    sample: Any, index: int, source: str, counts: Counter[str]
) -> _Conversation:
    state, conv, observations, summaries = _open_sample(sample, index, source, counts)
    for number, key in _numbered(conv, _SESSION_KEY):
        _import_session(state, conv, number, key)
    times, turns_of = state.times, state.turns_of
    if not times:
        raise RecordError(f"{state.sample_id} has no sessions", source=source, field=state.cwhere)
    _import_observations(state, observations)
    _import_summaries(state, summaries)
    qa = sample.get("qa") or []
    if not isinstance(qa, list):
        raise RecordError("expected a list", source=source, field=f"{state.where}.qa")
    latest = max(times[n] + timedelta(seconds=max(len(turns_of[n]) - 1, 0)) for n in times)
    counts["conversations"] += 1
    counts["sessions"] += len(times)
    per_session = state.per_session
    return _Conversation(
        sample_id=state.sample_id,
        records=[r for number in sorted(per_session) for r in per_session[number]],
        dia_ids=state.dia_ids,
        latest=latest,
        qa=qa,
    )


def _import(data: Any, source: str) -> _Import:
    if not isinstance(data, list):
        raise RecordError("expected a JSON list of conversations", source=source)
    counts: Counter[str] = Counter(dict.fromkeys(_COUNTS, 0))
    conversations = [
        _import_conversation(sample, index, source, counts) for index, sample in enumerate(data)
    ]
    seen: set[str] = set()
    for conv in conversations:
        if conv.sample_id in seen:
            raise RecordError(
                f"duplicate sample_id {conv.sample_id!r}", source=source, field="sample_id"
            )
        seen.add(conv.sample_id)
    return _Import(conversations=conversations, source=source, counts=counts)


def _loaded(data: str | os.PathLike[str] | Sequence[Any]) -> _Import:
    if isinstance(data, str | os.PathLike):
        return _import(_read_json(data), str(data))
    return _import(list(data), "<locomo data>")


def load_locomo(path: str | os.PathLike[str]) -> pl.DataFrame:
    """Read a LoCoMo JSON file as context items (see the module docstring for the mapping).

    Parameters
    ----------
    path
        The LoCoMo JSON file (a list of conversations).

    Returns
    -------
    polars.DataFrame
        Items of the canonical schema: per conversation and session, its
        turns in order, then its observations, then its summary.

    Raises
    ------
    RecordError
        If the file is not JSON or not LoCoMo-shaped, naming the file and the
        field path (``[index].conversation.session_3[4].speaker``).

    Examples
    --------
    >>> import json, tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "tiny.json"
    >>> _ = p.write_text(json.dumps([{"sample_id": "c1", "conversation": {
    ...     "speaker_a": "Ann", "speaker_b": "Bo",
    ...     "session_1_date_time": "9:00 am on 2 March, 2024",
    ...     "session_1": [{"speaker": "Ann", "dia_id": "D1:1", "text": "Hi Bo!"},
    ...                   {"speaker": "Bo", "dia_id": "D1:2", "text": "Hi!"}]}}]))
    >>> load_locomo(p).select("id", "role", "text").rows()
    [('c1:D1:1', 'user', 'Ann: Hi Bo!'), ('c1:D1:2', 'assistant', 'Bo: Hi!')]
    """
    return _items_frame(_loaded(path))


def _items_frame(imported: _Import) -> pl.DataFrame:
    records = (r for conv in imported.conversations for r in conv.records)
    return records_to_frame(records, source="<locomo import>")


def _sql_string(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _requests(imported: _Import, budgets: Sequence[int]) -> list[Request]:
    counts = imported.counts
    requests: list[Request] = []
    questions: list[tuple[_Conversation, int, Any, list[str], int]] = []
    for conv in imported.conversations:
        for index, qa in enumerate(conv.qa):
            qwhere = f"{conv.sample_id}.qa[{index}]"
            if not isinstance(qa, dict) or not isinstance(qa.get("question"), str):
                raise RecordError(
                    "a question needs a string 'question'", source=imported.source, field=qwhere
                )
            category = qa.get("category")
            if not isinstance(category, int) or isinstance(category, bool):
                raise RecordError(
                    "expected an integer", source=imported.source, field=f"{qwhere}.category"
                )
            evidence, malformed, missing = normalize_evidence(
                qa.get("evidence") or [], known=conv.dia_ids
            )
            counts["question_evidence_malformed"] += malformed
            counts["question_evidence_missing"] += missing
            counts["questions"] += 1
            if not evidence:
                counts["questions_without_evidence"] += 1
            questions.append(
                (conv, index, qa["question"], [f"{conv.sample_id}:{e}" for e in evidence], category)
            )
    for budget in budgets:
        for conv, index, question, evidence, category in questions:
            requests.append(
                Request.model_validate(
                    {
                        "id": f"{conv.sample_id}:q{index}:b{budget}",
                        "budget": budget,
                        "query": question,
                        "where": f"metadata.conversation = {_sql_string(conv.sample_id)} "
                        "AND metadata.kind = 'turn'",
                        "as_of": conv.latest,
                        "evidence": evidence,
                        "labels": {"category": category},
                    }
                )
            )
    return requests


def locomo_requests(
    data: str | os.PathLike[str] | Sequence[Any], budgets: Sequence[int] = DEFAULT_BUDGETS
) -> list[Request]:
    """Build one pack request per LoCoMo question and token budget.

    Parameters
    ----------
    data
        The LoCoMo JSON file, or its parsed content (a list of conversations).
    budgets
        Token budgets, each >= 0.

    Returns
    -------
    list of Request
        Budget-major, then conversation and question order. Each request has
        ``id`` ``"<sample_id>:q<index>:b<budget>"`` (``index`` 0-based in the
        conversation's ``qa`` list), the question as ``query``, the scope
        ``where`` = ``"metadata.conversation = '<sample_id>' AND
        metadata.kind = 'turn'"`` (derived items are out of scope), ``as_of``
        the conversation's latest turn time (deterministic), ``evidence``
        (the qualified ids of the valid evidence turns, normalised, possibly
        empty) and ``labels`` ``{"category": <1 to 5>}``.

    Raises
    ------
    RecordError
        If the data is not LoCoMo-shaped.

    Examples
    --------
    >>> data = [{"sample_id": "c1", "conversation": {
    ...     "speaker_a": "Ann", "speaker_b": "Bo",
    ...     "session_1_date_time": "9:00 am on 2 March, 2024",
    ...     "session_1": [{"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a cat."}]},
    ...     "qa": [{"question": "What did Ann adopt?", "answer": "a cat",
    ...             "evidence": ["D1:1", "D7:7"], "category": 4}]}]
    >>> [(r.id, r.evidence, r.labels) for r in locomo_requests(data, [256])]
    [('c1:q0:b256', ['c1:D1:1'], {'category': 4})]
    """
    return _requests(_loaded(data), budgets)


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
        the integer ``labels["category"]`` (see :func:`locomo_requests`).
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
        recall: dict[int, list[float]] = {}
        hits: dict[int, list[float]] = {}
        used: list[int] = []
        excluded = 0
        for position in positions:
            request = requests[position]
            category = request.labels.get("category")
            if not isinstance(category, int) or isinstance(category, bool):
                raise request.error(
                    f"an evaluation request needs an integer question category, got {category!r}",
                    field="labels.category",
                )
            packed = by_id.get(request.id)
            if packed is None:
                raise request.error("has no pack", field="id")
            if "used_tokens" in packed:
                used.append(int(packed["used_tokens"]))
            evidence = set(request.evidence)
            if not evidence:
                excluded += 1
                continue
            found = len(evidence.intersection(packed["ids"]))
            recall.setdefault(category, []).append(found / len(evidence))
            hits.setdefault(category, []).append(1.0 if found == len(evidence) else 0.0)
        answerable = [c for c in recall if c in ANSWERABLE_CATEGORIES]
        entry: dict[str, Any] = {
            "questions": len(positions),
            "evaluated": len(positions) - excluded,
            "excluded_no_evidence": excluded,
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
        if stats is not None:
            lat = [latencies[p] for p in positions]
            total_s = sum(lat) / 1000.0
            entry["packs_per_s"] = len(lat) / total_s if total_s > 0 else None
            entry["p50_ms"] = float(np.percentile(lat, 50))
            entry["p95_ms"] = float(np.percentile(lat, 95))
        report[str(budget)] = entry
    return {"budgets": report}


# ---------------------------------------------------------------------------
# the whole run


def file_sha256(path: str | os.PathLike[str]) -> str:
    """The SHA-256 of a file's bytes, as 64 hex digits (read in blocks, not whole)."""
    with Path(path).open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


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

    Writes, in ``out_dir``: ``items.parquet`` (:func:`load_locomo`),
    ``requests.jsonl`` (:func:`locomo_requests`, one canonical JSON object per
    line), the packs and the manifests in parts (``packs/``, ``manifests/``
    and ``manifest_headers/``, or ``packs/`` and ``manifests/`` in the
    ``jsonl`` form; see :func:`cognoxium.app.batch.run_batch`) and
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
        One of :data:`cognoxium.app.batch.RANK_METHODS`; the default,
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
        :data:`~cognoxium.app.batch.RANK_METHODS`.
    OutputError
        If another run is writing ``out_dir``, or it is a non-empty
        directory or a link that no run wrote.
    """
    for method in (rank, *compare):
        if method not in RANK_METHODS:
            raise PlanError(f"unknown rank method {method!r}; use one of {list(RANK_METHODS)}")
    imported = _loaded(path)
    items = _items_frame(imported)
    requests = _requests(imported, budgets)
    settings = retrieval if retrieval is not None else RetrievalSettings()
    conversations = [conv.sample_id for conv in imported.conversations]
    split = {
        "tuning": [c for c in conversations if c in set(tuning)],
        "held_out": [c for c in conversations if c not in set(tuning)],
    }

    def measured(method: RankMethod, folder: Path) -> dict[str, Any]:
        if method == "learned" and loco:
            stats = _run_folds(
                path, items, requests, conversations, folder, profile, settings, manifests
            )
        else:
            stats = run_batch(
                items,
                requests,
                out_dir=folder,
                profile=profile,
                rank=method,
                progress=progress,
                retrieval=settings,
                commit=False,  # committed with every other file of the run, below
                manifests=manifests,
            )
        packs = scan_packs(folder).collect().to_dicts()
        splits = {
            name: {
                "conversations": members,
                **evaluate(packs, [r for r in requests if r.id.rsplit(":q", 1)[0] in members]),
            }
            for name, members in split.items()
        }
        per_conversation = {
            name: evaluate(packs, [r for r in requests if r.id.rsplit(":q", 1)[0] == name])
            for name in conversations
        }
        return {
            "batch": stats.to_dict(),
            **evaluate(packs, requests, stats=stats),
            "splits": splits,
            "per_conversation": per_conversation,
        }

    counts = imported.counts
    with committed_output(out_dir) as out:
        write_parquet(items, out / "items.parquet")
        with (out / "requests.jsonl").open("w", encoding="utf-8") as handle:
            for request in requests:
                handle.write(canonical_json(request.to_record()))
                handle.write("\n")
        report: dict[str, Any] = {
            "source": {"file": Path(path).name, "sha256": file_sha256(path)},
            "settings": {
                "budgets": list(budgets),
                "rank": rank,
                "profile": profile,
                "scope": "turns of the question's conversation",
                "retrieval": {
                    "model": settings.model,
                    "rrf_k": settings.fusion_k(rank) if rank in RRF_K else settings.rrf_k,
                    "neighbours": settings.neighbours,
                },
                "tuning_conversations": split["tuning"],
                "leave_one_conversation_out": loco,
            },
            "import": {
                "items": items.height,
                **{key: counts[key] for key in sorted(counts)},
            },
            **measured(rank, out),
            "compare": {
                method: measured(method, out / "compare" / method)
                for method in dict.fromkeys(compare)
                if method != rank
            },
        }
        with (out / "report.json").open("w", encoding="utf-8") as handle:
            handle.write(canonical_json(report))
            handle.write("\n")
    return report


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
            profile=profile,
            rank="learned",
            retrieval=replace(settings, ranker=str(models[name])),
            commit=False,  # inside the run's directory, committed with it
            manifests=form,
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
