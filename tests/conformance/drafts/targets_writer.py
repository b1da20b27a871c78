"""Tiny targets the trainers' drafts are trained against, written with
transformers' own model classes (random weights) so the trainers' code can
read them as it reads a real target: its config, and the embedding, head
and final norm a trainer copies into (or beside) its draft.

Every target shares the sizes below, so one draft width fits all; eight
decoder layers leave room for every trainer's default tap ids.
"""

from __future__ import annotations

from pathlib import Path

HIDDEN_SIZE = 128
VOCAB_SIZE = 512
NUM_LAYERS = 8
MASK_TOKEN_ID = VOCAB_SIZE - 1

_ATTENTION = dict(num_attention_heads=4, num_key_value_heads=2, head_dim=32)
_COMMON = dict(vocab_size=VOCAB_SIZE, hidden_size=HIDDEN_SIZE, intermediate_size=256,
               num_hidden_layers=NUM_LAYERS, max_position_embeddings=2048, rms_norm_eps=1e-6,
               tie_word_embeddings=False, bos_token_id=0, eos_token_id=1, pad_token_id=2)


def _configs():
    from transformers import DeepseekV3Config, LlamaConfig, Qwen3Config, Qwen3MoeConfig

    return {
        "llama": (LlamaConfig, dict(**_COMMON, **_ATTENTION, architectures=["LlamaForCausalLM"])),
        "qwen3": (Qwen3Config, dict(**_COMMON, **_ATTENTION, architectures=["Qwen3ForCausalLM"])),
        "qwen3_moe": (Qwen3MoeConfig, dict(**_COMMON, **_ATTENTION, num_experts=4, num_experts_per_tok=2,
                                           moe_intermediate_size=64, decoder_sparse_step=1,
                                           architectures=["Qwen3MoeForCausalLM"])),
        # DeepSeek-V3 / Kimi-style MLA target: the first layer dense, the rest MoE.
        "deepseek_v3": (DeepseekV3Config, dict(**_COMMON, num_attention_heads=4, num_key_value_heads=4,
                                               q_lora_rank=64, kv_lora_rank=32, qk_nope_head_dim=16,
                                               qk_rope_head_dim=8, v_head_dim=16, n_routed_experts=4,
                                               n_shared_experts=1, num_experts_per_tok=2, n_group=1,
                                               topk_group=1, moe_intermediate_size=64, first_k_dense_replace=1,
                                               architectures=["DeepseekV3ForCausalLM"])),
    }


def write_targets(root: Path) -> dict[str, Path]:
    """Write (once) every tiny target under `root`; returns name -> folder."""
    import torch
    from transformers import AutoModelForCausalLM

    folders = {}
    for name, (config_class, values) in _configs().items():
        folder = root / name
        folders[name] = folder
        if (folder / "config.json").exists() and any(folder.glob("*.safetensors")):
            continue
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config_class(**values))
        model.save_pretrained(folder)
    return folders
