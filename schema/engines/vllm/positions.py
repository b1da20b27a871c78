"""A draft's `max_position_embeddings` against the context vLLM serves,
per release (read in each wheel; `path::name@vllm==X:lines`).

The drafter is fed the target's positions, up to the server's
max_model_len (`--max-model-len`, else derived from the target's config:
config/model.py::_get_and_verify_max_len). The draft's rotary cache is
built by `get_rope(max_position=config.max_position_embeddings, ...)`
(model_executor/layers/rotary_embedding/__init__.py::get_rope), whose rows
are max_position (default, llama3, ntk, proportional, dynamic), max_position
x factor (linear) or original_max_position_embeddings x factor (yarn,
deepseek_yarn); longrope, and dynamic given `max_trained_positions`, also
derive their frequencies from max_position
(dynamic_ntk_scaling_rope.py::DynamicNTKScalingRotaryEmbedding._compute_cos_sin_cache).
A position past the last row gathers outside the cache: no check, no
message, a wrong rotation (served wrong). vLLM derives a dynamic config's
length as max_position x factor (config/model.py::_get_and_verify_max_len),
past its cache's rows.

* 0.30.0-0.32.0: `SpeculativeConfig.__post_init__` raises the draft's
  max_position_embeddings to the target's max_model_len for methods eagle
  and eagle3 only, whatever the RoPE type
  (`_maybe_override_draft_max_position_embeddings`); a DFlash or DSpark
  draft keeps its own, and nothing lowers the server's length to it (the
  draft's own max_model_len, `_maybe_override_draft_max_model_len`, is
  read by no runner): positions past its cache are served wrong. Raised,
  a dynamic or longrope draft gets other frequencies than it was trained
  with, and a YaRN draft's cache (sized from
  original_max_position_embeddings) does not grow.
* 0.33.0: the raise is for every method but draft_model, and only when
  every RoPE type of the draft merely sizes the cache (`_CACHE_ONLY_ROPE_TYPES`);
  for any other type, Model Runner V2 lowers the server's max_model_len to
  the draft's (config/vllm.py::VllmConfig._limit_max_model_len_to_draft):
  served as trained, on a shorter context, with a warning in the log.
  (The V1 runner, which 0.33.0 falls back to for some options, skips
  speculation past the draft's length instead.)

Without a length (no `--max-model-len`, no `--target` stating
max_position_embeddings) or a draft config without max_position_embeddings
(its model class's default then applies), nothing is judged.
"""

from __future__ import annotations

from typing import Any, Mapping

from dspark.schema.engines.base import Source
from dspark.schema.findings import Finding

SPECULATIVE = "vllm/config/speculative.py"
MODEL_CONFIG = "vllm/config/model.py"
VLLM_CONFIG = "vllm/config/vllm.py"
ROPE = "vllm/model_executor/layers/rotary_embedding/__init__.py"

# 0.33.0's _CACHE_ONLY_ROPE_TYPES (config/speculative.py:100-106): the
# types a raise of max_position only gives more cache rows.
CACHE_ONLY = frozenset({"default", "linear", "llama3", "ntk", "proportional"})

# Types sized from original_max_position_embeddings x factor.
FROM_ORIGINAL = frozenset({"yarn", "deepseek_yarn", "deepseek_llama_scaling"})
# _get_and_verify_max_len leaves these unscaled by `factor`.
LENGTH_NOT_SCALED = frozenset({"su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling"})

# Per release: (the raise: call site lines, helper lines; get_rope lines;
# _get_and_verify_max_len lines).
_LINES = {
    "0.33.0": ("1503-1511", "1807-1846", "32-352", "2545-2634"),
    "0.32.0": ("1393-1400", "1677-1709", "32-352", "2527-2616"),
    "0.31.0": ("1387-1394", "1671-1703", "32-348", "2471-2570"),
    "0.30.0": ("1373-1380", "1659-1690", "32-348", "2393-2492"),
}


def _at(version: str, path: str, lines: str, qualname: str) -> Source:
    return Source(path, lines, f"vllm=={version}", qualname)


