"""Bounded tool results and private artifacts: files and bytes only (no mcp, no async).

The gateway calls :func:`bound_result` on every downstream result, serves :func:`artifact_read`
as the ``artifact_read`` tool, and runs :func:`gc` at start and after each spill.
"""

from .bound import (
    DEFAULT_MAX_ARTIFACT_BYTES,
    DEFAULT_MAX_VISIBLE_BYTES,
    MIN_VISIBLE_BYTES,
    bound_result,
    canonical_json,
    json_size,
    retain,
    structured_limit,
    surely_within,
    text_result_size,
    visible_size,
)
from .read import (
    ARTIFACT_READ_SCHEMA,
    artifact_read,
    artifact_read_declaration,
    find_text,
    read_bytes,
    read_lines,
    whole_number,
)
from .store import (
    ArtifactInfo,
    ArtifactNotFound,
    Artifacts,
    ArtifactStore,
    StoreError,
    artifact_not_found,
    find_artifact,
    gc,
    list_artifacts,
    new_id,
    open_private_dir,
    valid_id,
)

__all__ = [
    "ARTIFACT_READ_SCHEMA",
    "DEFAULT_MAX_ARTIFACT_BYTES",
    "DEFAULT_MAX_VISIBLE_BYTES",
    "MIN_VISIBLE_BYTES",
    "ArtifactInfo",
    "ArtifactNotFound",
    "ArtifactStore",
    "Artifacts",
    "StoreError",
    "artifact_not_found",
    "artifact_read",
    "artifact_read_declaration",
    "bound_result",
    "canonical_json",
    "find_artifact",
    "find_text",
    "gc",
    "json_size",
    "list_artifacts",
    "open_private_dir",
    "read_bytes",
    "read_lines",
    "retain",
    "structured_limit",
    "surely_within",
    "text_result_size",
    "new_id",
    "valid_id",
    "whole_number",
    "visible_size",
]
