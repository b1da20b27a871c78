"""The SGLang drafting workers' startup checks that read the draft config,
called through the release's own functions, and what the built draft
leaves out of what the folder ships or declares.

The workers themselves need a running target (KV pools, CUDA graphs); the
checks below are the parts of their `__init__` that read the draft config,
called with the values the worker passes.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace


def check(algorithm: str, draft_config, target_config) -> str:
    """Raise as the drafting worker would at startup; return a note."""
    from sglang.srt.runtime_context import get_spec

    if algorithm == "DSPARK":
        # speculative/dspark_components/dspark_worker_v2.py::DSparkWorkerV2.__init__@0.5.23:245-265:
        # the mask token is bounded by the target's embedding rows.
        from sglang.srt.speculative.dspark_components.dspark_config import resolve_runtime_config

        rows = getattr(target_config.hf_text_config, "padded_vocab_size", None) or target_config.vocab_size
        runtime = resolve_runtime_config(draft_hf_config=draft_config.hf_config,
                                         speculative_num_draft_tokens=get_spec().speculative_num_draft_tokens,
                                         target_vocab_size=int(rows))
        return f"mask_token_id {runtime.mask_token_id}, gamma {runtime.gamma}"
    if algorithm == "DFLASH":
        # speculative/dflash_worker_v2.py::DFlashWorkerV2.__init__@0.5.23:451-536 parses the
        # draft config and resolves the mask token against the target
        # (::DFlashWorkerV2._resolve_mask_token_id@0.5.23:1391-1471).
        from sglang.srt.speculative.dflash_utils import parse_dflash_draft_config
        from sglang.srt.speculative.dflash_worker_v2 import DFlashWorkerV2

        parsed = parse_dflash_draft_config(draft_hf_config=draft_config.hf_config)
        if parsed.mask_token_id is None:
            # Without an id the worker takes the token from the target's
            # tokenizer (adding it when missing); a case's target has none.
            return f"mask token {parsed.mask_token!r} resolved from the target's tokenizer (not judged)"
        worker = SimpleNamespace(target_worker=SimpleNamespace(
            model_runner=SimpleNamespace(model_config=target_config), tokenizer=None))
        resolved = DFlashWorkerV2._resolve_mask_token_id(worker, mask_token=parsed.mask_token,
                                                         mask_token_id=parsed.mask_token_id)
        return f"mask_token_id {resolved}"
    return ""


def block_size_problems(algorithm: str, draft, draft_config) -> list[str]:
    """The block a DFLASH draft is served at, as its worker sets it
    (`speculative/dflash_worker_v2.py::DFlashWorkerV2.__init__@0.5.23:507-523`):
    the resolved --speculative-num-draft-tokens, handed to the draft model
    (`set_block_size`); a checkpoint that declares another block size only
    gets a log warning. Judged where the config declares one: otherwise
    what it was trained at is not written down."""
    from sglang.srt.runtime_context import get_spec

    if algorithm == "DSPARK":
        return _dspark_gamma_problems(get_spec().speculative_num_draft_tokens, draft_config)
    if algorithm != "DFLASH":
        return []
    from sglang.srt.speculative.dflash_utils import parse_dflash_draft_config

    declared = parse_dflash_draft_config(draft_hf_config=draft_config.hf_config).block_size
    launched = get_spec().speculative_num_draft_tokens
    if launched is None or declared is None:
        return []
    draft.set_block_size(int(launched))
    served = int(draft.block_size)
    if served == int(declared):
        return []
    return [f"the worker drafts blocks of {served} (--speculative-num-draft-tokens), the draft declares "
            f"block_size {declared}: served at the launch's size, with a log warning"]


def _dspark_gamma_problems(launched, draft_config) -> list[str]:
    """The gamma a DSPARK draft is served at, as its worker resolves it
    (speculative/dspark_components/dspark_config.py::resolve_runtime_config@0.5.23:84-134):
    from the resolved --speculative-num-draft-tokens (the launch's
    --speculative-dspark-block-size + 1 when given); a checkpoint that
    declares another gamma only gets a log warning."""
    from sglang.srt.speculative.dspark_components.dspark_config import (
        dspark_gamma_from_num_draft_tokens,
        parse_dspark_draft_config,
    )

    declared = parse_dspark_draft_config(draft_hf_config=draft_config.hf_config).resolve_gamma(default=None)
    if launched is None or declared is None:
        return []
    served = dspark_gamma_from_num_draft_tokens(int(launched))
    if served == int(declared):
        return []
    return [f"the worker drafts with gamma {served} (--speculative-num-draft-tokens {launched}), the draft "
            f"declares {declared}: served at the launch's gamma, with a log warning"]


def _shipped_names(folder: Path) -> set[str]:
    from safetensors import safe_open

    names: set[str] = set()
    for file in sorted(folder.glob("*.safetensors")):
        with safe_open(str(file), "pt") as handle:
            names.update(handle.keys())
    return names


def _declared(config, key: str):
    value = getattr(config, key, None)
    eagle = getattr(config, "eagle_config", None)
    if value is None and isinstance(eagle, dict):
        value = eagle.get(key)
    return value


def dropped_features(folder: Path, draft, draft_config) -> list[str]:
    """Features the folder declares or ships that the built draft has no module for.

    The loaders drop a name without a destination without a word
    (`models/llama_eagle3.py::LlamaForCausalLMEagle3.load_weights@0.5.23:325-378`,
    `models/dflash.py::DFlashDraftModel.load_weights@0.5.23:886-1000`), so a
    shipped tensor the draft was trained with is served as if absent."""
    modules = {name for name, _ in draft.named_modules()}
    parameters = {name for name, _ in draft.named_parameters()}
    shipped = _shipped_names(folder)
    config = draft_config.hf_config
    problems = []
    has_fc_norm = any(name.split(".")[-1] == "fc_norm" or ".fc_norm." in f"{name}." for name in modules)
    ships_fc_norm = any("fc_norm." in name or "aux_norm_" in name for name in shipped)
    if (_declared(config, "fc_norm") or ships_fc_norm) and not has_fc_norm:
        problems.append("fc_norm declared or shipped, but the built draft has no fc_norm: the taps are not normalised")
    has_input_norm = any(name.endswith("input_norm") for name in modules)
    if any(name.split(".")[-2:-1] == ["input_norm"] for name in shipped) and not has_input_norm:
        problems.append("input_norm shipped, but the built draft has none: dropped")
    if any(name.startswith(("markov_head.", "model.markov_head.")) for name in shipped) and \
            not any(".markov_head." in f".{name}" for name in parameters):
        problems.append("a Markov head shipped, but the built draft has none: dropped")
    if any(name.endswith(("q_proj.bias", "k_proj.bias", "v_proj.bias")) for name in shipped) and \
            not any(name.endswith("qkv_proj.bias") for name in parameters):
        problems.append("q/k/v biases shipped, but the built attention has none: dropped")
    return problems


def dflash2_problems(folder: Path, draft, draft_config) -> list[str]:
    """What a DFlash2 draft declares or ships that the built model does not
    serve: the grouped convolutions and the candidate selector dropped by
    the loader when the model built none
    (`models/dflash.py::DFlashDraftModel.__init__@0.5.23:718-740`, only with
    dflash_config.conv_kernel_size), and the logit and embedding scales the
    model serves with (`::DFlash2DraftModel._transform_unary_logits@0.5.23:1284-1291`,
    read from the parsed config) against those the config writes."""
    if getattr(draft, "candidate_selector", None) is None:
        return []
    problems = []
    parameters = {name for name, _ in draft.named_parameters()}
    shipped = {name.removeprefix("model.") for name in _shipped_names(folder)}
    for part in ("_conv.", "candidate_selector."):
        dropped = sorted(name for name in shipped if part in name and name not in parameters)
        if dropped:
            problems.append(f"{len(dropped)} {part.strip('._')} weight(s) shipped, but the built draft has no "
                            f"such parameter: dropped ({', '.join(dropped[:3])})")
    config = json.loads((folder / "config.json").read_text())
    nested = config.get("dflash_config") if isinstance(config.get("dflash_config"), dict) else {}
    served = {"output_multiplier": float(draft.draft_config.output_multiplier),
              "final_logit_softcapping": float(draft.draft_config.final_logit_softcapping or 0.0)}
    for key, value in served.items():
        written = nested.get(key, config.get(key))
        if written is not None and float(written or 0.0) != value:
            problems.append(f"{key} {written!r} written, the model serves {value!r}")
    scale = nested.get("input_embedding_scale", config.get("input_embedding_scale"))
    if scale is not None and float(scale) != 1.0 and not any(
            hasattr(holder, "input_embedding_scale") for holder in (draft, draft.draft_config)):
        problems.append(f"input_embedding_scale {scale!r} written, the model has none: the embedding is "
                        "served unscaled")
    return problems


def stream_problems(folder: Path, served_stream: str | None) -> list[str]:
    """`aux_hidden_stream` is never read by SGLang: the target decides the
    stream (`sglang_target.captured_layers` reads which)."""
    declared = _aux_hidden_stream(folder) or "prefix"
    if served_stream is None or declared == served_stream:
        return []
    return [f"aux_hidden_stream {declared!r} declared, the target hands over its {served_stream!r} stream"]


def hot_token_map_problems(algorithm: str, draft, target_vocab: int) -> list[str]:
    """The EAGLE-3 hot-token map as the worker takes it.

    `speculative/eagle_worker_v2.py::EagleWorkerV2.init_lm_head@0.5.23:336-369`
    takes the draft's `hot_token_id` (d2t + arange, never checked:
    `models/llama_eagle3.py::LlamaForCausalLMEagle3.load_weights@0.5.23:350-352`)
    as the map from the draft head's rows to target ids; without one the
    rows are served as target ids."""
    if algorithm != "EAGLE3":
        return []
    head = getattr(draft, "lm_head", None)
    # VocabParallelEmbedding pads its rows; the tokens it scores are org_vocab_size
    # (layers/vocab_parallel_embedding.py::VocabParallelEmbedding.__init__@0.5.23).
    rows = getattr(head, "org_vocab_size", None)
    hot = getattr(draft, "hot_token_id", None)
    if hot is None:
        if rows is not None and rows < target_vocab:
            return [f"the draft head scores {rows} tokens of {target_vocab} and no d2t was loaded: "
                    f"its rows are served as target ids"]
        return []
    problems = []
    if hot.is_floating_point():
        problems.append(f"the hot-token map (d2t) is {hot.dtype}: token ids are taken from floats")
    if rows is not None and hot.shape[0] != rows:
        problems.append(f"the hot-token map (d2t) has {hot.shape[0]} entries for a head of {rows} rows")
    return problems


def _aux_hidden_stream(folder: Path):
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    nested = config.get("dflash_config") if isinstance(config.get("dflash_config"), dict) else {}
    value = nested.get("aux_hidden_stream", config.get("aux_hidden_stream"))
    return str(value).lower() if value is not None else None