def sources(version: str) -> dict[str, Source]:
    """What the rule cites in `version` (the launch model holds them, so the
    fingerprint tables and `dspark families` find them)."""
    call, helper, rope_lines, derive = _LINES[version]
    found = {
        "raise": _at(version, SPECULATIVE, f"{helper} (called from SpeculativeConfig.__post_init__:{call})",
                     "SpeculativeConfig._maybe_override_draft_max_position_embeddings"),
        "rope": _at(version, ROPE, rope_lines, "get_rope"),
        "derive": _at(version, MODEL_CONFIG, derive, "_get_and_verify_max_len"),
    }
    if version == "0.33.0":
        found["limit"] = _at(version, VLLM_CONFIG, "3025-3051", "VllmConfig._limit_max_model_len_to_draft")
    return found


def rope_blocks(config: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The draft's RoPE parameter blocks as vLLM iterates them (one, or one
    per layer type); [{}] for none (default RoPE)."""
    block = config.get("rope_parameters") or config.get("rope_scaling")
    if not isinstance(block, Mapping):
        return [{}]
    nested = [b for b in block.values() if isinstance(b, Mapping)]
    return nested if nested and all(isinstance(b, Mapping) for b in block.values()) else [block]


def rope_type(block: Mapping[str, Any]) -> str:
    kind = block.get("rope_type", block.get("type", "default"))
    return str(kind).lower() if isinstance(kind, str) else "default"


def rotation_follows_length(block: Mapping[str, Any]) -> bool:
    """Whether a raise of max_position changes the rotation, not only the
    cache's rows: longrope's scale, and dynamic NTK's base when
    max_trained_positions is given (else the ratio is the factor alone)."""
    kind = rope_type(block)
    return kind == "longrope" or (kind == "dynamic" and "max_trained_positions" in block)


def _factor(block: Mapping[str, Any]) -> float:
    factor = block.get("factor", 1.0)
    return float(factor) if isinstance(factor, (int, float)) and not isinstance(factor, bool) and factor > 0 else 1.0


def cache_rows(block: Mapping[str, Any], max_position: int, own_max_position: int) -> int | None:
    """Rows of the cos/sin cache get_rope builds for one block at
    `max_position` (None: a type not judged here). transformers fills a
    YaRN block's original_max_position_embeddings from the config's own
    value when the config is read, before any raise."""
    kind = rope_type(block)
    if kind in ("default", "llama3", "ntk", "proportional", "longrope") or (kind == "dynamic"
                                                                          and "alpha" not in block):
        return max_position
    if kind == "linear":
        return int(max_position * _factor(block))
    if kind in FROM_ORIGINAL:
        original = block.get("original_max_position_embeddings", own_max_position)
        return int(original * _factor(block)) if isinstance(original, int) else None
    return None


def derived_length(max_position: Any, blocks: list[Mapping[str, Any]]) -> int | None:
    """The max_model_len vLLM derives from a config (no tokenizer limit):
    max_position_embeddings x the RoPE factor, unless the type already
    counts it (config/model.py::_get_and_verify_max_len)."""
    if not isinstance(max_position, int) or isinstance(max_position, bool) or max_position <= 0:
        return None
    factor = 1.0
    for block in blocks:
        if rope_type(block) not in LENGTH_NOT_SCALED:
            factor = _factor(block)
    return int(max_position * factor)


def served_length(target: Any, launched: int | None) -> tuple[int | None, str]:
    """The server's max_model_len before the draft is read, and where it comes from."""
    if launched is not None:
        return launched, f"--max-model-len {launched}"
    if target is None:
        return None, ""
    max_position, rope = target.context
    length = derived_length(max_position, [rope] if isinstance(rope, Mapping) else [{}])
    if length is None:
        return None, ""
    return length, f"the target's derived max_model_len, {length} ({target.source})"


def draft_method(family: str, config: Mapping[str, Any]) -> str:
    if family.startswith("eagle3"):
        return "eagle3"
    if family == "k3_dspark":
        return "dspark"
    names = " ".join(a for a in config.get("architectures") or () if isinstance(a, str)).lower()
    return "dspark" if "dspark" in names else "dflash"


def _finding(code: str, message: str, *, file: str, detail: dict, action: str = "") -> Finding:
    return Finding(code, f"{message} {action}".strip(), file=file, detail=detail)


