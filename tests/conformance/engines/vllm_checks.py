"""What the vLLM probe reads off the engine's objects once they are built:
which layers the target captures, which parameters the loader never wrote,
and whether the draft is served as it declares (engine side; runs with the
vLLM release's environment)."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import torch
from outcomes import LOADED, SERVED_WRONG, Case, Outcome, norm_problems
from safetensors import safe_open


def _capture_holder(target: torch.nn.Module) -> torch.nn.Module:
    """The module that holds the capture set, unwrapped as
    vllm/model_executor/models/interfaces.py::SupportsEagle3.set_aux_hidden_state_layers@0.33.0:1730-1746 does."""
    parent = target
    if hasattr(target, "get_language_model"):
        parent = target.get_language_model()
    elif hasattr(target, "language_model"):
        parent = target.language_model
    return getattr(parent, "model", parent)


def captured_ids(target: torch.nn.Module) -> tuple[int, ...]:
    """The ids the target keeps after set-up: sorted and de-duplicated
    (interfaces.py::EagleModelMixin._set_aux_hidden_state_layers@0.33.0:1616-1617)."""
    return tuple(_capture_holder(target).aux_hidden_state_layers)


def suite_layers(ids: tuple[int, ...] | None, target: torch.nn.Module) -> list[int]:
    """vLLM id k is hidden_states[k], the input of target layer k: the
    forward captures id `start_layer` before the first layer and id i + 1
    after layer i (llama.py::LlamaModel.forward@0.33.0:427-441; Qwen2/3,
    DeepSeek and Kimi-K3 alike), so ids 0..N are reached and an id past N
    is never captured. In the suite's numbering id k is layer k - 1."""
    if not ids:
        return []
    layers = len(_capture_holder(target).layers)
    return [k - 1 for k in ids if 0 <= k <= layers]


def served_stream(target: torch.nn.Module) -> str:
    """The stream the Kimi-K3 target captures: AttnRes only with the
    server-wide switch and a target with AttnRes blocks
    (vllm/models/kimi_k3/nvidia/model.py::KimiK3Model._capture_aux_hidden_stream@0.33.0:1071-1081);
    every other target captures the prefix residual."""
    holder = _capture_holder(target)
    if getattr(holder, "_aux_attn_res_stream", False) and getattr(holder, "use_attn_res", False):
        return "attn_res"
    return "prefix"


class Sentinel:
    """Fills every parameter of the draft with a value no checkpoint holds
    (the dtype's most negative finite value; int: its minimum) right before
    the default loader runs, and notes which still hold it after the loader
    (vllm/model_executor/model_loader/default_loader.py::DefaultModelLoader.load_weights@0.33.0:489-515)."""

    def __init__(self) -> None:
        self.unwritten: list[str] = []

    @staticmethod
    def _value(dtype: torch.dtype):
        return torch.finfo(dtype).min if dtype.is_floating_point else torch.iinfo(dtype).min

    @staticmethod
    def holds(tensor: torch.Tensor) -> bool:
        if tensor.is_meta or tensor.dtype == torch.bool or tensor.numel() == 0:
            return False
        return bool((tensor.detach() == Sentinel._value(tensor.dtype)).any())

    @contextlib.contextmanager
    def around(self, loader_class):
        original = loader_class.load_weights
        sentinel = self

        def load_weights(loader, model, model_config):
            with torch.no_grad():
                for parameter in model.parameters():
                    if not parameter.is_meta and parameter.dtype != torch.bool:
                        parameter.fill_(Sentinel._value(parameter.dtype))
            original(loader, model, model_config)
            sentinel.unwritten = [name for name, p in model.named_parameters() if Sentinel.holds(p)]

        loader_class.load_weights = load_weights
        try:
            yield self
        finally:
            loader_class.load_weights = original


def drafter_startup(vllm_config) -> None:
    """The DFlash/DSpark drafter's mask token, read as its speculator does at
    start-up (vllm/v1/worker/gpu/spec_decode/utils.py::get_parallel_drafting_token_id@0.33.0:92-114,
    called from dflash/speculator.py::DFlashSpeculator.__init__:64-66)."""
    speculative = vllm_config.speculative_config
    if speculative.method in ("dflash", "dspark"):
        from vllm.v1.worker.gpu.spec_decode.utils import get_parallel_drafting_token_id
        get_parallel_drafting_token_id(speculative.draft_model_config.hf_config)
    elif speculative.parallel_drafting:
        parallel_eagle_mask_token(speculative)


