"""How SGLang 0.5.23's EAGLE-3 drafts and their target agree on taps, as
config rules: the target reads only `eagle_config`'s list (or captures its
three defaults), the draft sizes `fc` from its own reading, and neither
compares the two (model_executor/model_runner_components/
spec_aux_hidden_state.py:185-196)."""

from __future__ import annotations

from typing import Any, Mapping

from dspark.schema.engines.base import Source, TapReading
from dspark.schema.engines.sglang.common import (
    EAGLE3_TARGET_CLASSES,
    EAGLE3_TARGET_SOURCE,
    NON_CAPTURING_TARGETS,
    SPEC_AUX,
    at,
    engine_finding,
)
from dspark.schema.families.eagle3_common import DEFAULT_TAPS_TEXT, TAP_IDS_FIELD, default_taps, layers_defaulting_to
from dspark.schema.families.base import is_int
from dspark.schema.findings import Finding, Severity

# The target's capture: ids -1..N-2 are captured entering layer id+1;
# anything else is never captured, without a word, so fc gets fewer taps
# than it was built for (models/llama.py:485-494; models/deepseek_v2.py:
# 3175-3195). No range check anywhere.
EAGLE3_TAPS_OUTSIDE = ("never captures the rest, without a word: fc then gets fewer taps than it was built for "
                       "and the draft fails at the first request")

# What the target does with an EAGLE-3 draft's taps, whichever family the
# draft is: id k captures the residual entering layer k+1, for k in
# [-1, N-2] (N-1 would be layer N, which the layer loop never reaches:
# models/llama.py:485-494, 929-941); a target class without the EAGLE-3
# capture setter stops the engine
# (model_runner_components/attention_backend_setup.py:51-61).
EAGLE3_TARGET_CAPTURE = dict(
    tap_low=-1,
    tap_high_offset=-2,
    taps_outside_range=EAGLE3_TAPS_OUTSIDE,
    target_classes=EAGLE3_TARGET_CLASSES,
    target_wiring="SGLang calls its set_eagle3_layers_to_capture",
    targets_without_capture=frozenset(NON_CAPTURING_TARGETS),
)

_TOP = TAP_IDS_FIELD
_NESTED = f"eagle_config.{TAP_IDS_FIELD}"


def _show(ids: Any) -> str:
    return repr(ids)


