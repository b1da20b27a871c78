"""What the two EAGLE-3 draft families share: the one decoder layer named
`midlayer`, the optional embedding, the draft's own head and its `d2t`
token map, and how the target decides which layers to capture.

The tap ids are read in three places with different rules (tokenspeed
f4d8ec6e): the Llama draft counts the top-level
`eagle_aux_hidden_state_layer_ids` only (models/llama_eagle3.py:462-466),
the MLA draft reads `eagle_config`'s list whenever `eagle_config` is
present (models/deepseek_v3.py:2112-2119, 2139-2140), and the target
captures what `_eagle_aux_layer_ids` returns: per candidate (the config,
then its `text_config`) `eagle_config`'s ids when `eagle_config` is
present, else the top-level ids; the first truthy list wins, and with none
the target captures its defaults (execution/factory.py:44-75, 95-102;
models/base/causal_lm.py:133-144; models/deepseek_v3.py:1688-1695).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from dspark.schema.families.base import TensorRule, is_int
from dspark.schema.findings import Finding, Severity

TAP_IDS_FIELD = "eagle_aux_hidden_state_layer_ids"
DEFAULT_TAP_COUNT = 3
DEFAULT_TAPS_TEXT = "[1, N//2-1, N-4] of the target's N layers"


def target_capture_ids(config: Mapping[str, Any]) -> tuple[Any, str | None]:
    """The ids the target captures for this draft, and where they came from;
    (None, None) when it falls back to its defaults
    (execution/factory.py@f4d8ec6e:44-75)."""
    candidates: list[tuple[Mapping[str, Any], str]] = [(config, "")]
    text = config.get("text_config")
    if isinstance(text, Mapping):
        candidates.append((text, "text_config."))
    for candidate, where in candidates:
        eagle = candidate.get("eagle_config")
        if isinstance(eagle, Mapping):
            ids, path = eagle.get(TAP_IDS_FIELD), f"{where}eagle_config.{TAP_IDS_FIELD}"
        elif eagle is not None:
            ids, path = None, None
        else:
            ids, path = candidate.get(TAP_IDS_FIELD), f"{where}{TAP_IDS_FIELD}"
        if ids:
            return ids, path
    return None, None


def trainer_tap_count(config: Mapping[str, Any]) -> Any:
    """The tap count the trainer wrote (its list's length; 3 without one).

    The list is read where trainers write it (eagle_config's, else the top
    level's); None when it is not a list. What an engine builds fc for is
    the engine's to say (`FamilyLoader.dims`)."""
    for path, ids in _declared_lists(config):
        if not path.startswith("text_config."):
            return len(ids) if isinstance(ids, list) else None
    return DEFAULT_TAP_COUNT


def trainer_tap_width(config: Mapping[str, Any]) -> Any:
    """target_hidden_size, else hidden_size: each tap's width as trained.

    An engine may build fc otherwise (TokenSpeed's Llama EAGLE-3: hidden_size
    per tap, its loader's dims)."""
    return config.get("target_hidden_size") or config.get("hidden_size")


# A draft reader: config -> (the ids it read or None, where, the tap count T
# it builds fc for; None when it cannot build one).
DraftTapReader = Callable[[Mapping[str, Any]], tuple[Any, str | None, Any]]


def _declared_lists(config: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """Every non-empty tap list the config spells out, with its path."""
    found = []
    for candidate, where in [(config, "")] + (
        [(config["text_config"], "text_config.")] if isinstance(config.get("text_config"), Mapping) else []
    ):
        if candidate.get(TAP_IDS_FIELD):
            found.append((f"{where}{TAP_IDS_FIELD}", candidate[TAP_IDS_FIELD]))
        eagle = candidate.get("eagle_config")
        if isinstance(eagle, Mapping) and eagle.get(TAP_IDS_FIELD):
            found.append((f"{where}eagle_config.{TAP_IDS_FIELD}", eagle[TAP_IDS_FIELD]))
    return found


def tap_agreement_rule(draft_taps: DraftTapReader, draft_reader_text: str):
    """A config rule: the tap count the draft builds `fc` for against the ids
    the target will capture. The engine compares neither: a count that
    differs fails at load (fc's width) or at the first request, and a
    declared list the target does not read serves the wrong layers."""

    def rule(config: Mapping[str, Any], config_file: str) -> list[Finding]:
        draft_ids, draft_path, count = draft_taps(config)
        if not is_int(count):
            return []  # the schema reports an unreadable list
        target_ids, target_path = target_capture_ids(config)
        draft_from = f"{draft_path} ({_show(draft_ids)})" if draft_path else f"no list, so {DEFAULT_TAP_COUNT}"
        source = {"draft": "models/llama_eagle3.py@f4d8ec6e:462-466 or models/deepseek_v3.py@f4d8ec6e:2112-2140",
                  "target": "execution/factory.py@f4d8ec6e:44-75"}
        if target_ids is None:
            declared = _declared_lists(config)
            if count != DEFAULT_TAP_COUNT:
                return [Finding(
                    "TAP001",
                    f"{config_file}: the draft builds fc for {count} taps ({draft_reader_text}: {draft_from}) but "
                    f"the target finds no tap list it reads and captures its {DEFAULT_TAP_COUNT} default taps "
                    f"{DEFAULT_TAPS_TEXT}; the draft fails at load or at the first request. "
                    + _fix_text(declared),
                    file=config_file,
                    detail={"draft_taps": count, "draft_source": draft_path, "target_ids": None,
                            "declared": dict(declared), "source": source},
                )]
            if declared:
                return [unread_list_finding(declared, config_file, source)]
            return [Finding(
                "TAP003",
                f"{config_file}: no tap ids; the engine assumes {DEFAULT_TAP_COUNT} taps and the target captures "
                f"its defaults {DEFAULT_TAPS_TEXT} (TorchSpec trains on the same defaults unless its run's "
                f"config.yaml sets inference.aux_hidden_states_layers; converting the run writes that list). "
                f"Write the list in {TAP_IDS_FIELD} if the draft was trained on other layers.",
                file=config_file,
                detail={"draft_taps": count, "target_ids": None, "source": source},
            )]
        if not isinstance(target_ids, list):
            return []
        if len(target_ids) != count:
            return [Finding(
                "TAP001",
                f"{config_file}: the draft builds fc for {count} taps ({draft_reader_text}: {draft_from}) but the "
                f"target captures {len(target_ids)} ({target_path} = {_show(target_ids)}, which it reads first); "
                "the draft fails at load or at the first request. Make the lists agree.",
                file=config_file,
                detail={"draft_taps": count, "draft_source": draft_path, "target_ids": target_ids,
                        "target_source": target_path, "source": source},
            )]
        unread = [(path, ids) for path, ids in _declared_lists(config) if path != target_path and ids != target_ids]
        if unread:
            # The Llama draft takes only the count of the top-level list; what
            # it was trained on is the trainer's to say, and the trainer that
            # writes eagle_config (SpecForge) trains on eagle_config's list
            # (specforge/algorithms/model_providers.py@a6b6b02:188-204), the
            # list the target captures. A warning: read by nothing else.
            path, ids = unread[0]
            return [Finding(
                "TAP002",
                f"{config_file}: {path} = {_show(ids)} but the target captures {target_path} = "
                f"{_show(target_ids)}, which it reads first; {path} is read by nothing that picks layers. "
                f"SpecForge, which writes eagle_config, trains on {target_path} too (or its run's list), so "
                f"such a draft is fed its layers; one trained on {path} by another trainer is not. Keep the "
                "list the draft was trained on, in both places or in eagle_config alone.",
                file=config_file,
                detail={"draft_ids": ids, "draft_source": path, "target_ids": target_ids,
                        "target_source": target_path, "source": source},
                severity=Severity.WARNING,
            )]
        return []

    return rule


def default_taps(target_layers: int) -> list[int]:
    """The ids a target captures when it is given none: layers 2, N//2 and
    N-3 in its own +1 numbering (models/base/causal_lm.py@f4d8ec6e:137-140;
    models/deepseek_v3.py@f4d8ec6e:1688-1693)."""
    return [1, target_layers // 2 - 1, target_layers - 4]


def layers_defaulting_to(ids: Any) -> int | None:
    """The layer count N of the one target whose defaults are `ids`, if any."""
    if not (isinstance(ids, list) and len(ids) == DEFAULT_TAP_COUNT and all(is_int(t) for t in ids)):
        return None
    layers = ids[-1] + 4
    return layers if layers > 4 and default_taps(layers) == ids else None


def unread_list_finding(declared: list[tuple[str, Any]], config_file: str, source: dict,
                        target_layers: int | None = None) -> Finding:
    """TAP002 for a tap list the target does not read: with eagle_config
    present it reads only eagle_config's list, finds none, and captures its
    defaults. So does the trainer that writes this shape: SpecForge trains
    on its run's list, else eagle_config's, else the same defaults, never
    the top-level one (specforge/algorithms/model_providers.py@a6b6b02:
    188-204), and TorchSpec on its run's list or the same defaults. A
    warning, then, not an error: the draft is served what such a trainer
    trained it on, and only a draft trained on the unread list by another
    trainer gets other layers. On a `target_layers` target whose defaults
    are the list, a note."""
    path, ids = declared[0]
    fits = layers_defaulting_to(ids)
    detail = {"declared": dict(declared), "target_ids": None, "defaults_for_layers": fits, "source": source}
    lead = (f"{config_file}: {path} = {_show(ids)} is not read by the target: with eagle_config present the "
            f"target reads only eagle_config.{TAP_IDS_FIELD}, finds none, and captures its default taps "
            f"{DEFAULT_TAPS_TEXT}")
    if target_layers is not None:
        served = default_taps(target_layers)
        detail.update(target_layers=target_layers, served=served)
        if served == ids:
            return Finding("TAP002", f"{lead}, {_show(served)} on this {target_layers}-layer target: the list, "
                           "so the draft is fed its layers either way.", file=config_file, detail=detail,
                           severity=Severity.INFO)
        lead = f"{lead}, {_show(served)} on this {target_layers}-layer target"
    elif fits is not None:
        lead = f"{lead}: this list on a {fits}-layer target, other layers on any other"
    return Finding(
        "TAP002",
        f"{lead}. SpecForge, which writes this config shape, trains on those same defaults (it reads only "
        f"eagle_config's list, or its run's), and TorchSpec on its run's list or the defaults: such a draft is "
        f"served the layers it was trained on, and this list is read by nothing. A draft trained on this list "
        f"by another trainer is not: then put it in eagle_config.{TAP_IDS_FIELD} (and at the top level for a "
        "Llama draft); otherwise remove it.",
        file=config_file, detail=detail, severity=Severity.WARNING)


def _show(ids: Any) -> str:
    return repr(ids)


def _fix_text(declared: list[tuple[str, Any]]) -> str:
    if declared:
        return f"Put the list the draft was trained on in eagle_config.{TAP_IDS_FIELD}."
    return f"Write the list the draft was trained on in {TAP_IDS_FIELD}."


def one_layer(model: str, source: str):
    """The EAGLE-3 models raise ValueError unless num_hidden_layers == 1."""

    def rule(config: Mapping[str, Any], config_file: str) -> list[Finding]:
        layers = config.get("num_hidden_layers")
        if layers == 1 or not is_int(layers):
            return []
        return [Finding(
            "CFG003",
            f"{config_file}: num_hidden_layers = {layers}; {model} supports exactly one layer and raises "
            f"ValueError at load ({source}). EAGLE-3 drafts are one layer: set num_hidden_layers: 1.",
            file=config_file,
            detail={"field": "num_hidden_layers", "validator": "const", "source": source},
        )]

    return rule


def head_rows(config: Mapping[str, Any]) -> Any:
    """Rows of the head the draft serves: the tied embedding's vocab_size,
    else `draft_vocab_size or vocab_size` (models/llama_eagle3.py@f4d8ec6e:
    618-625; models/deepseek_v3.py@f4d8ec6e:2294-2301)."""
    vocab = config.get("vocab_size")
    if config.get("tie_word_embeddings"):
        return vocab
    return config.get("draft_vocab_size") or vocab


# Tensors both EAGLE-3 models build outside the attention block, in their
# canonical (served) names.
SHARED_TENSORS = (
    TensorRule("fc.weight", ("h", "S*th"), role="context_proj"),
    TensorRule("midlayer.hidden_norm.weight", ("h",), role="context_norm"),
    TensorRule("norm.weight", ("h",), role="norm"),
    # fcn: the width the engine builds each fc_norm with (TokenSpeed: hidden_size).
    TensorRule("fc_norm.{i}.weight", ("fcn",), role="fc_norm", when="fc_norm"),
    TensorRule("midlayer.input_layernorm.weight", ("h",), role="norm"),
    TensorRule("midlayer.post_attention_layernorm.weight", ("h",), role="norm"),
    TensorRule("midlayer.mlp.gate_proj.weight", ("inter", "h")),
    TensorRule("midlayer.mlp.up_proj.weight", ("inter", "h")),
    TensorRule("midlayer.mlp.down_proj.weight", ("h", "inter")),
    # Shared from the target unless shipped (and then checked for rows).
    TensorRule("embed_tokens.weight", ("vocab", "h"), optional=True),
    # Whether the draft's own head is served, and whether d2t is needed,
    # depends on draft_vocab_size and tie_word_embeddings: judged by the
    # vocabulary rules (dspark.schema.rules.vocab).
    TensorRule("lm_head.weight", ("draft_vocab", "h"), role="lm_head", optional=True),
    TensorRule("d2t", ("draft_vocab",), role="token_map", optional=True, values_below="vocab"),
)

# TorchSpec's `--vllm` export names the block `layers.0.`; the engine maps
# it to `midlayer.` (models/llama_eagle3.py@f4d8ec6e:687-689;
# models/deepseek_v3.py@f4d8ec6e:2368).
# Earlier EAGLE-3 exports name the per-tap norms aux_norm_low/mid/high, which
# are fc_norm.0/1/2 (SGLang maps them: sglang/srt/models/llama_eagle3.py:
# 337-348@sglang==0.5.23).
EAGLE3_RENAMES = {"layers.0.": "midlayer.", "aux_norm_low.": "fc_norm.0.", "aux_norm_mid.": "fc_norm.1.",
                  "aux_norm_high.": "fc_norm.2."}
# Both EAGLE-3 loaders take any name holding `d2t` for the hot-token map and
# skip any holding `t2d` (models/llama_eagle3.py@f4d8ec6e:691-698,
# models/deepseek_v3.py@f4d8ec6e:2358-2364).
EAGLE3_NAMES_BY_PART = (("d2t", "d2t"), ("t2d", "t2d"))
