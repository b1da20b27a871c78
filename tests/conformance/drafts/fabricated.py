"""The fabricator's drafts as conformance cases: every family's good
drafts (each build option that changes what is served, each engine's
layout) and every defect `python -m dspark.examples.fabricate
--list-defects` lists, but those in the payload values (the engines load
values as they are; dspark judges them only with --deep).

These are the drafts dspark believes it understands; the suite runs them
through the engines' own code so that belief is tested. The trained layers
of a fabricated draft are read from dspark's reading of its tap ids under
the engine whose layout it was written in (the default engine when none):
the fabricator writes ids in that engine's numbering.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from outcomes import Case

from dspark.examples.fabricate import (
    FABRICATORS,
    DefectNotApplicable,
    FabricateError,
    fabricate,
    target_config,
)

ORIGIN = "dspark-fabricator"

# Build options worth a case of their own, per family: each changes what an
# engine builds or reads (a feature, a variant, a stream).
GOOD_VARIANTS: dict[str, list[dict]] = {
    "k3_dspark": [{}, {"fc_norm": False}, {"stream": "attn_res"}, {"fc_norm": False, "stream": None}],
    "dflash_gqa": [{}, {"variant": "dspark"}],
    "dflash2": [{}, {"variant": "mla"}],
    "eagle3_llama": [{}, {"fc_norm": True}, {"norm_before_fc": True}],
    "eagle3_mla": [{}, {"fc_norm": True}],
    "eagle3_qwen3": [{}, {"fc_norm": True, "norm_before_fc": True}],
    "peagle_llama": [{}, {"norm_before_fc": True}],
    "peagle_qwen3": [{}],
}


def _declared_own_head(root: Path, target: Path) -> Case:
    """A good DFlash draft whose config sets has_own_lm_head and that ships
    no lm_head: vLLM 0.31.0+ keeps the draft's own head, never loaded; the
    other engines never read the flag."""
    folder = root / "dflash_gqa" / "own-head-declared-not-shipped"
    fabricate(folder, family="dflash_gqa")
    config = json.loads((folder / "config.json").read_text())
    config["has_own_lm_head"] = True
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    return Case(id="fabricated/dflash_gqa/own-head-declared-not-shipped", folder=str(folder), origin=ORIGIN,
                family="dflash_gqa", target_config=str(target), trained_layers=_trained_layers(folder, target, None),
                expect="has_own_lm_head: true, no lm_head shipped")


def _engine_readings(root: Path, target: Path) -> list[Case]:
    """Good DFlash2 drafts with one field written where the engines read it
    each their own way (`fabricate_dflash2.ENGINE_READINGS`): one case each,
    the trained layers those of the good draft."""
    from dspark.examples.fabricate_dflash2 import ENGINE_READINGS

    cases = []
    for name, (edit, expect) in ENGINE_READINGS.items():
        folder = root / "dflash2" / name
        fabricate(folder, family="dflash2")
        config = json.loads((folder / "config.json").read_text())
        edit(config)
        (folder / "config.json").write_text(json.dumps(config, indent=2))
        good = root / "dflash2" / "good"
        cases.append(Case(id=f"fabricated/dflash2/{name}", folder=str(folder), origin=ORIGIN, family="dflash2",
                          target_config=str(target), trained_layers=_trained_layers(good, target, None),
                          expect=expect))
    return cases


def _slug(options: dict) -> str:
    if not options:
        return "good"
    return "good-" + "-".join(f"{k.replace('_', '-')}-{v}".lower() for k, v in options.items())


def _write_target(workdir: Path, family: str) -> Path:
    path = workdir / "targets" / f"{family}.json"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(target_config(family, "tiny"), indent=1))
    return path


def _trained_layers(folder: Path, target: Path, engine: str | None) -> list[int] | None:
    """The layers the fabricator meant: its ids read in the numbering of
    the engine whose layout it wrote (dspark's own reading, see the module
    docstring)."""
    from dspark.converters.check import check_checkpoint
    from dspark.schema.errors import DsparkError

    try:
        report = check_checkpoint(folder, target=target, engine=engine)
    except DsparkError:
        return None
    return report.resolved.tap_layers


# Launches worth a case, per engine (their flags are the engine's own): each
# (family, build options, edit, launch) is a good draft, or one edited, run
# under server flags a verdict depends on (TokenSpeed 0.1.1: the block size
# against --speculative-num-steps per algorithm, and pipeline parallelism;
# schema/engines/tokenspeed/launch.py).
_PIPELINE = "--pipeline-parallel-size 2 --disaggregation-mode prefill"
LAUNCH_CASES: dict[str, list[tuple[str, str, dict, str, str]]] = {
    "tokenspeed": [
        # (family, name, build options, edit, launch)
        ("k3_dspark", "block4", {}, "block_size=4", ""),
        ("k3_dspark", "block4", {}, "block_size=4", "--speculative-num-steps 4"),
        ("k3_dspark", "block4", {}, "block_size=4", "--speculative-num-steps 5"),
        ("k3_dspark", "block4", {}, "block_size=4", "--speculative-num-draft-tokens 4"),
        ("dflash_gqa", "good", {}, "", "--speculative-num-steps 15"),
        ("dflash_gqa", "good", {}, "", "--speculative-num-steps 16"),
        ("dflash_gqa", "good-dspark", {"variant": "dspark"}, "", "--speculative-num-steps 16"),
        ("dflash_gqa", "good-dspark", {"variant": "dspark"}, "", "--speculative-num-draft-tokens 16"),
        ("k3_dspark", "good", {}, "", _PIPELINE),
        ("k3_dspark", "good-fc-norm-false", {"fc_norm": False}, "", _PIPELINE),
        ("k3_dspark", "no-embed-tokens", {}, "drop=embed_tokens", _PIPELINE),
        ("k3_dspark", "no-embed-tokens", {}, "drop=embed_tokens", ""),
        ("k3_dspark", "fc-norm-extra-index", {"defect": "fc-norm-extra-index"}, "", _PIPELINE),
        ("k3_dspark", "embed-tokens-int8", {}, "embed=int8", _PIPELINE),
        ("k3_dspark", "embed-tokens-narrow", {}, "embed=narrow", _PIPELINE),
        ("dflash_gqa", "good", {}, "", _PIPELINE),
    ],
    # SGLang 0.5.20-0.5.23 (schema/engines/sglang/launch.py): a DFlash
    # draft's block size against --speculative-num-draft-tokens and
    # --speculative-dflash-block-size, a DSpark draft's gamma + 1, and
    # --pp-size per algorithm (an EAGLE-3 draft's taps on the last stage:
    # the tiny Llama target's 12 layers split 6 + 6 at --pp-size 2).
    "sglang": [
        ("dflash_gqa", "good", {}, "", ""),
        ("dflash_gqa", "good", {}, "", "--speculative-num-draft-tokens 16"),
        ("dflash_gqa", "good", {}, "", "--speculative-num-draft-tokens 8"),
        ("dflash_gqa", "good", {}, "", "--speculative-dflash-block-size 8"),
        ("dflash_gqa", "good", {}, "", "--speculative-dflash-block-size 16 --speculative-num-draft-tokens 8"),
        ("dflash_gqa", "good", {}, "", "--speculative-num-steps 4"),
        ("dflash_gqa", "good", {}, "", "--pp-size 2"),
        ("dflash_gqa", "good-dspark", {"variant": "dspark"}, "", "--speculative-num-draft-tokens 17"),
        ("dflash_gqa", "good-dspark", {"variant": "dspark"}, "", "--speculative-num-draft-tokens 16"),
        ("dflash_gqa", "good-dspark", {"variant": "dspark"}, "", "--pp-size 2"),
        ("dflash_gqa", "good-dspark", {"variant": "dspark"}, "", "--pp-size 2 --disaggregation-mode prefill"),
        # --speculative-dspark-block-size is gamma, over the checkpoint's
        ("dflash_gqa", "good-dspark", {"variant": "dspark"}, "", "--speculative-dspark-block-size 16"),
        ("dflash_gqa", "good-dspark", {"variant": "dspark"}, "", "--speculative-dspark-block-size 8"),
        ("dflash_gqa", "good-dspark", {"variant": "dspark"}, "",
         "--speculative-dspark-block-size 16 --speculative-num-draft-tokens 16"),
        ("eagle3_llama", "good", {}, "", "--pp-size 2"),
        ("eagle3_llama", "good", {}, "", "--pipeline-parallel-size 4"),
        ("eagle3_llama", "taps-6-7-8", {}, "taps=6,7,8", "--pp-size 2"),
        ("eagle3_llama", "taps-6-7-8", {}, "taps=6,7,8", "--pp-size 4"),
    ],
    # vLLM: the draft's max_position_embeddings against --max-model-len
    # (schema/engines/vllm/positions.py; 2048 is the most the tiny Llama
    # target derives), and num_speculative_tokens left to the release's
    # SpeculativeConfig (schema/engines/vllm/launch.py).
    "vllm": [
        ("dflash_gqa", "max-pos-1024", {}, "max_position_embeddings=1024", "--max-model-len 2048"),
        ("dflash_gqa", "max-pos-1024", {}, "max_position_embeddings=1024", "--max-model-len 1024"),
        ("dflash_gqa", "dspark-max-pos-1024", {"variant": "dspark"}, "max_position_embeddings=1024",
         "--max-model-len 2048"),
        ("dflash_gqa", "yarn-1024", {}, "max_position_embeddings=1024; rope_scaling="
         '{"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 512}', "--max-model-len 2048"),
        ("eagle3_llama", "max-pos-1024", {}, "max_position_embeddings=1024", "--max-model-len 2048"),
        ("eagle3_llama", "dynamic-512", {}, 'max_position_embeddings=512; rope_scaling='
         '{"rope_type": "dynamic", "factor": 2.0}', "--max-model-len 2048"),
        ("eagle3_llama", "dynamic-trained-512", {}, 'max_position_embeddings=512; rope_scaling='
         '{"rope_type": "dynamic", "factor": 2.0, "max_trained_positions": 512}', "--max-model-len 2048"),
        ("k3_dspark", "good-fc-norm-false-vllm-layout", {"engine": "vllm", "fc_norm": False}, "", """--speculative-config '{"method": "dspark"}'"""),
        ("dflash_gqa", "good-dspark", {"variant": "dspark"}, "", """--speculative-config '{"method": "dspark"}'"""),
        ("dflash_gqa", "good", {}, "", """--speculative-config '{"method": "dflash"}'"""),
        ("eagle3_llama", "good", {}, "", """--speculative-config '{"method": "eagle3"}'"""),
        ("dflash_gqa", "good-dspark", {"variant": "dspark"}, "",
         """--speculative-config '{"method": "dspark", "num_speculative_tokens": 7}'"""),
        # A pipeline of 2 (schema/engines/vllm/pipeline.py): the Llama and
        # Qwen3 targets' decoders relay captured states across stages, the
        # Qwen3.5 and Kimi-K2.5 ones do not.
        ("eagle3_llama", "good", {}, "", "--pipeline-parallel-size 2"),
        ("eagle3_qwen3", "good", {}, "", "-pp 2"),
        ("eagle3_mla", "good", {}, "", "-pp 2"),
        ("dflash_gqa", "good", {}, "", "-pp 2"),
        ("dflash_gqa", "good-dspark", {"variant": "dspark"}, "", "-pp 2"),
        # max_model_len in --speculative-config: the draft's own length,
        # refused above the draft's derived length or the served one; 0.33.0
        # lowers the server's to it for a draft whose RoPE it does not raise.
        ("dflash_gqa", "good", {}, "",
         """--max-model-len 2048 -sc '{"method": "dflash", "num_speculative_tokens": 3, "max_model_len": 1024}'"""),
        ("dflash_gqa", "max-pos-1024", {}, "max_position_embeddings=1024",
         """--max-model-len 2048 -sc '{"method": "dflash", "num_speculative_tokens": 3, "max_model_len": 1536}'"""),
        ("dflash_gqa", "yarn-4096", {}, "max_position_embeddings=4096; rope_scaling="
         '{"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 2048}',
         """--max-model-len 2048 -sc '{"method": "dflash", "num_speculative_tokens": 3, "max_model_len": 1024}'"""),
        ("dflash_gqa", "yarn-4096", {}, "max_position_embeddings=4096; rope_scaling="
         '{"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 2048}',
         """--max-model-len 2048 -sc '{"method": "dflash", "num_speculative_tokens": 3, "max_model_len": 3072}'"""),
        ("eagle3_llama", "good", {}, "",
         """--max-model-len 2048 -sc '{"method": "eagle3", "num_speculative_tokens": 3, "max_model_len": 1024}'"""),
    ],
}


# Good drafts served against another family's tiny target, per engine:
# (family, name, build options, the family whose target it is). SGLang
# 0.5.20's Kimi-K3 classes capture for DSPARK only, 0.5.21 adds DFLASH
# (schema/engines/sglang/releases.py).
TARGET_CASES: dict[str, list[tuple[str, str, dict, str]]] = {
    "sglang": [
        ("dflash_gqa", "good", {}, "k3_dspark"),
        ("dflash_gqa", "good-dspark", {"variant": "dspark"}, "k3_dspark"),
    ],
}


def _target_cases(root: Path, workdir: Path, engine_name: str | None) -> list[Case]:
    cases = []
    for family, name, options, target_family in TARGET_CASES.get(engine_name or "", []):
        target = _write_target(workdir, target_family)
        folder = root / "target" / family / name
        if not folder.exists():
            fabricate(folder, family=family, **options)
        cases.append(Case(id=f"fabricated/target/{family}/{name}/on-{target_family}-target", folder=str(folder),
                          origin=ORIGIN, family=family, target_config=str(target),
                          trained_layers=_trained_layers(folder, target, None),
                          expect=f"{name} against the {target_family} tiny target"))
    return cases


def _edited(folder: Path, edit: str) -> None:
    """A config value (`key=JSON`), a dropped tensor (`drop=NAME`), the
    embedding made int8 or one column narrower (`embed=int8|narrow`) or an
    EAGLE-3 draft's taps (`taps=a,b,c`, in eagle_config, where SGLang's
    target and draft read them), written as a user would: the config as
    JSON, the weights by safetensors. Edits are separated by `; `."""
    if not edit:
        return
    if "; " in edit:
        for one in edit.split("; "):
            _edited(folder, one)
        return
    key, _, value = edit.partition("=")
    if key == "taps":
        config = json.loads((folder / "config.json").read_text())
        config.setdefault("eagle_config", {})["eagle_aux_hidden_state_layer_ids"] = [int(i) for i in value.split(",")]
        (folder / "config.json").write_text(json.dumps(config))
        return
    if key == "embed":
        import torch
        from safetensors.torch import load_file, save_file

        weights = folder / "model.safetensors"
        tensors = load_file(str(weights))
        name = next(n for n in tensors if n.endswith("embed_tokens.weight"))
        tensors[name] = (torch.ones(tensors[name].shape, dtype=torch.int8) if value == "int8"
                         else tensors[name][:, :-1].contiguous())
        save_file(tensors, str(weights))
        return
    if key == "drop":
        from safetensors.torch import load_file, save_file

        weights = folder / "model.safetensors"
        save_file({k: v for k, v in load_file(str(weights)).items() if value not in k}, str(weights))
        return
    config = json.loads((folder / "config.json").read_text())
    config[key] = json.loads(value)
    (folder / "config.json").write_text(json.dumps(config))


def _launch_cases(root: Path, workdir: Path, engine_name: str | None) -> list[Case]:
    cases = []
    for family, name, options, edit, launch in LAUNCH_CASES.get(engine_name or "", []):
        target = _write_target(workdir, family)
        folder = root / "launch" / family / name
        if not folder.exists():
            fabricate(folder, family=family, **options)
            _edited(folder, edit)
        slug = re.sub(r"[^\w.=-]+", "", "-".join(launch.replace("--", "").split())) or "defaults"
        cases.append(Case(id=f"fabricated/launch/{family}/{name}/{slug}", folder=str(folder), origin=ORIGIN,
                          family=family, target_config=str(target), launch=launch or None,
                          trained_layers=_trained_layers(folder, target, None),
                          expect=f"{name} under {launch or 'the defaults'}"))
    return cases


def build(workdir: Path, *, engine: str | None = None) -> list[Case]:
    """Write every fabricated draft under `workdir/fabricated` and return
    the cases. `engine` (`NAME` or `NAME@REV`) adds that engine's layout of
    each good draft beside the default one."""
    root = workdir / "fabricated"
    cases: list[Case] = []
    engine_name = engine.partition("@")[0] if engine else None
    for family, fab in FABRICATORS.items():
        target = _write_target(workdir, family)
        layouts = [None] + ([engine_name] if engine_name else [])
        if fab.engine and fab.engine not in layouts:
            layouts.append(fab.engine)
        for layout in layouts:
            for options in GOOD_VARIANTS.get(family, [{}]):
                name = _slug(options) + (f"-{layout}-layout" if layout else "")
                folder = root / family / name
                try:
                    fabricate(folder, family=family, engine=layout, **options)
                except (FabricateError, DefectNotApplicable):
                    continue
                cases.append(Case(id=f"fabricated/{family}/{name}", folder=str(folder), origin=ORIGIN,
                                  family=family, target_config=str(target),
                                  trained_layers=_trained_layers(folder, target, layout or fab.engine),
                                  expect="a good draft"))
        if family == "dflash_gqa":
            cases.append(_declared_own_head(root, target))
        if family == "dflash2":
            cases += _engine_readings(root, target)
        for defect_name, defect in fab.defects.items():
            if defect.deep:
                continue  # payload values: the engines load them as they are
            folder = root / family / defect_name
            try:
                fabricate(folder, family=family, defect=defect_name, engine=fab.engine)
            except (FabricateError, DefectNotApplicable):
                continue
            good = root / family / ("good" + (f"-{fab.engine}-layout" if fab.engine else ""))
            # a defect in the tap ids is the list itself: what it was trained on is not the good draft's
            trained = None if defect_name.startswith("tap") else _trained_layers(good, target, fab.engine)
            cases.append(Case(id=f"fabricated/{family}/{defect_name}", folder=str(folder), origin=ORIGIN,
                              family=family, target_config=str(target),
                              trained_layers=trained,
                              expect=f"{defect.code}: {defect.description}"))
            if defect.code == "TGT005":
                # the same folder judged without --target: the config states its
                # target's layer count, which bounds the taps by itself (TGT009)
                cases.append(Case(id=f"fabricated/{family}/{defect_name}-stated-target", folder=str(folder),
                                  origin=ORIGIN, family=family, target_config=str(target), trained_layers=trained,
                                  check_without_target=True,
                                  expect=f"{defect.description}, checked without --target"))
    return cases + _launch_cases(root, workdir, engine_name) + _target_cases(root, workdir, engine_name)