def judge(version: str, family: str, config: Mapping[str, Any], config_file: str, target: Any,
          launched: int | None, cited: Mapping[str, Source] | None = None,
          draft_max_model_len: int | None = None) -> list[Finding]:
    """`draft_max_model_len`: the launch's --speculative-config max_model_len
    (already judged no greater than the draft's or the served length): the
    draft's max_model_len, which 0.33.0 lowers the server's to in place of
    the one derived from the draft's config."""
    own = config.get("max_position_embeddings")
    if not isinstance(own, int) or isinstance(own, bool) or own <= 0:
        return []
    length, length_from = served_length(target, launched)
    if length is None or own >= length:
        return []
    cited = cited if cited is not None else sources(version)
    blocks = rope_blocks(config)
    kinds = sorted({rope_type(b) for b in blocks})
    method = draft_method(family, config)
    raise_site, rope = cited["raise"], cited["rope"]
    if version == "0.33.0":
        raised = all(k in CACHE_ONLY for k in kinds)
        why_not = f"its RoPE type ({', '.join(kinds)}) is not one that only sizes the cache"
    else:
        raised = method in ("eagle", "eagle3")
        why_not = f"the raise is for methods eagle and eagle3 only, and this draft runs as {method}"
    where = f"{config_file}: max_position_embeddings {own} is below the served length {length} ({length_from})"
    detail = {"field": "max_position_embeddings", "max_position_embeddings": own, "served_length": length,
              "rope_types": kinds, "method": method}

    if raised:
        moved = sorted({rope_type(b) for b in blocks if rotation_follows_length(b)})
        if moved:
            return [_finding(
                "ROP003", f"{where}; vLLM {version} raises it to {length} ({raise_site.cite()}), and the draft's "
                f"{'/'.join(moved)} RoPE derives its frequencies from it ({rope.cite()}): every position is "
                "rotated otherwise than in training, without a word.",
                file=config_file, detail={**detail, "raised_to": length, "rotation": "changed"},
                action=f"Serve it on vLLM 0.33.0 or later (which leaves such a draft's length and lowers the "
                       f"server's), or launch with --max-model-len {own}.")]
        rows = [cache_rows(b, length, own) for b in blocks]
        short = min((r for r in rows if r is not None), default=None)
        if short is not None and short < length:
            return [_finding(
                "ROP003", f"{where}; vLLM {version} raises it to {length} ({raise_site.cite()}), but the "
                f"{'/'.join(kinds)} rotary cache is sized from original_max_position_embeddings x factor, "
                f"{short} rows ({rope.cite()}): positions from {short} on gather outside it, without a word.",
                file=config_file, detail={**detail, "raised_to": length, "cache_rows": short},
                action=f"Launch with --max-model-len {short} or less, or write the RoPE the draft was trained "
                       f"with for {length} positions.")]
        return [_finding(
            "ROP005", f"{where}; vLLM {version} raises it to {length} ({raise_site.cite()}): the {'/'.join(kinds)} "
            "RoPE only sizes its cache by it, so the rotation is the trained one.",
            file=config_file, detail={**detail, "raised_to": length})]

    rows = [cache_rows(b, own, own) for b in blocks]
    if any(r is None for r in rows):
        return []
    cache = min(rows)
    if version == "0.33.0":
        draft_length = draft_max_model_len if draft_max_model_len is not None else derived_length(own, blocks)
        limit = cited["limit"]
        if draft_length is not None and draft_length < length and cache >= draft_length:
            return [_finding(
                "ROP004", f"{where}; vLLM {version} leaves it ({why_not}: {raise_site.cite()}) and Model Runner "
                f"V2 lowers the server's max_model_len to the draft's, {draft_length}"
                f"{' (the --speculative-config max_model_len)' if draft_max_model_len is not None else ''} "
                f"({limit.cite()}): served as "
                "trained, on a shorter context than the target's, with a warning in the server's log only.",
                file=config_file, detail={**detail, "served_length": draft_length, "requested_length": length},
                action="Nothing, if that context is enough; else write the length the draft was trained at, or "
                       "serve a draft trained for the target's context.")]
        served = min(length, draft_length or length)
    else:
        served = length
    if cache >= served:
        return []
    return [_finding(
        "ROP003", f"{where}; vLLM {version} leaves it ({why_not}: {raise_site.cite()}) and serves {served} "
        f"positions, but the draft's rotary cache holds {cache} rows ({rope.cite()}; the length derived in "
        f"{cited['derive'].cite()} caps only the draft's own "
        f"max_model_len, which no runner reads): positions from {cache} on gather outside it, without a word.",
        file=config_file, detail={**detail, "cache_rows": cache},
        action=f"Launch with --max-model-len {cache} or less, serve it on vLLM 0.33.0 or later (which raises the "
               "length of a draft whose RoPE only sizes its cache), or set max_position_embeddings to the "
               "target's length if the draft's RoPE allows it.")]
