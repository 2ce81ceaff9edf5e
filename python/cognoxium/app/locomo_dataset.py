"""The LoCoMo dataset read as context items and pack requests.

LoCoMo (Maharana et al., "Evaluating Very Long-Term Conversational Memory of
LLM Agents", ACL 2024) holds long two-person conversations, split into dated
sessions, with questions whose ``evidence`` lists the dialog turns
(``D<session>:<turn>``) that answer them. This module reads the JSON file,
imports the conversations as items and the questions as pack requests, and
maps the evidence ids to item ids. :mod:`cognoxium.app.locomo` packs the
requests and measures evidence recall; :mod:`cognoxium.app.ranker` fits the
learned ranker on the same items and requests.

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
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl

from cognoxium.app.batch import Request
from cognoxium.exceptions import RecordError
from cognoxium.items._checks import invalid_json
from cognoxium.items.records import records_to_frame

__all__ = [
    "ANSWERABLE_CATEGORIES",
    "CATEGORY_NAMES",
    "DEFAULT_BUDGETS",
    "LocomoData",
    "file_sha256",
    "load_locomo",
    "locomo_requests",
    "normalize_evidence",
    "parse_session_time",
    "read_locomo",
]

DEFAULT_BUDGETS: tuple[int, ...] = (512, 1024, 2048, 4096)
"""Token budgets of a default LoCoMo run."""

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

_QUESTION_COUNTS: tuple[str, ...] = (
    "questions",
    "questions_without_evidence",
    "question_evidence_malformed",
    "question_evidence_missing",
)
# What an import counts; the question counts are set when the requests are built.
_COUNTS: tuple[str, ...] = (
    "conversations",
    "sessions",
    "turns",
    "turns_with_image",
    "observations",
    "session_summaries",
    "observation_evidence_malformed",
    "observation_evidence_missing",
    *_QUESTION_COUNTS,
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
class LocomoData:
    """A LoCoMo file, read and checked, ready to become items and pack requests.

    Made by :func:`read_locomo`; one read serves both :meth:`items` and
    :meth:`requests`.

    Attributes
    ----------
    conversations
        The conversations in file order, each with its item records, its
        turn ids, its latest turn time and its questions (unchecked until
        :meth:`requests`).
    source
        The file read, or ``"<locomo data>"`` for parsed content; errors name it.
    counts
        What the import saw: conversations, sessions, turns (and those with
        an image), observations, session summaries, and the evidence ids of
        observations dropped as malformed or missing; :meth:`requests` adds
        the questions, those without valid evidence, and their dropped
        evidence ids.
    """

    conversations: list[_Conversation]
    source: str
    counts: Counter[str] = field(default_factory=Counter)

    @property
    def sample_ids(self) -> list[str]:
        """The conversations' ``sample_id`` values, in file order."""
        return [conv.sample_id for conv in self.conversations]

    def items(self) -> pl.DataFrame:
        """The context items (see the module docstring for the mapping).

        Returns
        -------
        polars.DataFrame
            Items of the canonical schema: per conversation and session, its
            turns in order, then its observations, then its summary.
        """
        records = (r for conv in self.conversations for r in conv.records)
        return records_to_frame(records, source="<locomo import>")

    def requests(self, budgets: Sequence[int] = DEFAULT_BUDGETS) -> list[Request]:
        """One pack request per question and token budget, as :func:`locomo_requests` builds.

        Sets the question counts of :attr:`counts` (calling it again sets
        the same values).

        Raises
        ------
        RecordError
            If a question is not LoCoMo-shaped, naming the field.
        """
        return _requests(self, budgets)


def _read_json(path: str | os.PathLike[str]) -> Any:
    try:
        with Path(path).open(encoding="utf-8") as handle:
            return json.load(handle)
    except OSError as exc:
        raise RecordError(
            f"cannot read the LoCoMo file: {exc.strerror}", source=str(path)
        ) from None
    except json.JSONDecodeError as exc:
        raise RecordError(invalid_json(exc), source=str(path), line=exc.lineno) from None


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


def _import(data: Any, source: str) -> LocomoData:
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
    return LocomoData(conversations=conversations, source=source, counts=counts)


def read_locomo(data: str | os.PathLike[str] | Sequence[Any]) -> LocomoData:
    """Read and check a LoCoMo file, or its parsed content, once for items and requests.

    Parameters
    ----------
    data
        The LoCoMo JSON file, or its parsed content (a list of conversations).

    Returns
    -------
    LocomoData
        The conversations with their item records and questions, and the
        import counts.

    Raises
    ------
    RecordError
        If the file is not JSON or the data not LoCoMo-shaped, naming the
        file and the field path (``[index].conversation.session_3[4].speaker``).

    Examples
    --------
    >>> data = read_locomo([{"sample_id": "c1", "conversation": {
    ...     "speaker_a": "Ann", "speaker_b": "Bo",
    ...     "session_1_date_time": "9:00 am on 2 March, 2024",
    ...     "session_1": [{"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a cat."}]},
    ...     "qa": [{"question": "What did Ann adopt?", "evidence": ["D1:1"], "category": 4}]}])
    >>> data.sample_ids, data.items().height, [r.id for r in data.requests([256, 512])]
    (['c1'], 1, ['c1:q0:b256', 'c1:q0:b512'])
    >>> data.counts["turns"], data.counts["questions"]
    (1, 1)
    """
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
    return read_locomo(path).items()


def _sql_string(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _requests(imported: LocomoData, budgets: Sequence[int]) -> list[Request]:
    counts: Counter[str] = Counter(dict.fromkeys(_QUESTION_COUNTS, 0))
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
    for key in _QUESTION_COUNTS:  # set, not added to: a second call counts the same
        imported.counts[key] = counts[key]
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
    return read_locomo(data).requests(budgets)


def file_sha256(path: str | os.PathLike[str]) -> str:
    """The SHA-256 of a file's bytes, as 64 hex digits (read in blocks, not whole)."""
    with Path(path).open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()
