"""Which target layers a draft was trained on, and whether an engine feeds
it those.

A tap id means different layers under each trainer's numbering: SGLang,
SpecForge and TorchSpec native number a tap by the layer whose output it
is (LAYER_OUTPUT); vLLM and speculators by its index in the target's
hidden_states, the embeddings being 0 (HIDDEN_STATES). The folder's origin
(converters/layouts/tap_origin.py) says which numbering its ids are in;
each engine's resolution (`ResolvedDraft.tap_layers`) says which layers it
captures. The two are compared as 0-based layer outputs.
"""

from __future__ import annotations

from dspark.schema.engines.base import HIDDEN_STATES, LAYER_OUTPUT
from dspark.schema.findings import Finding, Severity
from dspark.schema.records import record
from dspark.schema.rules.resolve import ResolvedDraft

NUMBERING_TEXT = {
    LAYER_OUTPUT: "id k is the output of target layer k",
    HIDDEN_STATES: "id k is hidden_states[k], the output of target layer k-1 (0: the embeddings)",
}


@record
class TrainedTaps:
    """What the folder says of the taps its draft was trained on."""

    ids: list[int]  # as the folder writes them
    path: str  # where
    numbering: str | None  # LAYER_OUTPUT, HIDDEN_STATES, or None: nothing says
    why: str  # what the numbering was inferred from (or why it could not be)
    # The ids as the check reads them, where convert rewrites them for the
    # engine (speculators' and TorchSpec's --vllm export's: one lower).
    judged_ids: list[int] | None = None
    # Whether to say it (TAP004): not where the family has one numbering
    # whatever the trainer (DFlash-style drafts).
    worth_saying: bool = True
    # The trained layers as `dspark convert` recorded them in its manifest
    # (it rewrites the ids for the engine it writes for, so the ids in the
    # converted config are no longer the trainer's): they hold whichever
    # list an engine reads.
    recorded_layers: list[int] | None = None

    def layers(self) -> list[int] | None:
        """The 0-based target layer outputs the draft was trained on."""
        if self.recorded_layers is not None:
            return list(self.recorded_layers)
        if self.numbering is None:
            return None
        offset = 0 if self.numbering == LAYER_OUTPUT else -1
        return [i + offset for i in self.ids]


def _text(layers: list[int]) -> str:
    return ", ".join("the embeddings" if layer < 0 else str(layer) for layer in layers)


def trained_numbering_finding(trained: TrainedTaps, config_file: str) -> Finding:
    """TAP004 (info) when the numbering was inferred, TAP005 (warning) with
    both readings when nothing says."""
    detail = {"ids": trained.ids, "path": trained.path, "numbering": trained.numbering, "why": trained.why}
    if trained.numbering is not None:
        layers = trained.layers()
        detail["layers"] = layers
        return Finding(
            "TAP004",
            f"{config_file}: {trained.path} = {trained.ids!r} are read in the trainer's numbering "
            f"({NUMBERING_TEXT[trained.numbering]}), inferred from {trained.why}: the draft was trained on the "
            f"outputs of target layers {_text(layers)}.",
            file=config_file, detail=detail, severity=Severity.INFO)
    as_outputs = list(trained.ids)
    as_hidden = [i - 1 for i in trained.ids]
    detail.update(layers_if_layer_output=as_outputs, layers_if_hidden_states=as_hidden)
    return Finding(
        "TAP005",
        f"{config_file}: nothing in the folder says which trainer wrote {trained.path} = {trained.ids!r} ({trained.why}), "
        f"so which layers the draft was trained on is unknown: in SGLang's, SpecForge's and TorchSpec's numbering "
        f"(layer outputs) the outputs of target layers {_text(as_outputs)}; in vLLM's and speculators' "
        f"(hidden_states indices) those of layers {_text(as_hidden)}. Check against the training run, and serve "
        "on an engine that numbers the ids as the trainer did.",
        file=config_file, detail=detail, severity=Severity.WARNING)


def served_layers_finding(trained: TrainedTaps, resolved: ResolvedDraft, engine: str,
                          config_file: str) -> list[Finding]:
    """TAP006: the engine reads the list the draft was trained on but
    numbers it otherwise, so it captures other layers without a word. (An
    engine reading another list is TAP001/TAP002's to say.)"""
    layers = trained.layers()
    captured = resolved.tap_layers
    if layers is None or captured is None or resolved.tap_source is None:
        return []
    if len(captured) != len(layers):
        return []
    if trained.recorded_layers is None and (resolved.tap_source.split(".")[-1] != trained.path.split(".")[-1]
                                            or resolved.target_layer_ids not in (trained.ids, trained.judged_ids)):
        return []
    if sorted(captured) == sorted(layers):
        return []
    origin = (f"as {trained.why}" if trained.recorded_layers is not None else
              f"{trained.path} = {trained.ids!r}, {NUMBERING_TEXT[trained.numbering]}")
    return [Finding(
        "TAP006",
        f"{config_file}: the draft was trained on the outputs of target layers {_text(layers)} ({origin}), "
        f"but {engine} reads {resolved.tap_source} in its own "
        f"numbering and captures the outputs of layers {_text(captured)}: served wrong, without a word. Write the "
        "ids in that engine's numbering (`dspark convert --engine`), or serve on an engine that numbers them as the "
        "trainer did.",
        file=config_file,
        detail={"engine": engine, "trained_layers": layers, "captured_layers": captured,
                "numbering": trained.numbering, "engine_numbering": resolved.tap_numbering},
    )]
