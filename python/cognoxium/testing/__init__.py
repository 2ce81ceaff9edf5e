"""Asserts and hypothesis strategies for tests of policies, rankers and strategies.

As :mod:`polars.testing` does for frames, this package ships what a test of
code built on Cognoxium needs:

- :func:`assert_pack_equal` and :func:`assert_manifest_equal` compare two
  packs or two manifests and name every field, item id and value that
  differs.
- :mod:`cognoxium.testing.strategies` holds hypothesis strategies for context
  items, frames of them and OpenAI chat histories with tool calls. It needs
  hypothesis, an optional dependency: ``pip install 'cognoxium-engine[testing]'``;
  the asserts do not.
- :mod:`cognoxium.testing.pii_corpus` generates a seeded corpus of texts and
  JSON documents with planted personal data and hard negatives, and scores a
  redactor's spans on it (recall and precision per type, phone region and
  written form) and how much of each hard negative it keeps.

Examples
--------
>>> from datetime import UTC, datetime
>>> from cognoxium import CognitionFrame
>>> from cognoxium.testing import assert_pack_equal
>>> cf = CognitionFrame([{"id": "q", "role": "user", "text": "Refund window?"}])
>>> when = datetime(2030, 1, 1, tzinfo=UTC)
>>> assert_pack_equal(cf.pack(50, as_of=when), cf.pack(50, as_of=when))
"""

from cognoxium.testing.asserts import assert_manifest_equal, assert_pack_equal

__all__ = ["assert_manifest_equal", "assert_pack_equal"]
