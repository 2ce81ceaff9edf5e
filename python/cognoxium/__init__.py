"""Cognoxium: a lazy, dataframe-style query engine over LLM context.

Build a :class:`CognitionFrame` over :class:`ContextItem` records, transform it
lazily (filter, select, with_columns, join, sort, limit, dedupe, rank), and
:meth:`~CognitionFrame.pack` it under a token budget into a
:class:`ContextPack` whose :class:`PackManifest` explains every decision.
"""

from typing import TYPE_CHECKING

from cognoxium._lazy import lazy_exports
from cognoxium.exceptions import (
    BudgetError,
    CognoxiumError,
    ConfigError,
    ContractError,
    DependencyError,
    MessageError,
    ModelError,
    OutputError,
    PackError,
    PlanError,
    PolicyError,
    PredicateError,
    ProfileError,
    RankError,
    RecordError,
    SchemaError,
    StrategyError,
    UnknownNoteError,
)

if TYPE_CHECKING:
    from cognoxium.formats.anthropic import from_anthropic_messages, to_anthropic_messages
    from cognoxium.formats.openai import (
        from_openai_messages,
        read_openai_conversations,
        read_openai_jsonl,
        to_openai_messages,
    )
    from cognoxium.frame.frame import CognitionFrame, GroupBy, OptFlags
    from cognoxium.governance.policies import BoundaryPolicy, Policy
    from cognoxium.items.io import read_items, read_jsonl, read_parquet, write_jsonl, write_parquet
    from cognoxium.items.model import (
        Binary,
        ContextItem,
        Json,
        Reference,
        Retention,
        Role,
        Sensitivity,
        Source,
        Text,
        Trust,
    )
    from cognoxium.items.schema import SCHEMA, SCHEMA_VERSION
    from cognoxium.packing import Renderer
    from cognoxium.packing.options import PackOptions
    from cognoxium.packing.packer import (
        ContextPack,
        ManifestEntry,
        PackManifest,
        PolicyOutcome,
        pack,
    )
    from cognoxium.retrieval.embeddings import EmbeddingCache, get_embedder
    from cognoxium.retrieval.scope import RetrievalSettings, ScopeRetriever
    from cognoxium.tokens.profiles import TokenProfile, get_profile
else:
    # Every name but the errors loads with its module on first use: the engine
    # (Polars, Arrow, pydantic, sqlglot) with the first frame, item or pack, and
    # the optional paths (chat formats, embeddings, retrieval scopes) with theirs;
    # the command line's help needs none of them.
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "cognoxium.formats.anthropic": ["from_anthropic_messages", "to_anthropic_messages"],
            "cognoxium.formats.openai": [
                "from_openai_messages",
                "read_openai_conversations",
                "read_openai_jsonl",
                "to_openai_messages",
            ],
            "cognoxium.frame.frame": ["CognitionFrame", "GroupBy", "OptFlags"],
            "cognoxium.governance.policies": ["BoundaryPolicy", "Policy"],
            "cognoxium.items.io": [
                "read_items",
                "read_jsonl",
                "read_parquet",
                "write_jsonl",
                "write_parquet",
            ],
            "cognoxium.items.model": [
                "Binary",
                "ContextItem",
                "Json",
                "Reference",
                "Retention",
                "Role",
                "Sensitivity",
                "Source",
                "Text",
                "Trust",
            ],
            "cognoxium.items.schema": ["SCHEMA", "SCHEMA_VERSION"],
            "cognoxium.packing": ["Renderer"],
            "cognoxium.packing.options": ["PackOptions"],
            "cognoxium.packing.packer": [
                "ContextPack",
                "ManifestEntry",
                "PackManifest",
                "PolicyOutcome",
                "pack",
            ],
            "cognoxium.retrieval.embeddings": ["EmbeddingCache", "get_embedder"],
            "cognoxium.retrieval.scope": ["RetrievalSettings", "ScopeRetriever"],
            "cognoxium.tokens.profiles": ["TokenProfile", "get_profile"],
        },
    )

__version__ = "0.1.0"

__all__ = [
    "SCHEMA",
    "SCHEMA_VERSION",
    "Binary",
    "BoundaryPolicy",
    "BudgetError",
    "CognitionFrame",
    "CognoxiumError",
    "ConfigError",
    "ContextItem",
    "ContextPack",
    "ContractError",
    "DependencyError",
    "EmbeddingCache",
    "GroupBy",
    "Json",
    "ManifestEntry",
    "MessageError",
    "ModelError",
    "OptFlags",
    "OutputError",
    "PackError",
    "PackManifest",
    "PackOptions",
    "PlanError",
    "Policy",
    "PolicyError",
    "PolicyOutcome",
    "PredicateError",
    "ProfileError",
    "RankError",
    "RecordError",
    "Reference",
    "Renderer",
    "Retention",
    "RetrievalSettings",
    "Role",
    "SchemaError",
    "ScopeRetriever",
    "Sensitivity",
    "Source",
    "StrategyError",
    "Text",
    "TokenProfile",
    "Trust",
    "UnknownNoteError",
    "__version__",
    "from_anthropic_messages",
    "from_openai_messages",
    "get_embedder",
    "get_profile",
    "pack",
    "read_items",
    "read_jsonl",
    "read_openai_conversations",
    "read_openai_jsonl",
    "read_parquet",
    "to_anthropic_messages",
    "to_openai_messages",
    "write_jsonl",
    "write_parquet",
]
