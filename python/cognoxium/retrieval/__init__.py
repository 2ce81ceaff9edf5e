"""Retrieval kernels.

BM25 and recency ranking, rank fusion, embeddings, near duplicates, and hybrid
retrieval over a scope.
"""

from cognoxium.retrieval.embeddings import (
    CACHE_DIR_ENV,
    EMBEDDER_NAMES,
    MINILM_DIM,
    MINILM_MAX_LENGTH,
    MINILM_MODEL_SHA256,
    MINILM_TOKENIZER_SHA256,
    CacheInfo,
    Embedder,
    EmbeddingCache,
    LocalHashEmbedder,
    MiniLMEmbedder,
    default_cache,
    default_cache_dir,
    embed_frame,
    embedding_scores,
    get_embedder,
)
from cognoxium.retrieval.fusion import (
    RankedList,
    mmr,
    reciprocal_rank_fusion,
    rrf_scores,
    weighted_score_fusion,
)
from cognoxium.retrieval.near_duplicates import (
    MAX_BUCKET,
    NUM_PERM,
    SHINGLE_BYTES,
    lsh_params,
    minhash_signatures,
    near_duplicate_labels,
)
from cognoxium.retrieval.ranking import (
    BM25CacheInfo,
    bm25_cache_clear,
    bm25_cache_info,
    bm25_scores,
    corpus_key,
    recency_expr,
    recency_scores,
)
from cognoxium.retrieval.scope import (
    RETRIEVAL_LISTS,
    RetrievalSettings,
    ScopeRetriever,
    derived_items,
)

__all__ = [
    "CACHE_DIR_ENV",
    "EMBEDDER_NAMES",
    "MAX_BUCKET",
    "MINILM_DIM",
    "MINILM_MAX_LENGTH",
    "MINILM_MODEL_SHA256",
    "MINILM_TOKENIZER_SHA256",
    "NUM_PERM",
    "RETRIEVAL_LISTS",
    "SHINGLE_BYTES",
    "BM25CacheInfo",
    "CacheInfo",
    "Embedder",
    "EmbeddingCache",
    "LocalHashEmbedder",
    "MiniLMEmbedder",
    "RankedList",
    "RetrievalSettings",
    "ScopeRetriever",
    "bm25_cache_clear",
    "bm25_cache_info",
    "bm25_scores",
    "corpus_key",
    "default_cache",
    "default_cache_dir",
    "derived_items",
    "embed_frame",
    "embedding_scores",
    "get_embedder",
    "lsh_params",
    "minhash_signatures",
    "mmr",
    "near_duplicate_labels",
    "recency_expr",
    "recency_scores",
    "reciprocal_rank_fusion",
    "rrf_scores",
    "weighted_score_fusion",
]