def parallel_eagle_mask_token(speculative) -> int:
    """A P-EAGLE draft's mask token, read by the V1 proposer the server runs
    it on (Model Runner V2 has no parallel EAGLE: config/vllm.py@0.33.0:3070-3077)
    at start-up (v1/spec_decode/llm_base_proposer.py::
    SpecDecodeBaseProposer._init_parallel_drafting_params@0.33.0:355-384), which
    raises on a config without one. A null one is taken as it is, and the
    first request hands None to the kernel that fills the parallel
    positions: refused there."""
    from types import SimpleNamespace

    from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer

    reader = SimpleNamespace(draft_model_config=speculative.draft_model_config, pass_hidden_states_to_model=False,
                             parallel_drafting_token_id=0)
    SpecDecodeBaseProposer._init_parallel_drafting_params(reader)
    token = reader.parallel_drafting_token_id
    if not isinstance(token, int) or isinstance(token, bool):
        raise ValueError(f"parallel_drafting_token_id is {token!r}: the first request's input preparation "
                         "has no token for the parallel positions")
    return token


def parallel_eagle_capture(target, speculative) -> None:
    """The V1 runner's capture set-up for a P-EAGLE draft: the ids its
    `_get_eagle3_aux_layers_from_config` reads, else the target's defaults
    (v1/worker/gpu_model_runner.py::GPUModelRunner._setup_eagle3_aux_hidden_state_outputs@0.33.0:5169-5188,
    _get_eagle3_aux_layers_from_config:5190-5224)."""
    from types import SimpleNamespace

    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    ids = GPUModelRunner._get_eagle3_aux_layers_from_config(SimpleNamespace(speculative_config=speculative))
    target.set_aux_hidden_state_layers(ids or target.get_eagle3_default_aux_hidden_state_layers())


def unread_parameters(draft: torch.nn.Module) -> set[str]:
    """Parameters the built draft never reads, whatever they hold: DFlash's
    `mask_embedding` unless a `mask_embedding.pt` was shipped
    (vllm/model_executor/models/qwen3_dflash.py@0.33.0:457-461, 499-502, 875-878)."""
    inner = getattr(draft, "model", None)
    if inner is not None and hasattr(inner, "has_separate_mask_embedding") and not inner.has_separate_mask_embedding:
        return {"model.mask_embedding"}
    return set()


def _declared(config, name: str):
    """A draft field as vLLM's DFlash/DSpark readers look it up: in
    `dflash_config` first, then at the top level."""
    nested = getattr(config, "dflash_config", None)
    if isinstance(nested, dict) and name in nested:
        return nested[name]
    return getattr(config, name, None)


def _layer_type_problems(config, modules: dict) -> list[str]:
    """Each declared `layer_types` entry against the attention the draft
    built for that layer: a sliding layer must have a window, a chunked one
    a chunked-local attention (vLLM builds every layer that is not
    `sliding_attention` as full attention: qwen3_dflash.py@0.33.0:59-73, 96-157)."""
    declared = getattr(config, "layer_types", None)
    if not isinstance(declared, list):
        return []
    problems = []
    for index, kind in enumerate(declared):
        built = [m for n, m in modules.items() if n.startswith(f"model.layers.{index}.") and hasattr(m, "sliding_window")]
        if not built:
            continue
        if kind == "sliding_attention" and all(getattr(m, "sliding_window", None) is None for m in built):
            problems.append(f"layer {index} declared sliding_attention, built with no window")
        if kind == "chunked_attention" and not any("chunk" in type(m).__name__.lower() for m in built):
            problems.append(f"layer {index} declared chunked_attention, built as {type(built[0]).__name__} "
                            "without a chunk")
    return problems


