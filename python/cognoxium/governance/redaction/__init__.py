r"""Redaction: find personal data and secrets in item payloads and replace them.

A :class:`Recogniser` is a named regular expression plus an optional validator
(Luhn, ISO 13616 mod-97, :mod:`ipaddress`, SSA ranges, ...). The same pattern
text runs in Python's :mod:`re` (the reference path, :func:`find_spans` and
:func:`redact_text`) and in Polars' Rust ``regex`` (the vectorised path,
:func:`redact_frame`), so every pattern stays in the subset the two engines
read alike: ASCII classes written out (``[0-9]``, never ``\d``, ``\w``,
``\s`` or ``\b``, whose Unicode tables differ), no look-around, no
back-references, no case-insensitive flag.

Matching rules, the same in both paths:

- A pattern is scanned over the text padded with one ``\n`` on each side,
  framed by a one-character *lead* before the value and a *trail* after it
  (by default: a character that is not ``[0-9A-Za-z_]``). This plays the part
  of a word boundary without look-around, and lets the regex engine backtrack
  to a shorter value that ends on a boundary (a card number followed by an
  expiry date, an IBAN followed by a capitalised word).
- The value is the pattern's group ``v``; a candidate is kept when its
  validator accepts the value.
- A recogniser with context words (``SSN``, ``phone``, ``bind``) also
  matches them just before the value, with separators and at most three
  filler words between (:data:`CONTEXT_FILLERS`: ``phone number is``), and
  its validator learns whether they were there: ``536 22 8726`` is an SSN
  after ``SSN:`` and not alone. In JSON, a member whose key names the
  words (``{"ssn": "536228726"}``) counts as them.
- Overlapping spans of different recognisers: the longest wins, ties go to
  the recogniser that comes first in :data:`RECOGNISERS`.
- Redaction repeats until no recogniser matches (a fixed point), so a value
  hidden behind a neighbour in the first scan (two addresses separated by one
  space share the boundary character) is found in the next one, and
  redacting twice changes nothing: no replacement ever matches a recogniser.

The recognisers are not a substitute for a data-protection review: they find
the formats listed in :data:`RECOGNISERS`; names and postal addresses are not
found, nor phone numbers written nationally in regions outside
:data:`PHONE_REGIONS` (pass :func:`phone_recogniser` other regions), nor a
bare run of digits or an SSN written without dashes when no context words
come before it.

A recogniser may match a whole *run* (of digit groups, of colon-separated hex
groups) and pick the valid values inside it with a ``refine`` function, so a
card number written after an unrelated group of four digits is found and an
invalid IPv6 run such as ``2001:db8::1::2`` is not cut into two addresses.

Other engines plug in as a :class:`RecogniserSet` (for example
:class:`cognoxium.governance.presidio.PresidioRecognisers`), passed as ``recognisers=``
alone or next to the built-in recognisers. Their spans join the same pool:
the same overlap rule, styles, counts and fixed point. A span that overlaps
a redaction already made (``[EMAIL]``, ``[EMAIL:3f2a9c1d]``), or that holds
nothing but mask characters and whitespace, is ignored, so redacting twice
changes nothing whatever the engine.

The package holds one concern per module: the recogniser model (``_model``:
:class:`Recogniser`, :class:`Span`, :class:`RecogniserSet`), the validators
(``_validators``: checksums and format checks), national phone numbers
(``_phone``: :func:`phone_recogniser`), the built-in recognisers
(``_recognisers``: :data:`RECOGNISERS`, :data:`TYPES`), the reference engine
(``_engine``: :func:`find_spans`, :func:`redact_text`, :func:`redact_json`)
and the frame-level path over Polars (``_frame``: :func:`redact_frame`).
"""

from cognoxium.governance.redaction._engine import find_spans, redact_json, redact_text

# Not public: checks the ``recognisers=`` argument of CognitionFrame.redact.
from cognoxium.governance.redaction._engine import recogniser_pool as recogniser_pool
from cognoxium.governance.redaction._frame import redact_frame
from cognoxium.governance.redaction._model import (
    CONTEXT_FILLERS,
    Recogniser,
    RecogniserSet,
    RedactionStyle,
    Span,
)
from cognoxium.governance.redaction._phone import PHONE_REGIONS, phone_recogniser
from cognoxium.governance.redaction._recognisers import RECOGNISERS, TYPES

__all__ = [
    "CONTEXT_FILLERS",
    "PHONE_REGIONS",
    "RECOGNISERS",
    "TYPES",
    "Recogniser",
    "RecogniserSet",
    "RedactionStyle",
    "Span",
    "find_spans",
    "phone_recogniser",
    "redact_frame",
    "redact_json",
    "redact_text",
]
