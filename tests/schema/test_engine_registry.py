"""The engines registry and the engine-neutral fields a profile is written
in: engines imported by name only when asked for, several at once, an
unknown engine or revision a usage error naming the choices, a family an
engine does not serve a finding (not exit 2), and TokenSpeed's tap reading
expressed as data that reads what its code reads."""

from __future__ import annotations

import dataclasses
import itertools
import json
import subprocess
import sys

import pytest

from dspark.converters.check import check_checkpoint
from dspark.examples.fabricate import SCALES, draft_config, make_tensors, tensor_shapes, write_safetensors
from dspark.schema.engines import ENGINES, all_profiles, default_engine, engine_by_spec, engine_specs
from dspark.schema.engines.base import (
    FIRST_NOT_NULL,
    FIRST_PRESENT,
    HIDDEN_STATES,
    LAYER_OUTPUT,
    Source,
    TapNumbering,
    TapPaths,
)
from dspark.schema.errors import UsageError
from dspark.schema.families import FAMILIES, family_by_name
from dspark.schema.families.dflash_gqa import gqa_taps
from dspark.schema.families.eagle3_common import TAP_IDS_FIELD, target_capture_ids
from dspark.schema.rules.contract import check_contract


def test_a_bare_name_is_the_engines_default_revision():
    assert engine_by_spec("tokenspeed").spec == "tokenspeed@0.1.1"  # the newest release
    assert engine_by_spec(None) is default_engine() is engine_by_spec("tokenspeed")
    assert engine_by_spec(" TokenSpeed@main ").spec == "tokenspeed@main"


def test_an_unknown_engine_is_a_usage_error_naming_the_choices():
    with pytest.raises(UsageError) as caught:
        engine_by_spec("trt-llm")
    assert "'trt-llm'" in str(caught.value) and "tokenspeed" in caught.value.hint and "all" in caught.value.hint


def test_an_unknown_revision_is_a_usage_error_naming_the_revisions():
    with pytest.raises(UsageError) as caught:
        engine_by_spec("tokenspeed@pr9999")
    assert "pr9999" in str(caught.value)
    assert all(spec in caught.value.hint for spec in ("tokenspeed@current", "tokenspeed@pr1031", "tokenspeed@main"))


def test_several_engines_at_once():
    assert [p.spec for p in engine_specs("tokenspeed@main, tokenspeed@pr1031")] == [
        "tokenspeed@main", "tokenspeed@pr1031"]
    assert [p.spec for p in engine_specs(["tokenspeed", "tokenspeed@0.1.1"])] == ["tokenspeed@0.1.1"]
    assert [p.spec for p in engine_specs("all")] == [engine_by_spec(name).spec for name in ENGINES]
    assert engine_specs(None) == (default_engine(),) == engine_specs(" , ")
    with pytest.raises(UsageError):
        engine_specs("tokenspeed,nope")


def test_an_engine_is_imported_only_when_asked_for():
    code = ("import sys; import dspark.schema.engines as e; "
            "before = sorted(m for m in sys.modules if m.startswith('dspark.schema.engines.')); "
            "e.engine_by_spec('tokenspeed@main'); "
            "after = sorted(m for m in sys.modules if m.startswith('dspark.schema.engines.')); "
            "print(before, after)")
    before, after = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                   check=True).stdout.strip().split("] [")
    assert "tokenspeed" not in before
    assert "dspark.schema.engines.tokenspeed" in after


def test_every_profile_cites_its_tap_reading():
    for profile in all_profiles():
        for loader in profile.loaders.values():
            assert loader.taps is not None, (profile.spec, loader.family)
            assert loader.taps.numbering.base in (LAYER_OUTPUT, HIDDEN_STATES)
            assert loader.taps.source.cite()


# TokenSpeed's tap reading as data reads what its code reads: the functions
# below transcribe the engine's code, each with its citation.


def llama_draft_taps(config):
    """The Llama draft counts the top-level list only, 3 when absent
    (models/llama_eagle3.py@f4d8ec6e:462-466); `null` makes len() raise."""
    if TAP_IDS_FIELD not in config:
        return None, None, 3
    ids = config[TAP_IDS_FIELD]
    return ids, TAP_IDS_FIELD, len(ids) if isinstance(ids, list) else None


