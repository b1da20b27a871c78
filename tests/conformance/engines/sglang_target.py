"""Which target layers SGLang captures for a draft, read from the target
it builds, in the suite's numbering.

The target is built with the release's own class on the meta device (no
weights: only its structure and the capture set-up matter), the capture
is resolved and set as the target model runner does it, and the ids the
target then holds are read back.

SGLang's numbering (0.5.23): a capture id c in a model's
`layers_to_capture` captures the residual stream ENTERING decoder layer c
(`models/llama.py::LlamaModel.forward@0.5.23:485-494` passes
`capture_output` to layer c, and
`layers/layer_boundary/stage.py::_prepare_attention@0.5.23:407-458`
captures before the layer reads it), i.e. the output of layer c-1: suite
layer c-1. The setters add 1 to the draft's ids for that reason
(`models/llama.py::LlamaForCausalLM.set_eagle3_layers_to_capture@0.5.23:929-941`).
Kimi-K3 keeps `dspark_layers_to_capture` as layer OUTPUTS
(`models/kimi_k3.py::KimiK3ForCausalLM.set_dspark_layers_to_capture@0.5.23:3054-3071`):
suite layer c.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import torch

# Multimodal targets whose capture setters hand the ids on, unchanged, to a
# text model they build from `text_config`: the text model stands in for
# them (their vision tower is not on the capture path). Kimi-K2.5:
# `models/kimi_k25.py::KimiK25ForConditionalGeneration.__init__@0.5.23:691-700`
# builds DeepseekV3ForCausalLM(config.text_config), and
# `::set_eagle3_layers_to_capture@0.5.23:928-939` /
# `::set_dflash_layers_to_capture@0.5.23:941-948` delegate to it.
TEXT_MODEL_OF = {"KimiK25ForConditionalGeneration": "DeepseekV3ForCausalLM"}

# Fields every released checkpoint of these model types writes, which a
# case's tiny target config may leave out and SGLang's target classes read
# while they build (never the capture: the setters read only the ids and
# num_hidden_layers). Filled only where absent, with the released models'
# values (Qwen3.5: Qwen/Qwen3.5-*'s text_config; DeepSeek-V3/Kimi-K2.5:
# deepseek-ai/DeepSeek-V3's config.json), and reported in the outcome.
RELEASED_DEFAULTS = {
    "qwen3_5_text": {"full_attention_interval": 4,
                     "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0,
                                         "partial_rotary_factor": 0.25, "mrope_section": [11, 11, 10],
                                         "mrope_interleaved": True}},
    # Kimi-K3's text model (model_type kimi_linear): its MLA dimensions, as
    # its DSpark drafts mirror them (docs/DESIGN.md section 2).
    "kimi_linear": {"q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
                "v_head_dim": 128},
    "deepseek_v3": {"moe_layer_freq": 1, "topk_method": "noaux_tc", "ep_size": 1, "scoring_func": "sigmoid",
                    "norm_topk_prob": True, "routed_scaling_factor": 2.5, "n_group": 8, "topk_group": 4,
                    "first_k_dense_replace": 3, "n_shared_experts": 1, "aux_loss_alpha": 0.001, "seq_aux": True},
}


def complete_target_config(config: dict) -> list[str]:
    """Fill the released defaults into a target config.json (and its
    text_config) in place; return the keys filled."""
    filled = []
    for part, prefix in ((config, ""), (config.get("text_config"), "text_config.")):
        if not isinstance(part, dict):
            continue
        for key, value in RELEASED_DEFAULTS.get(part.get("model_type"), {}).items():
            if key not in part:
                part[key] = value
                filled.append(prefix + key)
    return filled


def _build_target(server_args, target_config, load_config, workdir: Path):
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.model_loader.loader import _initialize_model, set_default_torch_dtype

    architecture = (getattr(target_config.hf_config, "architectures", None) or [""])[0]
    note = architecture
    if architecture in TEXT_MODEL_OF:
        text = json.loads(target_config.hf_config.text_config.to_json_string())
        text["architectures"] = [TEXT_MODEL_OF[architecture]]
        folder = workdir / "target-text-model"
        folder.mkdir(exist_ok=True)
        (folder / "config.json").write_text(json.dumps(text))
        target_config = ModelConfig.from_server_args(server_args, model_path=str(folder))
        note = f"{architecture}'s text model {TEXT_MODEL_OF[architecture]}"
    with set_default_torch_dtype(target_config.dtype), torch.device("meta"), _streams_without_cuda():
        return _initialize_model(target_config, load_config, None), note


@contextlib.contextmanager
def _streams_without_cuda():
    """`models/kimi_k3.py::KimiK3Model.__init__@0.5.23:2761` creates CUDA
    streams to overlap its kernels; a stream orders kernel launches and holds
    no weight or capture state, so a plain object stands in while the target
    is built."""
    real_stream = torch.cuda.Stream
    torch.cuda.Stream = lambda *args, **kwargs: object()
    try:
        yield
    finally:
        torch.cuda.Stream = real_stream


def _read_capture(target, first_layer: int = 0) -> tuple[list[int] | None, str]:
    """The captured layers in the suite numbering, and which attribute said
    so; `first_layer`: the first layer the stage hosting the draft walks."""
    # The forward walks its layers in order and asks each whether it is in
    # the list (`models/llama.py::LlamaModel.forward@0.5.23:486-494`,
    # `models/qwen3_5.py::Qwen3_5ForCausalLM.forward@0.5.23:1942-1954`): the
    # taps arrive in layer order, each layer once, whatever the list's order.
    for name, module in target.named_modules():
        ids = getattr(module, "dspark_layers_to_capture", None)
        if ids:
            return sorted({int(i) for i in ids}), f"{name or 'model'}.dspark_layers_to_capture (layer outputs)"
    for name, module in target.named_modules():
        ids = getattr(module, "layers_to_capture", None)
        if ids:
            # The loop runs `for i in range(start_layer, end_layer)`: an id past
            # the last layer (a tap on the final layer's output, + 1) is never
            # reached, so nothing is captured for it
            # (models/qwen2.py::Qwen2Model.forward@0.5.23:456-464).
            layers = getattr(module, "layers", None)
            reachable = len(layers) if layers is not None else None
            kept = {int(i) for i in ids if (reachable is None or int(i) < reachable) and int(i) >= first_layer}
            note = f"{name or 'model'}.layers_to_capture (layer inputs, minus 1)"
            if reachable is not None and len(kept) < len(set(ids)):
                note += f"; ids outside its layers {first_layer}-{reachable - 1} are never reached by the forward"
            return sorted(i - 1 for i in kept), note
    return None, "no module holds a capture list"


def _last_stage_first_layer(pp_size: int, target_config) -> int:
    """The first layer the last pipeline stage walks, split by the release's
    own `distributed/utils.py::get_pp_indices`.

    The harness runs one process, which builds every layer as pipeline
    rank 0 of 1; at --pp-size P the EAGLE-3 draft runs on the last stage
    (`speculative/eagle_worker_v2.py::EAGLEWorkerV2.__init__@0.5.23:1334`),
    whose target forward walks only its own layers and hands the draft
    only what it captured there (`models/llama.py::LlamaModel.forward@0.5.23:
    486-497`; the earlier stages hand on the residual alone, and their
    setters return before setting a capture: `::LlamaForCausalLM.
    set_eagle3_layers_to_capture@0.5.23:929-931`)."""
    from sglang.srt.distributed.utils import get_pp_indices

    layers = int(target_config.hf_text_config.num_hidden_layers)
    return int(get_pp_indices(layers, pp_size - 1, pp_size)[0])


class TargetNotBuilt(Exception):
    """The case's target config is not one this release builds: no verdict on the draft."""


