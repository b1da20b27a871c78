"""The draft's own head and its `d2t` token map (EAGLE-3).

Which head is served depends on config fields, not on what is shipped:
`tie_word_embeddings` serves the (target's) embedding and ignores any
shipped `lm_head`; without `draft_vocab_size` the engine may serve the
target's head instead of the draft's (the loader's `head_from_target`
rule). The head has `draft_vocab_size or vocab_size` rows. When it has
fewer rows than the vocabulary, `d2t` maps a draft token i to the target
token `i + d2t[i]`; the engine never validates it (`hot = d2t + arange`,
any dtype, any length), so a missing or malformed table is served wrong
without a word (models/llama_eagle3.py@f4d8ec6e:617-631, 691-695;
models/deepseek_v3.py@f4d8ec6e:2294-2310, 2358-2373;
execution/drafter/eagle.py@f4d8ec6e:103-108, 162-164). The table itself
(its dtype, length and the entries the head can produce) is judged in
`token_map.py`.
"""

from __future__ import annotations

from typing import Any, Mapping

from dspark.schema.dtypes import is_floating
from dspark.schema.engines import FamilyLoader
from dspark.schema.engines.base import (
    REJECTED,
    REJECTED_WHEN_FULL_VOCAB,
    TARGET_UNLESS_OWN_HEAD_AND_WIDTHS_DIFFER,
    TARGET_UNLESS_WIDTHS_DIFFER,
)
from dspark.schema.families import DraftFamily, ExpectedTensor
from dspark.schema.findings import Finding, Severity
from dspark.schema.inventory import TensorEntry
from dspark.schema.rules.common import is_int, shape_text
from dspark.schema.rules.token_map import (
    HOT_MAP_SOURCE,
    TokenMapValues,
    hot_targets,
    table_findings,
    table_value_findings,
)

# Roles judged here rather than by the generic inventory.
VOCAB_ROLES = ("lm_head", "token_map")

def head_rows(family: DraftFamily, config: Mapping[str, Any]) -> int | None:
    """The rows of the draft's head, which is how many d2t entries the
    engine can look up (the token map's expected length)."""
    expected, _ = family.expected_tensors(family.resolve_dims(config))
    table = next((e for e in expected.values() if e.role == "token_map"), None)
    return table.shape[0] if table is not None else None


def own_head_served(loader: FamilyLoader | None, config: Mapping[str, Any], head_shipped: bool) -> bool:
    """Whether the engine serves the draft's own `lm_head` (rather than the
    tied embedding or the target's head)."""
    if config.get("tie_word_embeddings"):
        return False
    rule = loader.head_from_target if loader is not None else ""
    if rule == "not_shipped":
        return head_shipped
    if rule == "always":
        return False
    if rule == "draft_vocab_size_unset":
        return config.get("draft_vocab_size") is not None
    if _shares_nothing(config, loader):
        return True  # nothing of the target's is attached: the draft's own head, or garbage
    if rule == "draft_vocab_size_null":
        return config.get("draft_vocab_size") is not None
    if rule == "draft_vocab_size_absent":
        return "draft_vocab_size" in config or head_shipped
    return True


def _embedding_left_to_the_draft(loader: FamilyLoader | None, config: Mapping[str, Any],
                                 shipped: Mapping[str, TensorEntry]) -> bool:
    """Whether the engine keeps the draft's own embedding, shipped or not,
    because of target_hidden_size: always when it differs (TokenSpeed), or
    only when the draft's own head is served too (SGLang attaches the
    target's embedding with its head whatever the widths)."""
    if loader is not None and loader.vocab is not None \
            and loader.vocab.embedding == TARGET_UNLESS_OWN_HEAD_AND_WIDTHS_DIFFER:
        width = config.get("target_hidden_size")
        return (width is not None and width != config.get("hidden_size")
                and own_head_served(loader, config, HEAD_NAME in shipped))
    return _shares_nothing(config, loader)