def mla_draft_taps(config):
    """`eagle_config`'s list whenever eagle_config is present (the top level
    is then ignored), else the top level; 3 when the list is absent or null
    (models/deepseek_v3.py@f4d8ec6e:2112-2119, 2139-2140)."""
    eagle = config.get("eagle_config")
    if eagle is None:
        ids, path = config.get(TAP_IDS_FIELD), TAP_IDS_FIELD
    elif isinstance(eagle, dict):
        ids, path = eagle.get(TAP_IDS_FIELD), f"eagle_config.{TAP_IDS_FIELD}"
    else:
        ids, path = None, None
    if ids is None:
        return None, None, 3
    return ids, path, len(ids) if isinstance(ids, list) else None
_LISTS = [None, [], [0, 5, 9], "x"]
_SECTIONS = ["absent", None, {}, "x", "with list", "empty list"]


def _eagle_configs():
    for top, section, text in itertools.product(_LISTS, _SECTIONS, [None, "with list"]):
        config: dict = {}
        if top is not None:  # absent; a null list is the last case
            config[TAP_IDS_FIELD] = top
        if section == "with list":
            config["eagle_config"] = {TAP_IDS_FIELD: [2, 6, 11]}
        elif section == "empty list":
            config["eagle_config"] = {TAP_IDS_FIELD: []}
        elif section != "absent":
            config["eagle_config"] = section
        if text:
            config["text_config"] = {"eagle_config": {TAP_IDS_FIELD: [3, 7, 13]}}
        yield config
    yield {TAP_IDS_FIELD: None}


@pytest.mark.parametrize("config", list(_eagle_configs()), ids=lambda c: json.dumps(c, sort_keys=True))
def test_tokenspeed_eagle3_tap_reading_matches_its_code(config):
    profile = engine_by_spec("tokenspeed")
    for family, draft_reader in (("eagle3_llama", llama_draft_taps), ("eagle3_mla", mla_draft_taps)):
        taps = profile.loader_for(family).taps
        assert taps.target_ids(config) == target_capture_ids(config)
        assert taps.draft_ids(config) == draft_reader(config)[:2]
        assert taps.draft_count(config) == draft_reader(config)[2]


@pytest.mark.parametrize("nested", [None, [], [4, 8], "absent"])
@pytest.mark.parametrize("top", [None, [], [1, 2], "absent"])
def test_tokenspeed_dflash_tap_reading_matches_its_code(nested, top):
    config: dict = {}
    if top != "absent":
        config["target_layer_ids"] = top
    if nested != "absent":
        config["dflash_config"] = {"target_layer_ids": nested}
    assert engine_by_spec("tokenspeed").loader_for("dflash_gqa").taps.target_ids(config) == gqa_taps(config)
    k3 = engine_by_spec("tokenspeed").loader_for("k3_dspark").taps.target_ids(config)
    assert k3 == ((top, "target_layer_ids") if top != "absent" else (None, None))


def test_tap_paths_pick_rules():
    config = {"a": None, "b": [], "c": [1], "s": {"x": None}}
    assert TapPaths(("a", "b", "c")).read(config) == ([1], "c")
    assert TapPaths(("a", "b", "c"), pick=FIRST_NOT_NULL).read(config) == ([], "b")
    assert TapPaths(("a", "b", "c"), pick=FIRST_PRESENT).read(config) == (None, "a")
    assert TapPaths(("s.x", "c"), section_shadows=True).read(config) == (None, None)
    assert TapPaths(("s.x", "c")).read(config) == ([1], "c")
    assert TapPaths(("z",), also_under=("t",)).read({"t": {"z": [4]}}) == ([4], "t.z")


def test_tap_numbering_says_which_layer_an_id_captures():
    source = Source("engine.py", "1", "v1")
    assert TapNumbering(LAYER_OUTPUT, "", source).layer_outputs([1, 9, 17]) == [1, 9, 17]
    assert TapNumbering(HIDDEN_STATES, "", source).layer_outputs([1, 9, 17]) == [0, 8, 16]
    plus_one_from_one = TapNumbering(LAYER_OUTPUT, "", source,
                                     shift=lambda ids, target: 1 if ids and ids[0] == 1 else 0)
    assert plus_one_from_one.layer_outputs([1, 9, 17]) == [2, 10, 18]
    assert plus_one_from_one.layer_outputs([2, 9, 17]) == [2, 9, 17]