def eagle3_tap_rules(taps: TapReading, model: str, draft_source: Source, forward_source: Source) -> tuple:
    """The config rules of one EAGLE-3 model: tap agreement, capture
    switched off, and fc skipped when the widths meet."""
    cite = {"draft": draft_source.cite(), "target": EAGLE3_TARGET_SOURCE.cite()}

    def agreement(config: Mapping[str, Any], config_file: str) -> list[Finding]:
        count = taps.draft_count(config)
        if not is_int(count):
            return []  # the schema reports an unreadable list
        draft_ids, draft_path = taps.draft_ids(config)
        target_ids, target_path = taps.target_ids(config)
        count_from = next((f for f in taps.count_fields if config.get(f) is not None), None)
        draft_from = (f"{count_from} = {count}" if count_from else
                      f"{draft_path} ({_show(draft_ids)})" if draft_path else f"no list it reads, so {count}")
        top = config.get(_TOP)
        # The target never reads the top-level list (the MLA draft counts it,
        # which picks no layer).
        top_unread = bool(top) and target_path != _TOP
        if target_ids is None:
            if count != taps.default_count:
                return [Finding(
                    "TAP001",
                    f"{config_file}: {model} builds fc for {count} taps ({draft_from}) but SGLang's target reads "
                    f"only {_NESTED}, finds none, and captures its {taps.default_count} defaults "
                    f"{DEFAULT_TAPS_TEXT}: fc gets another width and the draft fails at the first request. Put the "
                    f"list the draft was trained on in {_NESTED}.",
                    file=config_file,
                    detail={"draft_taps": count, "draft_source": draft_path or count_from, "target_ids": None,
                            "source": cite},
                )]
            if top_unread:
                return [_unread_top_level(config_file, top, cite)]
            return [Finding(
                "TAP003",
                f"{config_file}: no tap ids SGLang reads; {model} assumes {count} taps and the target captures "
                f"its defaults {DEFAULT_TAPS_TEXT} (SpecForge trains on the same defaults when it is given no "
                f"list). Write the list in {_NESTED} if the draft was trained on other layers.",
                file=config_file,
                detail={"draft_taps": count, "target_ids": None, "source": cite},
            )]
        if not isinstance(target_ids, list):
            return []
        if len(target_ids) != count:
            return [Finding(
                "TAP001",
                f"{config_file}: {model} builds fc for {count} taps ({draft_from}) but SGLang's target captures "
                f"{len(target_ids)} ({target_path} = {_show(target_ids)}): fc gets another width and the draft "
                "fails at the first request. Make them agree.",
                file=config_file,
                detail={"draft_taps": count, "draft_source": draft_path or count_from, "target_ids": target_ids,
                        "target_source": target_path, "source": cite},
            )]
        if top_unread and top != target_ids:
            return [Finding(
                "TAP002",
                f"{config_file}: {_TOP} = {_show(top)} but SGLang's target captures {target_path} = "
                f"{_show(target_ids)}; the top-level list is read by nothing in SGLang. Keep the list the draft "
                "was trained on in both places, or in eagle_config alone.",
                file=config_file,
                detail={"draft_ids": top, "draft_source": _TOP, "target_ids": target_ids,
                        "target_source": target_path, "source": cite},
                severity=Severity.WARNING,
            )]
        return []

    def capture_switched_off(config: Mapping[str, Any], config_file: str) -> list[Finding]:
        """`eagle_config.use_aux_hidden_state: false` turns the target's
        capture off (spec_aux_hidden_state.py:185-191): the draft then gets
        the target's last hidden state, not its taps."""
        nested = config.get("eagle_config")
        if not isinstance(nested, Mapping) or nested.get("use_aux_hidden_state", True):
            return []
        return [engine_finding(config_file, "eagle_config.use_aux_hidden_state is false: SGLang's target then "
                               "captures no taps and hands the draft its last hidden state, which the EAGLE-3 draft "
                               "was not trained on", at("185-191", SPEC_AUX,
                                                        "_resolve_eagle_aux_hidden_state"), "use_aux_hidden_state",
                               "Set use_aux_hidden_state to true (or drop it) for an EAGLE-3 draft.")]

    def fc_skipped_when_widths_meet(config: Mapping[str, Any], config_file: str) -> list[Finding]:
        """The forward applies input_norm, fc_norm and fc only when the
        captured state is wider than the embedding (`if hidden_states.shape[-1]
        != embeds.shape[-1]`): taps x target width equal to hidden_size are
        taken for already projected."""
        hidden = config.get("hidden_size")
        width = config.get("target_hidden_size") or hidden
        ids, _ = taps.target_ids(config)
        count = taps.default_count if ids is None else len(ids) if isinstance(ids, list) else None
        if not (is_int(hidden) and is_int(width) and is_int(count)) or count * width != hidden:
            return []
        return [engine_finding(config_file, f"{count} tap(s) x {width} = hidden_size {hidden}: SGLang's forward "
                               "then takes the captured state for already projected and never applies fc (nor "
                               "fc_norm or input_norm)", forward_source, "fc",
                               "Retrain on more taps (their concatenation must be wider than hidden_size).")]

    return agreement, capture_switched_off, fc_skipped_when_widths_meet


def _unread_top_level(config_file: str, ids: Any, cite: dict) -> Finding:
    """A top-level list only: SGLang's target never reads it and captures
    its defaults, which are the list on at most one target depth. TAP006
    (the draft is served other layers than the list names) unless the list
    is those defaults on some target; then a TAP002 warning naming it."""
    fits = layers_defaulting_to(ids)
    lead = (f"{config_file}: {_TOP} = {_show(ids)} is not read by SGLang: its target reads only {_NESTED}, finds "
            f"none, and captures its defaults {DEFAULT_TAPS_TEXT}")
    if fits is not None:
        return Finding(
            "TAP002",
            f"{lead}: this list on a {fits}-layer target ({_show(default_taps(fits))}), other layers on any other. "
            f"Put the list in {_NESTED} so SGLang reads it.",
            file=config_file,
            detail={"declared": {_TOP: ids}, "target_ids": None, "fits_layers": fits, "source": cite},
            severity=Severity.WARNING,
        )
    return Finding(
        "TAP006",
        f"{lead}, never this list: a draft trained on it is served other layers, without a word. Put the list in "
        f"{_NESTED} (keep it at the top level too for engines that read it there).",
        file=config_file,
        detail={"declared": {_TOP: ids}, "target_ids": None, "source": cite},
    )