def _shipped_names(folder: str) -> list[str]:
    names: list[str] = []
    for path in sorted(Path(folder).glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as handle:
            names.extend(handle.keys())
    return names


def _input_projection(draft: torch.nn.Module) -> torch.nn.Module | None:
    modules = dict(draft.named_modules())
    for name in ("model.fc", "model.context_proj"):
        if name in modules:
            return modules[name]
    return None


def _dflash2_scales(config, draft: torch.nn.Module) -> list[str]:
    """A DFlash2 draft's serve-time scales as the model holds them
    (qwen3_dflash2.py@0.33.0:376-379 the embedding scale, 400-406 the
    candidates' logits), against what the draft declares anywhere: the
    value it was trained with."""
    processor = getattr(draft, "candidate_logits_processor", None)
    if processor is None:
        return []
    held = {"input_embedding_scale": getattr(getattr(draft, "model", None), "input_embedding_scale", 1.0),
            "output_multiplier": getattr(processor, "scale", 1.0),
            "final_logit_softcapping": getattr(processor, "soft_cap", None) or 0.0}
    neutral = {"input_embedding_scale": 1.0, "output_multiplier": 1.0, "final_logit_softcapping": 0.0}
    problems = []
    for key, value in held.items():
        declared = _declared(config, key)
        trained = float(declared) if declared is not None else neutral[key]
        if float(value) != trained:
            problems.append(f"{key} {declared!r} declared, the model serves {value!r}")
    return problems


def _own_max_position(folder: str):
    """max_position_embeddings as the folder's config.json states it, before
    SpeculativeConfig raises it (config/speculative.py::
    SpeculativeConfig._maybe_override_draft_max_position_embeddings@0.33.0:1807-1846)."""
    try:
        config = json.loads((Path(folder) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    value = config.get("max_position_embeddings") if isinstance(config, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _rope_parameters(config):
    return getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None)


def rotary_problems(case: Case, vllm_config, draft: torch.nn.Module) -> list[str]:
    """Each rotary cache the draft built against the server's length: the
    drafter is fed the target's positions up to max_model_len, and a
    position past the cache's last row gathers outside it (the rotary
    kernels check no bound). Where the draft's length was raised, the cache
    is compared with the one its own length builds
    (model_executor/layers/rotary_embedding/__init__.py::get_rope@0.33.0:32-352):
    rows that differ are a rotation other than the trained one."""
    from vllm.model_executor.layers.rotary_embedding import get_rope

    served = vllm_config.model_config.max_model_len
    config = vllm_config.speculative_config.draft_model_config.hf_config
    own = _own_max_position(case.folder)
    problems: list[str] = []
    seen: set[int] = set()
    for name, module in draft.named_modules():
        cache = getattr(module, "cos_sin_cache", None)
        if not isinstance(cache, torch.Tensor) or id(module) in seen:
            continue
        seen.add(id(module))
        rows = cache.shape[0]
        if rows < served:
            problems.append(f"{name}: the rotary cache holds {rows} rows, the server feeds positions up to "
                            f"{served}: positions from {rows} on gather outside it")
            continue
        raised = getattr(config, "max_position_embeddings", None)
        if own is None or raised == own or not hasattr(module, "head_size"):
            continue
        try:
            reference = get_rope(module.head_size, max_position=own, is_neox_style=module.is_neox_style,
                                 rope_parameters=_rope_parameters(config), dtype=cache.dtype)
        except Exception:  # a rope the reference call cannot rebuild: no comparison
            continue
        trained = reference.cos_sin_cache
        if trained.shape[1] != cache.shape[1]:
            continue
        common = min(trained.shape[0], rows)
        if not torch.allclose(trained[:common].float(), cache[:common].float(), atol=1e-3):
            problems.append(f"{name}: max_position_embeddings raised from {own} to {raised} changes the "
                            "rotation (the cache differs from the one the draft's own length builds)")
    return problems


def _biases_the_mapper_keeps(shipped: list[str], draft: torch.nn.Module) -> list[str]:
    """The shipped biases the draft's weight mapper hands to the model: one
    the mapper drops with its whole module (a training-only head, such as K3
    DSpark's confidence_head on 0.30.0:
    models/kimi_k3/nvidia/dspark_mla.py::K3DSparkForCausalLM.hf_to_vllm_mapper@0.30.0:417-431)
    is that module's skip, judged as such, not a layer built without its bias."""
    mapper = getattr(draft, "hf_to_vllm_mapper", None)
    biases = [n for n in shipped if n.endswith(".bias")]
    if mapper is None or not hasattr(mapper, "_map_name"):
        return biases
    return [n for n in biases if mapper._map_name(n) is not None]


def judge(case: Case, vllm_config, target, draft, sentinel: Sentinel, ids, captured: list[int]) -> Outcome:
    speculative = vllm_config.speculative_config
    config = speculative.draft_model_config.hf_config
    problems: list[str] = []
    notes: list[str] = []
    details: dict = {"method": speculative.method, "architecture": type(draft).__name__,
                     "vllm_ids": list(ids) if ids is not None else None}

    target_parameters = {id(p) for p in target.parameters()}
    final = dict(draft.named_parameters())
    unread = unread_parameters(draft)
    unwritten = [n for n in sentinel.unwritten
                 if n in final and id(final[n]) not in target_parameters and n not in unread]
    shared = [n for n in sentinel.unwritten if n not in unwritten and n not in unread]
    if shared:
        notes.append(f"not in the folder, taken from the target: {', '.join(shared)}")
    if unwritten:
        problems.append(f"{len(unwritten)} parameter(s) never written by the loader: {', '.join(unwritten[:8])}")

    if case.trained_layers is not None and list(case.trained_layers) != captured:
        problems.append(f"the target captures layers {captured} in this order, the draft was trained on "
                        f"{case.trained_layers}")
    if ids is None:
        notes.append("the runner sets up no capture (eagle_config.use_aux_hidden_state false)")
    else:
        from vllm.v1.worker.gpu.spec_decode.eagle.eagle3_utils import get_eagle3_aux_layers_from_config
        declared_ids = get_eagle3_aux_layers_from_config(speculative)
        if declared_ids and list(declared_ids) != list(ids):
            problems.append(f"the draft lists tap ids {list(declared_ids)}, the target captures {list(ids)} "
                            "(sorted, de-duplicated): the taps reach fc in another order or fewer")

    head = getattr(draft, "lm_head", None)
    d2t = getattr(draft, "draft_id_to_target_id", None)
    # The head's vocabulary before padding (VocabParallelEmbedding pads its rows).
    head_rows = getattr(head, "org_vocab_size", None) or getattr(head, "num_embeddings", None)
    if d2t is not None and head_rows is not None and head_rows != d2t.shape[0]:
        problems.append(f"the head serving the draft has {head_rows} rows, its d2t maps {d2t.shape[0]} draft ids "
                        "(the draft's own head was not shipped; the target's is used)")

    projection = _input_projection(draft)
    if projection is not None and captured is not None:
        width = projection.weight.shape[1]
        expected = len(captured) * vllm_config.model_config.get_hidden_size()
        details["fc_input"] = {"width": width, "captured_width": expected}
        if width != expected:
            problems.append(f"the draft's input projection takes {width} columns, the target captures "
                            f"{len(captured)} x {vllm_config.model_config.get_hidden_size()} = {expected}")

    modules = dict(draft.named_modules())
    if _declared(config, "fc_norm") is True and not any(n.endswith("fc_norm") for n in modules):
        problems.append("fc_norm: true declared, the model builds no fc_norm")
    # eagle_config's value wins over the top level (llama_eagle3.py::LlamaModel.__init__@0.33.0:184-188).
    eagle_config = getattr(config, "eagle_config", None)
    if isinstance(eagle_config, dict) and "norm_before_fc" in eagle_config:
        norm_before_fc = eagle_config["norm_before_fc"]
    else:
        norm_before_fc = getattr(config, "norm_before_fc", False)
    if norm_before_fc is True and not any(n.endswith("input_norm") for n in modules):
        problems.append("norm_before_fc: true declared, the model builds no input_norm")
    stream = _declared(config, "aux_hidden_stream")
    if isinstance(stream, str) and stream.lower() != served_stream(target):
        problems.append(f"aux_hidden_stream {stream!r} declared, the target captures the "
                        f"{served_stream(target)} stream")

    problems.extend(_layer_type_problems(config, modules))
    problems.extend(norm_problems(case, draft))
    head_type = _declared(config, "markov_head_type")
    head = modules.get("model.markov_head")
    if isinstance(head_type, str) and head_type.lower() != "vanilla" and head is not None \
            and head_type.lower() not in type(head).__name__.lower():
        problems.append(f"markov_head_type {head_type!r} declared, the model builds {type(head).__name__}")

    shipped = _shipped_names(case.folder)
    for feature in ("fc_norm", "input_norm"):
        if any(feature in n for n in shipped) and not any(n.endswith(feature) for n in modules):
            problems.append(f"{feature} weights shipped, dropped by the loader (the model builds no {feature})")
    if _biases_the_mapper_keeps(shipped, draft) and not any(n.endswith(".bias") for n in final):
        problems.append("bias tensors shipped, dropped by the loader (the model builds no bias)")

    problems.extend(_dflash2_scales(config, draft))
    problems.extend(rotary_problems(case, vllm_config, draft))
    details["max_model_len"] = vllm_config.model_config.max_model_len

    if speculative.method in ("dflash", "dspark") or speculative.parallel_drafting:
        if speculative.method in ("dflash", "dspark"):
            from vllm.v1.worker.gpu.spec_decode.utils import get_parallel_drafting_token_id
            mask = get_parallel_drafting_token_id(config)
        else:
            mask = parallel_eagle_mask_token(speculative)  # P-EAGLE, read as its V1 proposer reads it
        vocab = speculative.draft_model_config.get_vocab_size()
        details["mask_token_id"] = mask
        if not 0 <= mask < vocab:
            problems.append(f"mask token {mask} lies outside the embedding's {vocab} rows: the first drafting "
                            "step looks it up past the table")

    details["notes"] = notes
    if problems:
        return Outcome(SERVED_WRONG, reason="; ".join(problems), stage="load", captured_layers=captured,
                       unwritten=unwritten, details=details)
    return Outcome(LOADED, reason="; ".join(notes), stage="startup", captured_layers=captured, details=details)
