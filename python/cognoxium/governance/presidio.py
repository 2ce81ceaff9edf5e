"""Microsoft Presidio's analyzer as a redaction recogniser set, offline.

:class:`PresidioRecognisers` runs Presidio's ``AnalyzerEngine``
(``presidio-analyzer``) and hands its results to the redaction machinery of
:mod:`cognoxium.governance.redaction` as a :class:`~cognoxium.governance.redaction.RecogniserSet`:
the same styles, the same per-type counts in the ``redactions`` column and
the manifest, the same overlap rule (the longest span wins), the same fixed
point, the same ``redact`` lineage edge, and Json string values redacted with
their keys kept. Presidio's entity types are mapped to this package's type
names (:data:`ENTITY_TYPES`: ``EMAIL_ADDRESS`` is ``EMAIL``, ...).

By default the analyzer runs fully offline: its NLP engine is a blank spaCy
pipeline (``spacy.blank(language)``: a tokenizer, no trained model, nothing to
download), and the e-mail recogniser checks domains against the public
suffix list snapshot bundled with ``tldextract`` instead of fetching the list.
Presidio's pattern recognisers (payment cards, e-mail addresses, phone
numbers, IBAN, IP and MAC addresses, crypto wallets, US SSN, UK NHS numbers,
...) work without NER. Named-entity types (``PERSON``, ``LOCATION``,
``ORGANIZATION``, ``NRP``) need a trained NER model and are never found this
way; a blank pipeline also has no lemmas, so Presidio's context words
("card", "phone", ...) do not raise scores. Pass an ``AnalyzerEngine`` built
on an installed spaCy model as ``analyzer=`` to get them.

Presidio is an optional dependency: ``pip install 'cognoxium-engine[presidio]'``.
Without it, :class:`PresidioRecognisers` raises
:class:`~cognoxium.exceptions.DependencyError` naming that extra.

Examples
--------
>>> import pytest; _ = pytest.importorskip("presidio_analyzer")
>>> from cognoxium import CognitionFrame
>>> cf = CognitionFrame([{"id": "a", "role": "user",
...                       "text": "Amex 3782 822463 10005, mail ana.example@example.org"}])
>>> out = cf.redact(recognisers=PresidioRecognisers()).collect()
>>> out.select("text", "redactions").row(0)
('Amex [CREDIT_CARD], mail [EMAIL]', '{"CREDIT_CARD":1,"EMAIL":1}')
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import re
import threading
from collections.abc import Mapping, Sequence
from importlib import metadata
from types import ModuleType
from typing import Any

from cognoxium._distribution import install_command
from cognoxium.exceptions import DependencyError, PlanError
from cognoxium.governance.redaction import Span
from cognoxium.items.model import canonical_json

__all__ = ["DEFAULT_ENTITIES", "ENTITY_TYPES", "PresidioRecognisers"]

DEFAULT_ENTITIES: tuple[str, ...] = (
    "CREDIT_CARD",
    "CRYPTO",
    "EMAIL_ADDRESS",
    "IBAN_CODE",
    "IP_ADDRESS",
    "MAC_ADDRESS",
    "PHONE_NUMBER",
    "UK_NHS",
    "US_SSN",
)
"""The Presidio entity types looked for by default.

Pattern recognisers with a checksum or a distinctive format, all found
without NER: payment cards (Luhn), Bitcoin addresses (Base58Check,
Bech32), e-mail addresses, IBAN (mod-97), IPv4 and IPv6 addresses, MAC
addresses, phone numbers (``phonenumbers``), UK NHS numbers (mod-11) and US
SSN. Pass ``entities=None`` for every type the analyzer supports, including
low-precision ones (``US_DRIVER_LICENSE``, ``US_BANK_NUMBER``, ``DATE_TIME``,
``URL``) whose matches mostly fall under the score threshold or are not
personal data.
"""

ENTITY_TYPES: Mapping[str, str] = {
    "EMAIL_ADDRESS": "EMAIL",
    "IBAN_CODE": "IBAN",
    "PHONE_NUMBER": "PHONE",
}
"""Presidio entity types renamed to this package's redaction types.

