"""GQA DFlash / DSpark drafts: fc, hidden_norm, norm and q/k/v/o projections."""

from __future__ import annotations

from dspark.schema.families.base import (
    DECODER_MLP_AND_NORMS,
    SHARED_DIMS,
    DraftFamily,
    TensorRule,
    gqa_head_dim,
)

DFLASH_GQA = DraftFamily(
    name="dflash_gqa",
    description="GQA DFlash / DSpark draft (fc, hidden_norm, norm; q/k/v/o projections)",
    model_types=("dflash", "dspark", "dflash_draft"),
    architectures=("DFlashDraftModel", "DSparkDraftModel", "DFlashModel"),
    schema_file="dflash_gqa.schema.json",
    dims={**SHARED_DIMS, "hd": gqa_head_dim},
    tensors=(
        TensorRule("fc.weight", ("h", "S*th"), role="context_proj"),
        TensorRule("hidden_norm.weight", ("h",), role="context_norm"),
        TensorRule("norm.weight", ("h",), role="norm"),
        TensorRule("fc_norm.{i}.weight", ("th",), role="fc_norm", when="fc_norm"),
        *DECODER_MLP_AND_NORMS,
        TensorRule("layers.{n}.self_attn.q_proj.weight", ("nh*hd", "h")),
        TensorRule("layers.{n}.self_attn.k_proj.weight", ("nkv*hd", "h")),
        TensorRule("layers.{n}.self_attn.v_proj.weight", ("nkv*hd", "h")),
        TensorRule("layers.{n}.self_attn.o_proj.weight", ("h", "nh*hd")),
        TensorRule("layers.{n}.self_attn.q_norm.weight", ("hd",), role="norm"),
        TensorRule("layers.{n}.self_attn.k_norm.weight", ("hd",), role="norm"),
    ),
    # TorchSpec's training module names the same parts like the K3 draft.
    renames={"context_proj.": "fc.", "context_norm.": "hidden_norm.", "final_norm.": "norm."},
)
