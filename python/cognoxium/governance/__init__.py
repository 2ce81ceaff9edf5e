"""Governance kernels: dedupe, redaction, injection detection, policies and lineage.

The optional Presidio adapter lives in :mod:`cognoxium.governance.presidio`
(extra ``presidio``).
"""

from typing import TYPE_CHECKING

from cognoxium._lazy import lazy_exports

if TYPE_CHECKING:
    from cognoxium.governance.dedupe import NORMALIZATIONS, check_dedupe, dedupe_frame
    from cognoxium.governance.injection import (
        INJECTION_SIGNS,
        detect_injection,
        injection_expr,
        injection_reasons,
    )
    from cognoxium.governance.lineage import (
        EDGE_SCHEMA,
        ancestors,
        descendants,
        lineage_edges,
    )
    from cognoxium.governance.policies import (
        ACTIONS,
        DATA_BLOCK_CLOSE,
        BoundaryPolicy,
        Policy,
        data_block_expr,
    )
    from cognoxium.governance.redaction import (
        CONTEXT_FILLERS,
        PHONE_REGIONS,
        RECOGNISERS,
        TYPES,
        Recogniser,
        RecogniserSet,
        RedactionStyle,
        Span,
        find_spans,
        phone_recogniser,
        redact_frame,
        redact_json,
        redact_text,
    )
else:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "cognoxium.governance.dedupe": ["NORMALIZATIONS", "check_dedupe", "dedupe_frame"],
            "cognoxium.governance.injection": [
                "INJECTION_SIGNS",
                "detect_injection",
                "injection_expr",
                "injection_reasons",
            ],
            "cognoxium.governance.lineage": [
                "EDGE_SCHEMA",
                "ancestors",
                "descendants",
                "lineage_edges",
            ],
            "cognoxium.governance.policies": [
                "ACTIONS",
                "DATA_BLOCK_CLOSE",
                "BoundaryPolicy",
                "Policy",
                "data_block_expr",
            ],
            "cognoxium.governance.redaction": [
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
            ],
        },
    )

__all__ = [
    "ACTIONS",
    "CONTEXT_FILLERS",
    "DATA_BLOCK_CLOSE",
    "EDGE_SCHEMA",
    "INJECTION_SIGNS",
    "NORMALIZATIONS",
    "PHONE_REGIONS",
    "RECOGNISERS",
    "TYPES",
    "BoundaryPolicy",
    "Policy",
    "Recogniser",
    "RecogniserSet",
    "RedactionStyle",
    "Span",
    "ancestors",
    "check_dedupe",
    "data_block_expr",
    "dedupe_frame",
    "descendants",
    "detect_injection",
    "find_spans",
    "injection_expr",
    "injection_reasons",
    "lineage_edges",
    "phone_recogniser",
    "redact_frame",
    "redact_json",
    "redact_text",
]