def _shares_nothing(config: Mapping[str, Any], loader: FamilyLoader | None = None) -> bool:
    """Under TARGET_UNLESS_WIDTHS_DIFFER (`VocabHandling.embedding`; a
    loader that says nothing is read so too), `set_embed_and_head` returns
    before attaching the target's embedding and head when
    `target_hidden_size` is present and differs from `hidden_size`
    (models/llama_eagle3.py@f4d8ec6e:729-733; models/deepseek_v3.py@
    f4d8ec6e:2408-2413): the draft's own are served, shipped or not."""
    handling = loader.vocab if loader is not None else None
    if handling is not None and handling.embedding != TARGET_UNLESS_WIDTHS_DIFFER:
        return False
    return "target_hidden_size" in config and config["target_hidden_size"] != config.get("hidden_size")


def larger_vocab_through_d2t(config: Mapping[str, Any], family: DraftFamily, target_vocab: int, padded: int,
                              shipped: frozenset[str] | None, token_map: TokenMapValues | None,
                              why: str, ending: str) -> tuple[Severity | None, str, str, dict]:
    """TGT004 (rules/target.py) for an EAGLE-3 draft whose vocab_size
    exceeds the target's within the same `padded` rows: (severity, why,
    ending, detail), severity None for the code's own (an error). Its
    vocab_size then only sizes tables the target's fill (its embedding and
    head are attached whole) and cuts the logits no shorter than the head's
    rows (layers/logits_processor.py@
    f4d8ec6e:653); what it proposes is `i + d2t[i]` for a head row i
    (HOT_MAP_SOURCE). A shipped d2t that sends every head row below the
    target's vocabulary is served as trained (a warning); one that sends a
    row past it, or no d2t (the row index itself is proposed), stays an
    error. The verdict is in the table's values: they are read for it."""
    rows = head_rows(family, config)
    table = next((rule.name for rule in family.tensors if rule.role == "token_map"), None)
    if rows is None or table is None or shipped is None or table not in shipped:
        return None, why + (f"; no {table} is shipped, so the head's row indices are proposed as token ids"
                            if table is not None and shipped is not None and rows is not None else ""), ending, {}
    span = hot_targets(token_map(rows) if token_map is not None else None, rows)
    if span is None:
        return None, (f"{why}; its {table} could not be read to tell where it sends the head's {rows} rows "
                      "(not an integer table of at least that length, or past the size dspark reads "
                      "header-only)"), ending, {"d2t_read": False}
    low, high = span
    detail = {"d2t_read": True, "d2t_min": low, "d2t_max": high, "head_rows": rows, "source": HOT_MAP_SOURCE}
    if low >= 0 and high < target_vocab:
        return Severity.WARNING, (
            f"the engine never compares them; both pad to {padded} rows, so the target's embedding and head "
            f"fit, and the draft's {table} sends each of its {rows} head rows to a target id from {low} to "
            f"{high} (i + {table}[i]), inside the target's vocabulary: every proposal is a target token and "
            "the draft is served as trained"), (
            f"Set vocab_size to {target_vocab} so loaders that compare them agree."), detail
    return None, (
        f"the engine never compares them, and the draft's {table} sends its head rows to target ids from {low} "
        f"to {high} (i + {table}[i]), outside the target's [0, {target_vocab}): those proposals are tokens the "
        "target does not have"), ending, detail


def _refused_token_maps(family: DraftFamily, loader: FamilyLoader | None, config: Mapping[str, Any],
                        shipped: Mapping[str, TensorEntry]) -> list[Finding]:
    """INV002 for a token map the engine has no destination for
    (`VocabHandling`: REJECTED, or REJECTED_WHEN_FULL_VOCAB with a head as
    wide as the vocabulary): its loader stops on the name."""
    handling = loader.vocab if loader is not None else None
    if handling is None:
        return []
    rows, vocab = head_rows(family, config), config.get("vocab_size")
    findings = []
    for name, rule in (("d2t", handling.d2t), ("t2d", handling.t2d)):
        if name not in shipped:
            continue
        full = is_int(rows) and is_int(vocab) and rows == vocab
        if rule == REJECTED or (rule == REJECTED_WHEN_FULL_VOCAB and full):
            when = (f" when the head is as wide as the vocabulary ({rows} rows)" if rule == REJECTED_WHEN_FULL_VOCAB
                    else "")
            findings.append(Finding(
                "INV002",
                f"{shipped[name].file}: {name} is shipped, but this engine's loader has no destination for it{when} "
                f"and refuses the load ({handling.source.cite()}). Drop {name} from the export.",
                file=shipped[name].file, tensor=name,
                detail={"token_map": name, "rule": rule, "source": handling.source.cite()},
            ))
    return findings


