"""How the TokenSpeed probe reads what a release did with a loaded draft:
which target layers it captures (in the suite numbering), and what it serves
otherwise than trained without a word (each check cites the 0.1.1 code,
paths under tokenspeed/runtime/)."""

from __future__ import annotations


def capture_reading(target) -> tuple[list[int] | None, str | None]:
    """What the target captures, in the suite numbering (the residual after
    layer k, 0-based), and the stream it hands over.

    Kimi-K3's text model captures a DFlash tap *after* layer k
    (models/kimi_k3.py:3534-3541, ids taken as 0-based outputs at 3660-3680)
    and an EAGLE-3 tap after layer k-1 for a one-based id k
    (kimi_k3.py:3538, 3639-3658). Every other target captures the residual
    *entering* layer i for i in `layers_to_capture`
    (models/base/transformer_model.py:209-211, deepseek_v3.py:1995-1997,
    qwen3_5.py:1019-1024), so its ids are one more than ours."""
    language = getattr(target, "language_model", None) or target
    inner = getattr(language, "model", None)
    if inner is None or not hasattr(inner, "layers_to_capture"):
        return None, None
    if hasattr(inner, "dflash_aux_stream"):
        if inner.layers_to_capture:
            return sorted(inner.layers_to_capture), inner.dflash_aux_stream
        if getattr(inner, "eagle3_layers_to_capture", ()):
            return sorted(k - 1 for k in inner.eagle3_layers_to_capture), "prefix"
        return [], inner.dflash_aux_stream
    return sorted(k - 1 for k in inner.layers_to_capture), "prefix"


def _declared(config: dict, key: str):
    """A key as the draft declares it: nested dflash_config first (where
    trainers write it), else the top level."""
    nested = config.get("dflash_config")
    if isinstance(nested, dict) and nested.get(key) is not None:
        return nested.get(key)
    return config.get(key)


# Checkpoint tensors a loader skips by design, each served from elsewhere or
# unused in serving: the embedding (the target's is shared in; the draft's is
# a frozen copy of it: models/kimi_k3_dspark.py:397-416, factory.py:81-113),
# K3's training-only confidence head (configs/kimi_k3_dspark_config.py:39-41,
# 177-191) and EAGLE-3's target-to-draft table (models/llama_eagle3.py:654).
SKIPPED_BY_DESIGN = ("embed_tokens.", "confidence_head.", "t2d")


def dropped_trained_tensors(dropped: list[str]) -> list[str]:
    """Shipped tensors the loader read into nothing, but those it skips by
    design: the draft was trained with them and runs without."""
    lost = [name for name in dropped if not any(marker in name for marker in SKIPPED_BY_DESIGN)]
    if not lost:
        return []
    return [f"{len(lost)} shipped tensor(s) never read by the loader: {lost[:6]}"]


def proposal_checks(algorithm, config, draft, captured, target_config, drafter=None) -> list[str]:
    """What the drafter reads at startup and uses at the first request.
    `drafter`: where the model keeps no tap list (0.1.0's DFlash model), the
    drafter's, which it hands to the target (execution/model_executor.py@
    0.1.0:410-423; execution/drafter/dflash.py@0.1.0:91-95)."""
    wrong = []
    text = target_config.hf_text_config
    target_vocab = int(getattr(text, "vocab_size", 0) or 0)
    draft_config = draft.config
    for field in ("rms_norm_eps", "rope_theta"):
        value = getattr(draft_config, field, None)
        if isinstance(value, float) and value != value:
            wrong.append(f"{field} is NaN: every layer it feeds computes NaN")
    if algorithm in ("DFLASH", "DSPARK"):
        # The drafter fills every block with the mask token and embeds it
        # with the target's embedding (execution/drafter/dflash.py:150-161,
        # 251-256, 282): an id outside the target vocabulary indexes past it.
        nested = getattr(draft_config, "dflash_config", None) or {}
        mask = nested.get("mask_token_id", getattr(draft_config, "mask_token_id", None))
        if mask is not None and target_vocab and not 0 <= int(mask) < target_vocab:
            wrong.append(f"mask_token_id {mask} is outside the target's {target_vocab}-token embedding")
        # The taps reach the draft in capture order, ascending (kimi_k3.py:3677-3683,
        # qwen3_5.py:1434-1450, causal_lm.py:304-306); the draft's projection
        # columns follow its declared order.
        declared = list(getattr(draft, "target_layer_ids", None) or getattr(drafter, "target_layer_ids", None) or [])
        if captured is not None and declared and declared != list(captured):
            wrong.append(f"the draft declares taps in the order {declared}, the target hands them over as {captured}")
    if algorithm == "EAGLE3":
        # The drafter maps draft ids to target ids through d2t when loaded
        # (execution/drafter/eagle.py:130-135; llama_eagle3.py:648-652).
        # The head's vocabulary before padding (layers/vocab_parallel_embedding.py:279-281).
        rows = getattr(getattr(draft, "lm_head", None), "org_vocab_size", None)
        hot = draft.get_hot_token_id() if hasattr(draft, "get_hot_token_id") else None
        if hot is None and rows and target_vocab and rows != target_vocab:
            wrong.append(f"the draft head has {rows} rows and no d2t map: its ids are read as target ids "
                         f"of a {target_vocab}-token vocabulary")
        if hot is not None:
            if hot.is_floating_point():
                wrong.append(f"d2t is {hot.dtype}: the target-id map is not an integer table")
            if rows and hot.shape[0] != rows:
                wrong.append(f"d2t maps {hot.shape[0]} draft ids, the draft head has {rows} rows")
    return wrong