def _without(family: str):
    profile = default_engine()
    loaders = {name: loader for name, loader in profile.loaders.items() if name != family}
    return dataclasses.replace(profile, name="fake", revision="1", loaders=loaders)


def _unregistered(family: str):
    """An engine with neither a loader nor a registered class for `family`."""
    profile = _without(family)
    classes = set(family_by_name(family).architectures)
    return dataclasses.replace(profile, architectures=dataclasses.replace(
        profile.architectures, registered=profile.architectures.registered - classes))


def test_a_family_the_engine_registers_but_dspark_has_no_loader_for_is_unjudged():
    # An engine that registers the family's class where dspark has no rules
    # for it (a release the profiles have not caught up with): ENG007, not a refusal.
    config = draft_config(SCALES["tiny"], fc_norm=False)
    result = check_contract(config, [], engine=_without("k3_dspark"))
    assert [f.code for f in result.findings] == ["ENG007"]
    assert result.findings[0].detail["family"] == "k3_dspark"
    assert "has no rules for how fake@1 serves k3_dspark" in result.findings[0].message


def test_a_family_the_engine_does_not_serve_is_a_finding_not_a_usage_error(tmp_path):
    config = draft_config(SCALES["tiny"], fc_norm=False)
    result = check_contract(config, [], engine=_unregistered("k3_dspark"))
    assert [f.code for f in result.findings] == ["ENG006"]
    [finding] = result.findings
    assert "fake@1 does not serve k3_dspark" in finding.message and finding.detail["family"] == "k3_dspark"
    folder = tmp_path / "d"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    write_safetensors(folder, make_tensors(tensor_shapes(SCALES["tiny"], fc_norm=False), dtype="bfloat16", seed=0))
    report = check_checkpoint(folder, engine=_unregistered("k3_dspark"))
    assert [f.code for f in report.errors] == ["ENG006"]
    assert check_checkpoint(folder).passed()


def test_every_family_has_a_tokenspeed_loader_but_the_qwen3_layer_eagle3_and_peagle():
    # No TokenSpeed model registers Eagle3Qwen3ForCausalLM (schema/engines/tokenspeed/eagle3_qwen3.py cites why)
    # nor a P-EAGLE class; every family has a loader in some engine.
    assert {f.name for f in FAMILIES} - {"eagle3_qwen3", "peagle_llama", "peagle_qwen3"} == set(
        default_engine().loaders)
    from dspark.schema.engines import all_profiles

    assert all(any(p.loader_for(f.name) for p in all_profiles()) for f in FAMILIES)


@pytest.mark.parametrize("rule, draft_vocab, refused", [
    ("rejected", None, True), ("rejected_when_full_vocab", None, True),
    ("rejected_when_full_vocab", 64, False), ("hot_token_map", None, False)])
def test_a_token_map_the_engine_has_no_destination_for_is_refused(tmp_path, rule, draft_vocab, refused):
    pytest.importorskip("torch")
    from dspark.examples.fabricate import write_eagle3_draft

    def full_vocab(config):
        config["draft_vocab_size"] = draft_vocab or config["vocab_size"]

    def with_d2t(tensors):
        import torch
        rows = tensors["lm_head.weight"].shape[0]
        tensors["d2t"] = torch.zeros(rows, dtype=torch.int64)

    draft = write_eagle3_draft(tmp_path / "d", config_edit=full_vocab, tensor_edit=with_d2t)
    base = default_engine()
    loader = base.loader_for("eagle3_llama")
    fake = dataclasses.replace(base, name="fake", revision="1", loaders={
        **base.loaders, "eagle3_llama": dataclasses.replace(loader, vocab=dataclasses.replace(loader.vocab, d2t=rule))})
    report = check_checkpoint(draft, engine=fake)
    codes = [(f.code, f.tensor) for f in report.errors]
    assert (("INV002", "d2t") in codes) is refused, codes


