"""Chat and framework formats.

OpenAI and Anthropic messages, LangChain and LlamaIndex objects, manifests and lineage as Arrow.
"""

from typing import TYPE_CHECKING

from cognoxium._lazy import lazy_exports

if TYPE_CHECKING:
    from cognoxium.formats.anthropic import (
        anthropic_messages_to_items,
        from_anthropic_messages,
        to_anthropic_messages,
        validate_anthropic_messages,
    )
    from cognoxium.formats.interop import (
        EXTRAS,
        from_langchain_documents,
        from_langchain_messages,
        from_llamaindex_messages,
        from_llamaindex_nodes,
        lineage_to_arrow,
        lineage_to_polars,
        manifests_to_polars,
        to_langchain_messages,
        to_llamaindex_messages,
    )
    from cognoxium.formats.openai import (
        CHAT_EPOCH,
        IMPORT_TOOL_ERRORS,
        MESSAGE_ROLES,
        from_openai_messages,
        openai_messages_to_items,
        read_openai_conversations,
        read_openai_jsonl,
        to_openai_messages,
        validate_openai_messages,
    )
else:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "cognoxium.formats.anthropic": [
                "anthropic_messages_to_items",
                "from_anthropic_messages",
                "to_anthropic_messages",
                "validate_anthropic_messages",
            ],
            "cognoxium.formats.interop": [
                "EXTRAS",
                "from_langchain_documents",
                "from_langchain_messages",
                "from_llamaindex_messages",
                "from_llamaindex_nodes",
                "lineage_to_arrow",
                "lineage_to_polars",
                "manifests_to_polars",
                "to_langchain_messages",
                "to_llamaindex_messages",
            ],
            "cognoxium.formats.openai": [
                "CHAT_EPOCH",
                "IMPORT_TOOL_ERRORS",
                "MESSAGE_ROLES",
                "from_openai_messages",
                "openai_messages_to_items",
                "read_openai_conversations",
                "read_openai_jsonl",
                "to_openai_messages",
                "validate_openai_messages",
            ],
        },
    )

__all__ = [
    "CHAT_EPOCH",
    "EXTRAS",
    "IMPORT_TOOL_ERRORS",
    "MESSAGE_ROLES",
    "anthropic_messages_to_items",
    "from_anthropic_messages",
    "from_langchain_documents",
    "from_langchain_messages",
    "from_llamaindex_messages",
    "from_llamaindex_nodes",
    "from_openai_messages",
    "lineage_to_arrow",
    "lineage_to_polars",
    "manifests_to_polars",
    "openai_messages_to_items",
    "read_openai_conversations",
    "read_openai_jsonl",
    "to_anthropic_messages",
    "to_langchain_messages",
    "to_llamaindex_messages",
    "to_openai_messages",
    "validate_anthropic_messages",
    "validate_openai_messages",
]