``CREDIT_CARD``, ``IP_ADDRESS`` and ``US_SSN`` already share the name of
:data:`cognoxium.governance.redaction.TYPES`; every other entity keeps its Presidio name
(``CRYPTO``, ``MAC_ADDRESS``, ``UK_NHS``, ...).
"""

_EXTRA = "presidio"
_TYPE_NAME = re.compile(r"[A-Z][A-Z0-9_]*")
_CACHE_SIZE = 4096
"""Most texts whose spans one recogniser set remembers (first in, first out)."""


def _require(module: str) -> ModuleType:
    """Import a module of the ``presidio`` extra, or say how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise DependencyError(
            f"{module} is not installed ({exc}); Presidio redaction needs the {_EXTRA!r} "
            f"extra: {install_command(_EXTRA)}"
        ) from exc


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "unknown"


@functools.lru_cache(maxsize=8)
def _blank_analyzer(language: str) -> Any:
    """A Presidio ``AnalyzerEngine`` on ``spacy.blank(language)`` that never reaches the network.

    One per language per process: building the registry takes a fraction of
    a second, analysing a text a millisecond or two.
    """
    spacy = _require("spacy")
    presidio = _require("presidio_analyzer")
    nlp_engines = _require("presidio_analyzer.nlp_engine")
    predefined = _require("presidio_analyzer.predefined_recognizers")
    tldextract = _require("tldextract")
    try:
        nlp = spacy.blank(language)
    except (ImportError, KeyError, ValueError) as exc:
        raise PlanError(
            f"PresidioRecognisers: spaCy has no language {language!r} ({exc}); "
            "use an ISO 639-1 code that spaCy supports, such as 'en', 'de' or 'xx'"
        ) from None
    engine = nlp_engines.SpacyNlpEngine(
        models=[{"lang_code": language, "model_name": f"blank:{language}"}]
    )
    # A loaded engine: AnalyzerEngine does not call load(), which would try to
    # download a trained model named in `models`.
    engine.nlp = {language: nlp}
    registry = presidio.RecognizerRegistry(supported_languages=[language])
    registry.load_predefined_recognizers(languages=[language], nlp_engine=engine)
    # tldextract.extract fetches the public suffix list over HTTP on first use; an
    # extractor without list URLs and without a cache reads the snapshot it ships.
    suffixes = tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)
    for recogniser in registry.recognizers:
        if isinstance(recogniser, predefined.EmailRecognizer):
            recogniser.validate_result = functools.partial(_has_domain, suffixes)
    return presidio.AnalyzerEngine(
        registry=registry, nlp_engine=engine, supported_languages=[language]
    )


def _has_domain(extract: Any, address: str) -> bool:
    """Presidio's e-mail check (a fully qualified domain name), with an offline extractor."""
    return bool(extract(address).fqdn)