def vocab_findings(
    family: DraftFamily,
    loader: FamilyLoader | None,
    config: Mapping[str, Any],
    shipped: Mapping[str, TensorEntry],
    expected_all: Mapping[str, ExpectedTensor],
    config_file: str,
    token_map: TokenMapValues | None = None,
    stored_token_map: TokenMapValues | None = None,
) -> list[Finding]:
    """`token_map`, when given, hands over the shipped d2t's values as the
    engine uses them (`served_offsets`): the caller reads every payload
    anyway (--deep, convert), and VOC003 is judged here on the entries the
    head can index. `stored_token_map` hands over its values as stored,
    header-only too: they are read only for a float table the engine
    copies into an integer buffer, whose verdict is in them (VOC002)."""
    findings: list[Finding] = []
    head = next((e for e in expected_all.values() if e.role == "lm_head"), None)
    table = next((e for e in expected_all.values() if e.role == "token_map"), None)
    if head is not None:
        findings += _head_findings(head, loader, config, shipped, config_file)
    refused = _refused_token_maps(family, loader, config, shipped)
    findings += refused
    if table is not None and not refused:
        findings += table_findings(table, loader, config, shipped, config_file, stored_token_map)
        findings += table_value_findings(table, loader, config, shipped, token_map)
    embedding = expected_all.get(EMBEDDING_NAME)
    if (embedding is not None and embedding.name not in shipped
            and _embedding_left_to_the_draft(loader, config, shipped)):
        declared = config.get("target_hidden_size")
        why = ("is null" if declared is None else
               f"{declared!r} differs from hidden_size {config.get('hidden_size')!r}")
        fix = ("remove target_hidden_size from the config" if declared is None
               else "set target_hidden_size to hidden_size if the widths are equal")
        findings.append(Finding(
            "INV001",
            f"{config_file}: {embedding.name} {shape_text(embedding.shape)} is missing; target_hidden_size {why}, "
            "so the engine never attaches the target's embedding and serves this one uninitialised (garbage) "
            f"without a word. Ship the embedding, or {fix}.",
            file=config_file,
            tensor=embedding.name,
            detail={"expected_shape": list(embedding.shape),
                    "source": loader.vocab.source.cite() if loader is not None and loader.vocab is not None else
                    "models/deepseek_v3.py@f4d8ec6e:2408-2413; models/llama_eagle3.py@f4d8ec6e:729-733"},
        ))
    return findings


# The served names of the draft's own head and embedding (EAGLE-3).
HEAD_NAME, EMBEDDING_NAME = "lm_head.weight", "embed_tokens.weight"


def ties_head_to_embedding(config: Mapping[str, Any]) -> bool:
    """`tie_word_embeddings` as the EAGLE-3 models test it: truthy
    (models/llama_eagle3.py@f4d8ec6e:618; models/deepseek_v3.py@f4d8ec6e:2294)."""
    return bool(config.get("tie_word_embeddings"))


def tied_head_finding(file: str, head_name: str, why: str, detail: dict,
                      severity: Severity = Severity.ERROR) -> Finding:
    """LMH002: with `tie_word_embeddings` the head is the embedding module
    (models/llama_eagle3.py@f4d8ec6e:618-619; models/deepseek_v3.py@f4d8ec6e:
    2294-2295) and a shipped `lm_head` has no destination: it is dropped.
    A model trained tied has one tensor under both names, so the shipped
    head equals the embedding; one that differs (or another shape, or no
    embedding shipped to compare with) was trained as a head of its own,
    and the engine serves another. `why` says which."""
    return Finding(
        "LMH002",
        f"{file}: {head_name} is shipped but tie_word_embeddings is true: the engine serves the embedding "
        f"as the head (the target's, where it attaches it) and drops this tensor, and {why}. A head trained "
        "on its own is never served. If the draft has its own head, set tie_word_embeddings: false (and "
        "draft_vocab_size to its row count); if it was trained tied, remove lm_head from the checkpoint.",
        file=file,
        tensor=head_name,
        detail=detail,
        severity=severity,
    )