def test_the_embedding_rule_is_the_engines(tmp_path):
    # TokenSpeed attaches the target's embedding unless target_hidden_size
    # differs from hidden_size; an engine that always takes the target's
    # does not need the draft's own.
    pytest.importorskip("torch")
    from dspark.examples.fabricate import write_eagle3_draft

    def wider(config):
        config["target_hidden_size"] = config["hidden_size"] * 2

    def no_embedding(tensors):
        tensors.pop("embed_tokens.weight", None)

    draft = write_eagle3_draft(tmp_path / "d", scale="tiny-mla", config_edit=wider, tensor_edit=no_embedding)
    missing = [f.tensor for f in check_checkpoint(draft).errors if f.code == "INV001"]
    assert "embed_tokens.weight" in missing
    base = default_engine()
    loader = base.loader_for("eagle3_mla")
    fake = dataclasses.replace(base, name="fake", revision="1", loaders={
        **base.loaders, "eagle3_mla": dataclasses.replace(loader, vocab=dataclasses.replace(loader.vocab, embedding="target"))})
    assert "embed_tokens.weight" not in [f.tensor for f in check_checkpoint(draft, engine=fake).errors
                                         if f.code == "INV001"]


def test_which_targets_capture_is_the_engines(tmp_path):
    # TokenSpeed's Qwen3ForCausalLM returns no captured states (TGT006); an
    # engine whose Qwen3 model captures them serves the draft.
    pytest.importorskip("torch")
    from dspark.examples.fabricate import write_eagle3_draft

    target = tmp_path / "t"
    target.mkdir()
    (target / "config.json").write_text(json.dumps({"architectures": ["Qwen3ForCausalLM"], "hidden_size": 32,
                                                    "num_hidden_layers": 12, "vocab_size": 96}))
    draft = write_eagle3_draft(tmp_path / "d", tap_ids=[1, 5, 9])
    assert [f.code for f in check_checkpoint(draft, target=target).errors] == ["TGT006"]
    base = default_engine()
    loaders = {name: dataclasses.replace(loader, targets_without_capture=frozenset())
               for name, loader in base.loaders.items()}
    fake = dataclasses.replace(base, name="fake", revision="1", loaders=loaders)
    assert "TGT006" not in [f.code for f in check_checkpoint(draft, target=target, engine=fake).errors]


def test_a_citation_shortens_a_commit_and_keeps_a_version():
    from dspark.schema.engines.base import Source

    assert Source("a.py", "1-2", "f4d8ec6e0123456789abcdef0123456789abcdef").cite() == "a.py@f4d8ec6e:1-2"
    assert Source("a.py", "1-2", "4b9766f6a").cite() == "a.py@4b9766f6:1-2"
    for kept in ("vllm==0.33.0", "4b9766f6", "F4D8EC6E0", "f4d8ec6g0123", "f" * 41):
        assert Source("a.py", "3", kept).cite() == f"a.py@{kept}:3"


@pytest.mark.parametrize("name, releases", [
    ("vllm", ["0.33.0", "0.32.0", "0.31.0", "0.30.0"]),
    ("sglang", ["0.5.23", "0.5.22", "0.5.21", "0.5.20"]),
    ("tokenspeed", ["0.1.1", "0.1.0"]),  # the git snapshots are not releases
])
def test_every_release_of_one_engine(name, releases):
    assert [p.spec for p in engine_specs(f"{name}@all")] == [f"{name}@{r}" for r in releases]
    assert [p.spec for p in engine_specs(f"{name}@all,{name}")] == [f"{name}@{r}" for r in releases]
    with pytest.raises(UsageError, match="every release"):
        engine_by_spec(f"{name}@all")  # a command that judges with one engine


def test_every_release_gives_a_verdict_row_each(tmp_path):
    from dspark.examples.fabricate import write_draft

    draft = write_draft(tmp_path / "d", scale="tiny")
    rows = check_checkpoint(draft, engine="vllm@all").engine_verdicts()
    assert [row["engine"] for row in rows] == [f"vllm@0.{n}.0" for n in (33, 32, 31, 30)]
