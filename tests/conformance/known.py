"""Disagreements between a run of an engine's own code and dspark, each
with its reason, in data.

`judged_right` names the side the reading of the engine's code says is
right:
- "dspark": the run cannot see what decides the verdict (code past what
  the harness runs, a value it cannot score); the case counts as agreeing
  by that reason, and the citation says where the engine decides it.
- "engine": dspark is wrong and not yet fixed; the case stays a
  disagreement in the summary, carrying its reason.

`engine` is a release (`vllm@0.33.0`), a whole engine (`vllm`) or every
engine (`*`); `case`
is an fnmatch pattern over case ids.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase


ANY_ENGINE = "*"  # a disagreement of the folder itself, whichever engine reads it


@dataclass(frozen=True)
class KnownDisagreement:
    engine: str
    case: str
    judged_right: str   # "dspark" or "engine"
    reason: str
    citation: str = ""

    def matches(self, engine_release: str, case_id: str) -> bool:
        name = engine_release.partition("@")[0]
        return self.engine in (ANY_ENGINE, engine_release, name) and fnmatchcase(case_id, self.case)


KNOWN: tuple[KnownDisagreement, ...] = (
    # Any engine -------------------------------------------------------------
    # The folder names other layers than the draft was trained on, and nothing
    # in it says so: no reading of the folder can tell.
    KnownDisagreement(
        ANY_ENGINE, "*specforge/eagle3_llama/export-sglang-run-config-taps", "engine",
        "SpecForge trains on the run config's tap ids when it has them, but its export writes eagle_config's "
        "defaults, so the folder names other layers than the draft was trained on and nothing in it says so; "
        "dspark judges the folder, which is self-consistent",
        "specforge/algorithms/model_providers.py::resolve_eagle_capture_layers@0.2.0:188-211"),
    KnownDisagreement(
        ANY_ENGINE, "*speculators/eagle3_llama/convert-specforge-export", "engine",
        "`speculators convert` of that SpecForge export drops its tap ids (it takes them only from "
        "--algorithm-kwargs), so the converted folder names the target's defaults, not the layers trained on; "
        "nothing in it says so",
        "speculators/convert/eagle3/converter.py::Eagle3Converter._build_eagle3_speculator_config@0.9.0"),
    KnownDisagreement(
        ANY_ENGINE, "*specforge/eagle3_llama/edit-set-tap-ids-vllm-numbering", "engine",
        "the user wrote the tap ids one higher (vLLM's hidden_states numbering) under eagle_config, where SpecForge "
        "and SGLang read layer outputs: the folder names other layers than trained and nothing in it says so",
        "specforge/algorithms/model_providers.py::resolve_eagle_capture_layers@0.2.0:188-211"),
    KnownDisagreement(
        ANY_ENGINE, "*speculators/eagle3_llama/edit-flatten-for-sglang", "engine",
        "the user flattened a speculators config into SGLang's shape and copied its ids as written (hidden_states "
        "indices) under eagle_config, where they read as layer outputs: the folder names other layers than trained "
        "and nothing in it says so",
        "speculators/models/eagle3/config.py@0.9.0; sglang/srt/models/llama.py::set_eagle3_layers_to_capture@0.5.23"),
    KnownDisagreement(
        ANY_ENGINE, "*speculators/eagle3_llama/edit-remove-tap-ids", "engine",
        "the user removed the tap ids the draft was trained on: the engine captures its defaults, other layers, and "
        "nothing in the folder says which were trained (TAP003 names the defaults served)",
        "vllm/v1/worker/gpu/spec_decode/eagle/eagle3_utils.py@0.33.0"),
    # vLLM -----------------------------------------------------------------
    # The run's child is capped at 6 GiB and given 150 s; on a loaded machine
    # the time runs out first (0.31.0 and 0.33.0 have been seen to end in
    # bad_alloc / MemoryError within it).
    KnownDisagreement(
        "vllm", "*fabricated/k3_dspark/layers-beyond-bound", "dspark",
        "num_hidden_layers 10**12: the model builds its decoder layers one by one until memory runs out, so no "
        "server starts (refused); the run's child gives up at its time limit before the allocation fails",
        "vllm/models/kimi_k3/nvidia/dspark_mla.py::K3DSparkModel.__init__@0.33.0:162-177"),
    # SGLang ---------------------------------------------------------------
    KnownDisagreement(
        "sglang", "*/eagle3_llama/*flatten-for-sglang*", "dspark",
        "the draft was trained with norm_before_residual (speculators' default) and no SGLang model reads the key: "
        "the decoder layer adds the residual before its norm, a computation the run loads but does not score",
        "sglang/srt/models/llama_eagle3.py@0.5.23 (norm_before_residual never read)"),
    KnownDisagreement(
        "sglang", "*dflash_gqa/quantization-config*", "dspark",
        "the draft's config declares fp8 quantization its bf16 weights do not carry: SGLang builds fp8 layers, "
        "writes the weights into them and leaves every weight_scale unwritten; the run sees it load, the first "
        "forward computes with scales never loaded (ENG005)",
        "sglang/srt/model_loader/loader.py::_get_quantization_config@0.5.23"),
    KnownDisagreement(
        "sglang", "*dflash_gqa/taps-repeated*", "dspark",
        "a repeated tap is captured once, so the target hands fc fewer features than it was built for: the run "
        "loads it, the first request fails on the width (CFG006)",
        "sglang/srt/models/qwen2.py::Qwen2Model.forward@0.5.23:456-464"),
    # TokenSpeed -----------------------------------------------------------
    KnownDisagreement(
        "tokenspeed", "fabricated/eagle3_*/tap-past-target*", "dspark",
        "the run reads the list the capture setter stores ([1, 6, 13] on a 12-layer target); the layer loop "
        "captures only the layers it runs, so id 13 is never captured, fc gets two taps of the three it was "
        "built for and the first request fails: past what the run executes",
        "tokenspeed/runtime/models/base/transformer_model.py::BaseTransformerModel.forward@0.1.1:209-211, 244-247"),
    KnownDisagreement(
        "tokenspeed", "*/eagle3_llama/*flatten-for-sglang*", "dspark",
        "the draft was trained with norm_before_residual (speculators' default) and no TokenSpeed model reads the "
        "key: the decoder layer adds the residual before its norm, a computation the run loads but does not score",
        "tokenspeed/runtime/models/llama_eagle3.py@0.1.1 (norm_before_residual never read)"),
    KnownDisagreement(
        "tokenspeed", "*/eagle3_llama/qwen3-target-*", "dspark",
        "the run reads the list the capture setter stores; TokenSpeed's Qwen3 model never reads it: its forward "
        "returns (hidden_states, None), so the draft gets no taps (TGT006)",
        "tokenspeed/runtime/models/qwen3.py::Qwen3Model.forward@0.1.1:360-388"),
    KnownDisagreement(
        "tokenspeed", "*k3_dspark/stream-invalid-nested*", "dspark",
        "dflash_config.aux_hidden_stream = 'mixture' names no stream and is never read; the engine serves the "
        "top level's prefix, which it validates and which the draft declares there: served as declared (STR008 "
        "warns of the unread value); the run counts any unread nested declaration as served wrong",
        "tokenspeed/runtime/configs/kimi_k3_dspark_config.py::KimiK3DSparkConfig.__init__@0.1.1:79, 113"),
    KnownDisagreement(
        "tokenspeed", "*k3_dspark/fc-norm-int", "dspark",
        "an integer fc_norm weight is copied into the bf16 parameter without a word: the run sees a load, but "
        "the norms served are the integers stored, not trained values (FCN005)",
        "tokenspeed/runtime/model_loader/weight_utils.py::default_weight_loader@0.1.1:848-862"),
    KnownDisagreement(
        "tokenspeed", "*k3_dspark/int-weight", "dspark",
        "an int8 up_proj is cast into the bf16 parameter without a word: the run sees a load, but the weights "
        "served are the integers stored (INV004)",
        "tokenspeed/runtime/layers/linear.py@0.1.1:296-304"),
    KnownDisagreement(
        "tokenspeed", "*launch/k3_dspark/embed-tokens-int8/pipeline-parallel-size-*", "dspark",
        "at --pipeline-parallel-size 2 the last stage copy_()s an int8 embed_tokens into its floating-point "
        "embedding without a word: the run sees a load, but the embedding served is the integers stored (LCH002)",
        "tokenspeed/runtime/layers/vocab_parallel_embedding.py::VocabParallelEmbedding.weight_loader@0.1.1:472-515"),
    KnownDisagreement(
        "tokenspeed", "*k3_dspark/layers-beyond-bound*", "dspark",
        "num_hidden_layers = 10**12: the engine builds layer after layer and never finishes in the run's time "
        "limit; dspark refuses the value outright (CFG003, bounded)",
        "tokenspeed/runtime/models/kimi_k3_dspark.py::K3DSparkModel.__init__@0.1.1"),
)


def reason_for(engine_release: str, case_id: str) -> KnownDisagreement | None:
    for entry in KNOWN:
        if entry.matches(engine_release, case_id):
            return entry
    return None