def _tied_head_shipped(entry: TensorEntry, head, shipped: Mapping[str, TensorEntry], source) -> Finding:
    """LMH002 from the headers; where the embedding has the head's shape,
    the converter compares their values (`copies.judge_tied_head`)."""
    embedding = shipped.get(EMBEDDING_NAME)
    comparable = embedding is not None and tuple(embedding.shape) == tuple(entry.shape)
    if embedding is None:
        why = "no embed_tokens is shipped to tell whether it is the embedding"
    elif not comparable:
        why = (f"it is {shape_text(entry.shape)} where the embedding is {shape_text(embedding.shape)}, "
               "so it is not the tied embedding")
    else:
        why = "its values are yet to be compared with the embedding's"
    return tied_head_finding(entry.file, head.name, why, {
        "tie_word_embeddings": True, "source": source,
        "embedding": embedding.stored_name if comparable else None, "head": entry.stored_name})


def _head_findings(head, loader, config, shipped, config_file) -> list[Finding]:
    entry = shipped.get(head.name)
    served = own_head_served(loader, config, entry is not None)
    source = loader.sources.get("lm_head").cite() if loader is not None and loader.sources.get("lm_head") else None
    if entry is not None and not served and ties_head_to_embedding(config):
        return [_tied_head_shipped(entry, head, shipped, source)]
    if entry is not None and not served:
        why = (f"draft_vocab_size is {'null' if 'draft_vocab_size' in config else 'absent'}, so the engine "
               "replaces the shipped lm_head with the target's head")
        return [Finding(
            "LMH001",
            f"{entry.file}: {head.name} is shipped but not served: {why}. If the draft was trained with its "
            "own head, set draft_vocab_size to its row count (and tie_word_embeddings: false).",
            file=entry.file,
            tensor=head.name,
            detail={"draft_vocab_size": config.get("draft_vocab_size"),
                    "tie_word_embeddings": config.get("tie_word_embeddings"), "source": source},
        )]
    vocab = config.get("vocab_size")
    if (entry is None and not served and loader is not None and loader.head_from_target == "not_shipped"
            and is_int(vocab) and head.shape[0] < vocab and not ties_head_to_embedding(config)):
        return [Finding(
            "INV001",
            f"{head.name} {shape_text(head.shape)} is missing; the engine then attaches the target's "
            f"{vocab}-row head to a draft whose logits and d2t cover {head.shape[0]} draft tokens, so its "
            "proposals are the wrong tokens or the first request fails. Ship the head the draft was trained "
            "with.",
            tensor=head.name,
            detail={"expected_shape": list(head.shape), "source": source},
        )]
    if entry is None:
        if served:
            return [Finding(
                "INV001",
                f"{head.name} {shape_text(head.shape)} is missing; with draft_vocab_size "
                f"{config.get('draft_vocab_size')!r} the engine serves the draft's own head and leaves it "
                "uninitialised (garbage) without a word. Ship the head the draft was trained with.",
                tensor=head.name,
                detail={"expected_shape": list(head.shape), "source": source},
            )]
        return []
    findings: list[Finding] = []
    if entry.shape != head.shape:
        findings.append(Finding(
            "INV003",
            f"{entry.file}: {head.name} is {shape_text(entry.shape)} but the engine builds the head "
            f"{shape_text(head.shape)} (draft_vocab_size or vocab_size, hidden_size) and fails to load it.",
            file=entry.file,
            tensor=head.name,
            detail={"shape": list(entry.shape), "expected": list(head.shape)},
        ))
    if not is_floating(entry.dtype):
        findings.append(Finding(
            "INV004",
            f"{entry.file}: {head.name} has dtype {entry.dtype}; weights must be floating point.",
            file=entry.file,
            tensor=head.name,
            detail={"dtype": entry.dtype},
        ))
    return findings