class PresidioRecognisers:
    """Presidio's analyzer as a :class:`~cognoxium.governance.redaction.RecogniserSet`.

    Pass it as ``recognisers=`` to :meth:`cognoxium.CognitionFrame.redact`,
    :func:`~cognoxium.governance.redaction.redact_text`, :func:`~cognoxium.governance.redaction.redact_json`
    or :func:`~cognoxium.governance.redaction.redact_frame`: alone, or next to the
    built-in recognisers (``[*RECOGNISERS, PresidioRecognisers()]``, where
    equally long overlapping spans go to the one listed first).

    Parameters
    ----------
    language
        The language code passed to Presidio (``"en"``); it selects Presidio's
        recognisers and the blank spaCy pipeline.
    entities
        The Presidio entity types to look for (:data:`DEFAULT_ENTITIES` by
        default); ``None`` for every type the analyzer supports in ``language``.
    score_threshold
        The least Presidio score (0 to 1) of a kept result. The default 0.4
        keeps phone numbers, which Presidio scores 0.4 when no lemma context
        raises them, and drops its weakest guesses (driver licence and bank
        account numbers at 0.01 to 0.05).
    type_map
        Extra or different renamings of Presidio entity types to redaction
        types, applied over :data:`ENTITY_TYPES`; a type name is upper case
        (``[A-Z][A-Z0-9_]*``).
    analyzer
        A ready ``presidio_analyzer.AnalyzerEngine`` to use instead of the
        offline one, for example on an installed spaCy model with NER. It is
        used as it is: whether it reaches the network is up to its recognisers.

    Attributes
    ----------
    types : tuple of str
        The redaction types it can report, after renaming, sorted.
    label : str
        A short description, shown by :meth:`~cognoxium.CognitionFrame.explain`.
    fingerprint : str
        SHA-256 hex of the configuration, the Presidio and spaCy versions and
        the analyzer's recogniser names: equal fingerprints find equal spans.

    Raises
    ------
    DependencyError
        If ``presidio-analyzer`` or ``spacy`` is not installed (``pip install
        'cognoxium-engine[presidio]'``).
    PlanError
        On an empty language, entities that are empty or not upper-case
        names, a threshold outside [0, 1], a bad type name, or an
        ``analyzer`` without ``analyze``. Entities the analyzer does not
        support and languages spaCy does not know are reported when the set
        is first used (building a frame's ``redact`` step uses it).

    Notes
    -----
    Presidio analyses one text at a time in Python, so a frame's distinct
    texts are each analysed once per pass of the fixed point (the last pass
    confirms that nothing is left); the spans of the last 4096 texts are kept,
    so the rows that :func:`~cognoxium.governance.redaction.redact_frame` found are not
    analysed twice. Results of one text are given longest first where they
    start together, then by score, so a span Presidio reports under two
    types (``078-05-1121``: ``US_SSN`` 0.5, ``PHONE_NUMBER`` 0.4) goes to the
    higher score.

    Examples
    --------
    >>> import pytest; _ = pytest.importorskip("presidio_analyzer")
    >>> from cognoxium.governance.redaction import redact_text
    >>> presidio = PresidioRecognisers()
    >>> presidio.types
    ('CREDIT_CARD', 'CRYPTO', 'EMAIL', 'IBAN', 'IP_ADDRESS', 'MAC_ADDRESS', 'PHONE', 'UK_NHS', 'US_SSN')
    >>> redact_text("IBAN DE89 3704 0044 0532 0130 00, ip 192.0.2.10", recognisers=presidio)
    ('IBAN [IBAN], ip [IP_ADDRESS]', {'IBAN': 1, 'IP_ADDRESS': 1})
    >>> redact_text("tel +44 20 7946 0958", style="hash", key=b"k", recognisers=presidio)[0]
    'tel [PHONE:...]'
    """  # noqa: E501

    __slots__ = (
        "_analyzer",
        "_cache",
        "_entities",
        "_language",
        "_lock",
        "_rename",
        "_threshold",
        "_types",
    )

    def __init__(
        self,
        *,
        language: str = "en",
        entities: Sequence[str] | None = DEFAULT_ENTITIES,
        score_threshold: float = 0.4,
        type_map: Mapping[str, str] | None = None,
        analyzer: Any = None,
    ) -> None:
        _require("presidio_analyzer")
        _require("spacy")
        if not isinstance(language, str) or not language.strip():
            raise PlanError(
                f"PresidioRecognisers: language must be a language code, got {language!r}"
            )
        if entities is not None:
            if isinstance(entities, str):
                entities = (entities,)
            entities = tuple(dict.fromkeys(entities))
            bad = [e for e in entities if not isinstance(e, str) or not _TYPE_NAME.fullmatch(e)]
            if not entities or bad:
                raise PlanError(
                    "PresidioRecognisers: entities must be Presidio entity types such as "
                    f"'EMAIL_ADDRESS' (or None for all), got {list(entities)!r}"
                )
        if (
            isinstance(score_threshold, bool)
            or not isinstance(score_threshold, int | float)
            or not 0.0 <= score_threshold <= 1.0
        ):
            raise PlanError(
                f"PresidioRecognisers: score_threshold must be in [0, 1], got {score_threshold!r}"
            )
        rename = dict(ENTITY_TYPES)
        for source, target in (type_map or {}).items():
            if not isinstance(target, str) or not _TYPE_NAME.fullmatch(target):
                raise PlanError(
                    f"PresidioRecognisers: type_map[{source!r}] = {target!r} is not an "
                    "upper-case type name ([A-Z][A-Z0-9_]*)"
                )
            rename[source] = target
        if analyzer is not None and not callable(getattr(analyzer, "analyze", None)):
            raise PlanError(
                "PresidioRecognisers: analyzer must be a presidio_analyzer.AnalyzerEngine, "
                f"got {type(analyzer).__name__}"
            )
        self._language = language
        self._entities: tuple[str, ...] | None = entities
        self._threshold = float(score_threshold)
        self._rename = tuple(sorted(rename.items()))
        self._analyzer = analyzer
        self._types: tuple[str, ...] | None = None
        self._cache: dict[str, tuple[Span, ...]] = {}
        self._lock = threading.Lock()

    # -- identity -----------------------------------------------------------

    def _key(self) -> tuple[Any, ...]:
        return (self._language, self._entities, self._threshold, self._rename, id(self._analyzer))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PresidioRecognisers):
            return NotImplemented
        return self._key() == other._key() and self._analyzer is other._analyzer

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        entities = "all" if self._entities is None else list(self._entities)
        own = "" if self._analyzer is None else ", analyzer=<custom>"
        return (
            f"PresidioRecognisers(language={self._language!r}, entities={entities}, "
            f"score_threshold={self._threshold:g}{own})"
        )

    # -- RecogniserSet ------------------------------------------------------

    @property
    def analyzer(self) -> Any:
        """The ``presidio_analyzer.AnalyzerEngine`` in use (built on first access)."""
        if self._analyzer is None:
            return _blank_analyzer(self._language)
        return self._analyzer

    def _entity_list(self) -> tuple[str, ...]:
        """The entities to look for, checked against what the analyzer supports."""
        try:
            supported = sorted(self.analyzer.get_supported_entities(language=self._language))
        except ValueError as exc:
            raise PlanError(f"PresidioRecognisers: {exc}") from None
        if self._entities is None:
            return tuple(supported)
        unknown = [e for e in self._entities if e not in supported]
        if unknown:
            raise PlanError(
                f"PresidioRecognisers: the analyzer has no recogniser for {', '.join(unknown)} "
                f"in language {self._language!r}; supported: {', '.join(supported)}"
            )
        return self._entities

    @property
    def types(self) -> tuple[str, ...]:
        """The redaction types it can report: the entities after renaming, sorted."""
        if self._types is None:
            rename = dict(self._rename)
            self._types = tuple(sorted({rename.get(e, e) for e in self._entity_list()}))
        return self._types

    @property
    def label(self) -> str:
        """A short description: ``Presidio analyzer (en, score >= 0.4)``."""
        return f"Presidio analyzer ({self._language}, score >= {self._threshold:g})"

    @property
    def fingerprint(self) -> str:
        """SHA-256 hex of the configuration, versions and recogniser names."""
        analyzer = self.analyzer
        recognisers = sorted(
            f"{type(r).__module__}.{type(r).__qualname__}:{r.name}"
            for r in analyzer.registry.get_recognizers(language=self._language, all_fields=True)
        )
        config = {
            "kind": "presidio",
            "presidio_analyzer": _version("presidio-analyzer"),
            "spacy": _version("spacy"),
            "nlp": "blank" if self._analyzer is None else type(analyzer.nlp_engine).__name__,
            "language": self._language,
            "entities": list(self._entity_list()),
            "score_threshold": self._threshold,
            "type_map": dict(self._rename),
            "recognisers": recognisers,
        }
        return hashlib.sha256(canonical_json(config).encode("utf-8")).hexdigest()

    def find_batch(self, texts: Sequence[str]) -> list[list[Span]]:
        """Analyse each text with Presidio and return its spans under the redaction types.

        Parameters
        ----------
        texts
            The texts to analyse.

        Returns
        -------
        list of list of Span
            One list per text; spans may overlap, ordered by start, then
            longest first, then by score (highest first), then by type.

        Raises
        ------
        PlanError
            If the analyzer does not support the language or an entity.
        """
        out: list[list[Span]] = []
        for text in texts:
            cached = self._cache.get(text)
            if cached is None:
                cached = self._analyse(text)
                with self._lock:
                    if len(self._cache) >= _CACHE_SIZE:
                        self._cache.pop(next(iter(self._cache)), None)
                    self._cache[text] = cached
            out.append(list(cached))
        return out

    def _analyse(self, text: str) -> tuple[Span, ...]:
        if not text.strip():
            return ()
        entities = list(self._entity_list())
        try:
            results = self.analyzer.analyze(
                text=text,
                language=self._language,
                entities=entities,
                score_threshold=self._threshold,
            )
        except ValueError as exc:
            raise PlanError(f"PresidioRecognisers: {exc}") from None
        rename = dict(self._rename)
        wanted = set(entities)
        ranked = sorted(
            (int(r.start), -(int(r.end) - int(r.start)), -float(r.score), r.entity_type)
            for r in results
            if r.entity_type in wanted and float(r.score) >= self._threshold
        )
        return tuple(
            Span(start, start - negative_length, rename.get(entity, entity))
            for start, negative_length, _, entity in ranked
        )