def served_wrong(config, draft, captured, stream, trained, unwritten, target_config) -> list[str]:
    """What loaded without a word but is not served as trained."""
    wrong = []
    if unwritten:
        wrong.append(f"{len(unwritten)} parameter(s) never written by the loader: {unwritten[:6]}")
    if trained is not None and captured is not None and list(captured) != list(trained):
        wrong.append(f"the target captures layers {captured}, the draft was trained on {trained}")
    declared_stream = str(_declared(config, "aux_hidden_stream") or "prefix").lower()
    if stream is not None and declared_stream != stream:
        wrong.append(f"the draft declares aux_hidden_stream {declared_stream!r}, the target hands over {stream!r}")
    # K3 builds `fc_norm` on the model itself, EAGLE-3 on its inner `model`.
    has_fc_norm = any(name.rsplit(".", 1)[-1] == "fc_norm" for name, _ in draft.named_modules())
    if _declared(config, "fc_norm") and not has_fc_norm:
        wrong.append("the draft declares fc_norm, the model builds no fc_norm modules")
    # The projection takes the captured states concatenated: K3's context_proj
    # (kimi_k3_dspark.py:472), GQA DFlash's fc (dflash.py:386-391), EAGLE-3's
    # model.fc (llama_eagle3.py; deepseek_v3.py Eagle3 classes).
    projection = next((module for module in (getattr(draft, "context_proj", None), getattr(draft, "fc", None),
                                             getattr(getattr(draft, "model", None), "fc", None))
                       if module is not None), None)
    width = getattr(getattr(projection, "weight", None), "shape", (None, None))[-1]
    target_hidden = getattr(target_config.hf_text_config, "hidden_size", None)
    # On a pipeline each stage projects only the taps it owns
    # (models/kimi_k3_dspark.py:342-352): the last stage's width is its own
    # taps' (the probe checks the stages together own every tap).
    mapping = getattr(draft, "mapping", None)
    taps_here = (len(draft.local_tap_indices) if getattr(mapping, "has_pp", False)
                 and hasattr(draft, "local_tap_indices") else len(captured or ()))
    if captured and width is not None and target_hidden and width != taps_here * int(target_hidden):
        wrong.append(f"the projection takes {width} features, the target hands over "
                     f"{len(captured)} x {target_hidden}")
    return wrong


def dflash2_served_wrong(config, draft, drafter) -> list[str]:
    """A DFlash2 draft's serve-time scales as the release holds them, against
    what the draft declares anywhere (trained with): the model's
    input_embedding_scale (models/dflash2.py:427-429, dflash_config first,
    else the top level), the drafter's output_multiplier and
    final_logit_softcapping (execution/drafter/dflash2.py:86-91, dflash_config only)."""
    if drafter is None or not hasattr(drafter, "candidate_selector"):
        return []
    wrong = []
    held = {"input_embedding_scale": getattr(draft, "input_embedding_scale", 1.0),
            "output_multiplier": getattr(drafter, "output_multiplier", 1.0),
            "final_logit_softcapping": getattr(drafter, "final_logit_softcapping", 0.0)}
    neutral = {"input_embedding_scale": 1.0, "output_multiplier": 1.0, "final_logit_softcapping": 0.0}
    for key, value in held.items():
        declared = _declared(config, key)
        trained = float(declared) if declared is not None else neutral[key]
        if float(value or 0.0) != trained:
            wrong.append(f"the draft declares {key} {declared!r}, the release serves {value!r}")
    return wrong


def dflash2_cache_refusal(draft, draft_config) -> str | None:
    """The KV cache the engine lays out for the draft: MLA only when its
    config says so (configs/model_config.py:354-366, 748); a model built
    with MLA attention writes a latent into it (models/dflash2.py:459-482),
    which a per-head cache has no buffer for: the first request fails."""
    uses_mla = getattr(draft, "_uses_mla", False)
    arch = getattr(getattr(draft_config, "attention_arch", None), "name", None)
    if type(draft).__name__ == "DFlash2DraftModel" and uses_mla and arch != "MLA":
        return (f"the model builds MLA attention but the engine lays the draft's KV cache out as {arch}: "
                "write_context_kv calls set_mla_kv_buffer on a per-head pool at the first request")
    return None
