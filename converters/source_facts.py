"""What a source checkpoint tells the convert plan beyond its tensors:
the config values its reader took from the trainer (SRC007), and the
tensors convert leaves behind, and why.
"""

from __future__ import annotations

from typing import Any

from dspark.converters.readers import Checkpoint
from dspark.converters.readers.copies import compare_copies, serves_the_same
from dspark.schema.engines import FamilyLoader
from dspark.schema.engines.base import REJECTED, REJECTED_WHEN_FULL_VOCAB
from dspark.schema.families import DraftFamily
from dspark.schema.inventory import TensorEntry
from dspark.schema.rules.inventory import is_training_state
from dspark.schema.rules.vocab import EMBEDDING_NAME, HEAD_NAME, ties_head_to_embedding


def trained_values(checkpoint: Checkpoint) -> list[str]:
    """The config values the reader took from what the trainer used (SRC007:
    the run's config.yaml, TorchSpec's defaults, a generated config), as
    config changes: they are edits convert writes, and a reviewer reading
    the change list must see them."""
    changes = []
    for finding in checkpoint.config_findings + checkpoint.findings:
        detail = finding.detail or {}
        if finding.code != "SRC007":
            continue
        if detail.get("source") == "generated":
            changes.append(f"whole config: generated from the target at {detail.get('target')}, as TorchSpec "
                           "trained it (SRC007)")
        elif "field" in detail and "value" in detail:
            before = detail.get("declared")
            changes.append(f"{detail['field']}: {'absent' if before is None else repr(before)} -> "
                           f"{detail['value']!r} (SRC007: {detail.get('source', 'the trainer')})")
    return changes


def checkpoint_head(checkpoint: Checkpoint) -> TensorEntry | None:
    """The draft's own head as stored, if it ships one."""
    return next((e for e in checkpoint.entries if e.served_name == HEAD_NAME), None)


def tied_copy_of_the_embedding(checkpoint: Checkpoint) -> str | None:
    """Why the shipped head is left behind, when the config ties the head to
    the embedding and the head holds the embedding's values (a tied model
    saved under both names): the engine has no destination for it
    (models/llama_eagle3.py@f4d8ec6e:618-619; models/deepseek_v3.py@f4d8ec6e:
    2294-2295). A head that differs is kept, and refused (LMH002)."""
    config = checkpoint.config if isinstance(checkpoint.config, dict) else {}
    head = checkpoint_head(checkpoint)
    embedding = next((e for e in checkpoint.entries if e.served_name == EMBEDDING_NAME), None)
    if not ties_head_to_embedding(config) or head is None or embedding is None:
        return None
    if not serves_the_same(compare_copies(checkpoint.reader, head, embedding, limit=None)):
        return None
    return f"a copy of {embedding.stored_name}: tie_word_embeddings serves the embedding as the head"


def refused_token_map(family: DraftFamily, loader: FamilyLoader | None, config: Any, served_name: str) -> str | None:
    """Why convert leaves the token map behind for an engine that builds no
    parameter for it (VocabHandling.d2t REJECTED, or REJECTED_WHEN_FULL_VOCAB
    at a draft vocabulary as large as the vocabulary): shipped, it fails the
    load."""
    table = next((rule for rule in family.tensors if rule.role == "token_map"), None)
    if table is None or served_name != table.name or loader is None or loader.vocab is None:
        return None
    if loader.vocab.d2t == REJECTED:
        return "the engine builds no token map and refuses one"
    if loader.vocab.d2t == REJECTED_WHEN_FULL_VOCAB and isinstance(config, dict):
        rows = config.get("draft_vocab_size") or config.get("vocab_size")
        if rows == config.get("vocab_size"):
            return "the draft vocabulary is the target's: the engine builds no token map and refuses one"
    return None


def drop_reason(family: DraftFamily, served_name: str) -> str | None:
    """Why convert leaves a tensor behind by its name alone, or None."""
    if family.is_skipped(served_name):
        return "skipped by the serving loader"
    if family.is_training_only(served_name):
        return "training-only"
    if is_training_state(served_name):
        return "optimizer or scheduler state"
    return None