def captured_layers(server_args, target_config, algorithm: str, load_config,
                    workdir: Path) -> tuple[list[int] | None, dict]:
    """Run the target model runner's capture set-up; return the suite ids and a note."""
    from sglang.srt.model_executor.model_runner_components.attention_backend_setup import (
        configure_aux_hidden_state_capture)
    from sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state import (
        resolve_spec_aux_hidden_state_config)
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    spec_algorithm = SpeculativeAlgorithm.from_string(algorithm)
    aux = resolve_spec_aux_hidden_state_config(
        server_args=server_args, model_config=target_config, spec_algorithm=spec_algorithm, is_draft_worker=False)
    try:
        target, built = _build_target(server_args, target_config, load_config, workdir)
    except Exception as error:
        raise TargetNotBuilt(f"{type(error).__name__}: {error}") from error
    configure_aux_hidden_state_capture(
        model=target,
        eagle_use_aux_hidden_state=aux.eagle_use_aux_hidden_state,
        eagle_aux_hidden_state_layer_ids=aux.eagle_aux_hidden_state_layer_ids,
        dflash_use_aux_hidden_state=aux.dflash_use_aux_hidden_state,
        dflash_target_layer_ids=aux.dflash_target_layer_ids,
        # 0.5.23 carries the routing on the resolved config; 0.5.22 and
        # earlier pass the algorithm's (`model_executor/model_runner.py::
        # ModelRunner@0.5.22:1087-1094`).
        is_dspark=getattr(aux, "is_dspark", spec_algorithm.is_dspark()),
    )
    note = {"target_class": built,
            "requested_ids": aux.eagle_aux_hidden_state_layer_ids if aux.eagle_use_aux_hidden_state
            else aux.dflash_target_layer_ids}
    if not (aux.eagle_use_aux_hidden_state or aux.dflash_use_aux_hidden_state):
        note["source"] = "capture turned off (use_aux_hidden_state false)"
        return [], note
    first_layer = 0
    if algorithm == "EAGLE3" and int(getattr(server_args, "pp_size", 1) or 1) > 1:
        first_layer = _last_stage_first_layer(int(server_args.pp_size), target_config)
        note["pipeline"] = f"the draft's stage (the last of {server_args.pp_size}) walks layers from {first_layer}"
    captured, note["source"] = _read_capture(target, first_layer)
    # Kimi-K3 hands its DSPARK/DFLASH taps the AttnRes mixture whenever its
    # config sets attn_res_block_size, whatever the draft declares; every
    # other target the prefix stream (`models/kimi_k3.py::KimiK3Model@0.5.23:
    # 2765, 2871-2905`; `::KimiK3Model._dspark_capture_stream@0.5.21:3054-3081`).
    kimi_k3_capture = any(hasattr(module, "dspark_layers_to_capture") for module in target.modules())
    attn_res = getattr(target_config.hf_text_config, "attn_res_block_size", None) is not None
    note["served_stream"] = "attn_res" if kimi_k3_capture and attn_res and aux.dflash_use_aux_hidden_state \
        else "prefix"
    if captured is not None:
        hidden = int(getattr(target_config.hf_text_config, "hidden_size"))
        note["captured_width"] = len(captured) * hidden
    return captured, note


def fc_input_width(draft) -> int | None:
    """How many features the draft's fc reads (its input width), if it has one."""
    for name, module in draft.named_modules():
        if name.split(".")[-1] == "fc":
            weight = getattr(module, "weight", None)
            if weight is not None and weight.dim() == 2:
                return int(weight.shape[1])
    return None
