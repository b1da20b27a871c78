"""What `dspark check` loads at start-up: the family and engine of the
checkpoint in hand, not every one dspark models (docs/check.md, the
header-only benchmark). Each probe runs in a fresh interpreter and reads
`sys.modules` after the command."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from dspark.cli.main import COMMAND_MODULES, COMMANDS, app, app_for
from dspark.examples.fabricate import fabricate, write_draft
from dspark.schema import engines, families

PROBE = textwrap.dedent(
    """
    import json, sys
    from dspark.cli.main import main
    sys.argv = ["dspark", *sys.argv[1:]]
    try:
        main()
    except SystemExit as exit:
        code = exit.code
    loaded = sorted(m for m in sys.modules if m.startswith("dspark.") or m in ("numpy", "torch", "yaml", "shlex"))
    sys.stderr.write(json.dumps({"exit": code, "loaded": loaded}) + "\\n")
    """
)

OTHER_FAMILIES = {
    "k3_dspark": ["dspark.schema.families.dflash_gqa", "dspark.schema.families.eagle3_llama",
                  "dspark.schema.families.eagle3_mla"],
    "dflash_gqa": ["dspark.schema.families.k3_dspark", "dspark.schema.families.eagle3_llama",
                   "dspark.schema.families.eagle3_mla"],
}


def loaded_by(*args: str) -> tuple[int, list[str]]:
    done = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=120)
    result = json.loads(done.stderr.strip().splitlines()[-1])
    return result["exit"], result["loaded"]


@pytest.mark.parametrize("family", sorted(OTHER_FAMILIES))
def test_a_check_imports_the_family_of_the_checkpoint_only(tmp_path, family):
    draft = fabricate(tmp_path / "draft", family=family, sparse=True)
    code, loaded = loaded_by("check", str(draft))
    assert code == 0
    assert f"dspark.schema.families.{family}" in loaded
    assert [m for m in OTHER_FAMILIES[family] if m in loaded] == []


def test_a_k3_check_imports_the_k3_loader_of_its_engine_only(tmp_path):
    """The engine packages hold one module per family: a K3 check imports
    the K3 loader, not the others (nor what only `check --runtime` reads)."""
    draft = fabricate(tmp_path / "draft", family="k3_dspark", sparse=True)
    code, loaded = loaded_by("check", str(draft))
    assert code == 0
    assert "dspark.schema.engines.tokenspeed.k3_dspark" in loaded
    others = [f"dspark.schema.engines.tokenspeed.{family}" for family in ("dflash_gqa", "eagle3_llama", "eagle3_mla")]
    assert [m for m in others if m in loaded] == []
    assert "dspark.schema.engines.tokenspeed.revisions" not in loaded
    assert [m for m in loaded if m.startswith(("dspark.schema.engines.vllm", "dspark.schema.engines.sglang"))] == []


def test_the_lazy_loaders_are_the_loaders_of_every_family():
    from dspark.schema.engines import tokenspeed
    from dspark.schema.engines.tokenspeed import dflash_gqa, eagle3_llama, eagle3_mla, k3_dspark

    for profile in tokenspeed.PROFILES:
        if profile is tokenspeed.RELEASE_0_1_0:  # the first release serves no K3 DSpark draft, main's others
            assert list(profile.loaders) == ["dflash_gqa", "eagle3_llama", "eagle3_mla"]
            assert profile.loaders["dflash_gqa"] is dflash_gqa.LOADER
            assert profile.loaders["eagle3_llama"] is eagle3_llama.LOADER
            continue
        # 0.1.1 adds DFlash2, which no git snapshot registers
        added = ["dflash2"] if profile is tokenspeed.RELEASE_0_1_1 else []
        assert list(profile.loaders) == ["k3_dspark", "dflash_gqa", "eagle3_llama", "eagle3_mla", *added]
        assert "k3_dspark" in profile.loaders
        assert profile.loader_for("medusa") is None
        if profile is tokenspeed.MAIN_PROFILE:  # the others' drafters pick a GQA draft's stream
            assert profile.loaders["dflash_gqa"] is dflash_gqa.LOADER
        else:
            assert profile.loader_for("dflash_gqa") is profile.loaders["dflash_gqa"]  # built once
        assert profile.loaders["eagle3_llama"] is eagle3_llama.LOADER
        assert profile.loaders["eagle3_mla"] is eagle3_mla.LOADER
        assert profile.loader_for("k3_dspark") is profile.loaders["k3_dspark"]  # built once
    assert tokenspeed.CURRENT.loaders["k3_dspark"] == k3_dspark.loader(serving_change=True)
    assert tokenspeed.MAIN_PROFILE.loaders["k3_dspark"] == k3_dspark.loader(serving_change=False)
    assert tokenspeed.PR_1016.loaders["k3_dspark"] == k3_dspark.loader_pr1016()
    assert tokenspeed.PR_1016.loaders["dflash_gqa"] == dflash_gqa.loader_pr1016()
    assert tokenspeed.PR_1031.loaders["dflash_gqa"] == dflash_gqa.loader_pr1031()
    assert dict(tokenspeed.CURRENT.loaders) == dict(tokenspeed.PR_1031.loaders)


def test_a_check_imports_neither_the_gate_policy_nor_other_commands(tmp_path):
    draft = write_draft(tmp_path / "draft")
    code, loaded = loaded_by("check", str(draft))
    assert code == 0
    assert "dspark.schema.policy" not in loaded  # no project settings here to parse
    assert "dspark.schema.explanations" not in loaded
    # a header-only check reads no value: neither numpy nor the YAML reader
    assert [m for m in ("numpy", "torch", "yaml") if m in loaded] == []
    assert [m for m in loaded if m.startswith(("dspark.converters.gate", "dspark.converters.convert",
                                               "dspark.converters.doctor", "dspark.kernels"))] == []
    # nor the other commands' own modules (their options, enums and help)
    other_commands = {module for name, module in COMMAND_MODULES.items() if name not in ("check", "version")}
    assert sorted(other_commands & set(loaded)) == []
    # nor what only some findings need (shlex for SRV001's command line)
    assert "shlex" not in loaded


def test_a_check_imports_the_engines_it_judges_with_only(tmp_path):
    draft = write_draft(tmp_path / "draft")
    _, loaded = loaded_by("check", str(draft), "--engine", "sglang")
    assert "dspark.schema.engines.sglang" in loaded
    assert [m for m in loaded if m.startswith("dspark.schema.engines.tokenspeed")] == []
    code, loaded = loaded_by("check", str(draft))
    assert code == 0
    assert [m for m in loaded if m.startswith("dspark.schema.engines.sglang")] == []


def test_the_command_line_freezes_what_start_up_built():
    """`main` moves start-up's objects out of the collector's way
    (gc.freeze) before the command runs and thaws them after it, so a
    process that calls main() and goes on (a test suite) collects them
    again; `run`, which other code calls in its own process, freezes
    nothing. The collector is running again when the command runs."""
    # An interpreter may start with objects frozen already (some 3.12 builds
    # do): what counts is what dspark adds to the count and takes back.
    probe = ("import gc, sys\nbefore = gc.get_freeze_count()\nimport dspark.cli.main as cli\n"
             "seen = []\n"
             "cli.dspark_version = lambda: seen.append((gc.get_freeze_count(), gc.isenabled())) or 'x'\n"
             "cli.run(['version'])\n"
             "sys.argv = ['dspark', 'version']\n"
             "try:\n    cli.main()\nexcept SystemExit:\n    pass\n"
             "sys.stderr.write(f'{before} {seen[0][0]} {seen[1][0]} {gc.get_freeze_count()} {seen[0][1]} {seen[1][1]}\\n')")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    before, run_frozen, main_frozen, after, run_collects, main_collects = done.stderr.split()
    # (gc.unfreeze thaws the whole permanent generation, so what the
    # interpreter froze before dspark's main is thawed with it)
    assert int(run_frozen) == int(before) and int(main_frozen) > int(before) and int(after) == 0
    assert run_collects == main_collects == "True"


def test_start_up_pauses_the_collector_and_restores_it_as_it_was():
    """The collector is paused while the command's modules are imported and
    built, and left as the caller had it: on, or off."""
    probe = ("import gc, sys\nimport dspark.cli.main as cli\n"
             "seen = []\n"
             "real = cli.app_for\n"
             "cli.app_for = lambda args: seen.append(gc.isenabled()) or real(args)\n"
             "cli.run(['version']); on = gc.isenabled()\n"
             "gc.disable(); cli.run(['version']); off = gc.isenabled()\n"
             "sys.stderr.write(f'{seen} {on} {off}\\n')")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.stderr.strip() == "[False, False] True False", done.stderr


def test_families_still_lists_every_family_and_engine():
    code, loaded = loaded_by("families", "--format", "json")
    assert code == 0
    assert {f"dspark.schema.families.{entry.name}" for entry in families.REGISTRY} <= set(loaded)
    assert {f"dspark.schema.engines.{name}" for name in engines.engine_names()} <= set(loaded)


def test_only_the_command_asked_for_is_built():
    """typer reads the signature of every command it registers; a run
    builds the one it runs (the whole group for help and anything else)."""
    for name in COMMANDS:
        single = app_for([name, "--help"])
        assert [c.callback.__name__ for c in single.registered_commands] == [name]
    assert app_for(["--help"]) is app
    assert app_for([]) is app
    assert app_for(["chekc", "x"]) is app
    assert len(app.registered_commands) == len(COMMANDS)


def test_help_still_lists_every_command():
    done = subprocess.run([sys.executable, "-m", "dspark.cli.main", "--help"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0
    for name in COMMANDS:
        assert name in done.stdout


# --------------------------------------------------------------------------
# The registries: lazy, and their recognition lines true to the families


LAZY_PROBE = textwrap.dedent(
    """
    import json, sys
    import dspark.schema.families as registry
    import dspark.schema.engines as engines
    before = sorted(m for m in sys.modules if m.startswith("dspark.schema.families.")
                    or m.startswith("dspark.schema.engines."))
    family = registry.family_for_config({"architectures": ["LlamaForCausalLMEagle3"]})
    after_family = sorted(m for m in sys.modules if m.startswith("dspark.schema.families."))
    profile = engines.engine_by_spec("tokenspeed@main")
    after_engine = sorted(m for m in sys.modules if m.startswith("dspark.schema.engines."))
    print(json.dumps({"before": before, "family": family.name, "after_family": after_family,
                      "engine": profile.spec, "after_engine": after_engine}))
    """
)


def test_the_registries_import_a_module_when_it_is_asked_for():
    done = subprocess.run([sys.executable, "-c", LAZY_PROBE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["before"] == ["dspark.schema.engines.base", "dspark.schema.families.base"]
    assert result["family"] == "eagle3_llama"
    assert "dspark.schema.families.eagle3_llama" in result["after_family"]
    assert "dspark.schema.families.k3_dspark" not in result["after_family"]
    assert "dspark.schema.families.dflash_gqa" not in result["after_family"]
    assert result["engine"] == "tokenspeed@main"
    assert "dspark.schema.engines.tokenspeed" in result["after_engine"]
    assert [m for m in result["after_engine"] if m.startswith("dspark.schema.engines.sglang")] == []


@pytest.mark.parametrize("entry", families.REGISTRY, ids=lambda e: e.name)
def test_a_registry_line_recognises_its_family_by_the_familys_own_names(entry):
    family = getattr(families, entry.attribute)
    assert (entry.name, entry.architectures, entry.legacy_architectures, entry.model_types) == (
        family.name, family.architectures, family.legacy_architectures, family.model_types)
    assert families.family_by_name(entry.name) is family
    assert families.FAMILIES[families.REGISTRY.index(entry)] is family


def test_every_engine_package_names_its_profiles():
    for name in engines.engine_names():
        profiles = engines.profiles_of(name)
        assert engines.engine_by_spec(name) in profiles
        assert {profile.name for profile in profiles} == {name}
    assert engines.DEFAULT_ENGINE is engines.default_engine() is engines.engine_by_spec(None)
    assert engines.PROFILES == engines.all_profiles()
