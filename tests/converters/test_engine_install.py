"""Which serving engine is installed here, and which revision: read from
its files (fabricated installs carrying each revision's fingerprinting
lines), never imported."""

from __future__ import annotations

import sys

import pytest

from dspark.converters.engine_install import engine_path_from, find_installed_engines
from dspark.converters.runtime import Runtime, probe_runtime, runtime_engine, runtime_findings
from dspark.schema.engines import engine_by_spec
from dspark.schema.errors import UsageError


@pytest.mark.parametrize("revision", ["main", "pr1016", "pr1031"])
def test_each_known_revision_is_told_by_its_code(fabricated_engine, revision):
    (engine,) = find_installed_engines(fabricated_engine(revision))
    assert (engine.distribution, engine.version) == ("tokenspeed", "0.1.0")
    assert (engine.profile, engine.revision, engine.exact) == (f"tokenspeed@{revision}", revision, True)
    assert engine.differences == ()
    evidence = {e.name: e for e in engine.evidence}
    assert evidence["fc_norm_built"].value is (revision != "main")
    assert evidence["stream_env_read"].value is (revision == "pr1016")
    assert "tokenspeed" not in sys.modules  # read, never imported


def test_the_kernel_each_revision_imports(fabricated_engine):
    (main,) = find_installed_engines(fabricated_engine("main"))
    assert main.kernel is None
    (pr1016,) = find_installed_engines(fabricated_engine("pr1016"))
    assert pr1016.kernel.module == "tokenspeed_kernel.ops.layernorm.triton" and pr1016.kernel.importable
    assert pr1016.kernel.import_site.endswith("kimi_k3_dspark.py:3")
    (pr1031,) = find_installed_engines(fabricated_engine("pr1031"))
    assert pr1031.kernel.module == "tokenspeed.runtime.layers.segmented_rmsnorm" and pr1031.kernel.importable
    assert pr1031.kernel.file.endswith("tokenspeed/runtime/layers/segmented_rmsnorm.py")


def test_pr1016_with_a_kernel_wheel_lacking_the_norm(fabricated_engine):
    (engine,) = find_installed_engines(fabricated_engine("pr1016", wheel_kernel=False))
    assert engine.exact and not engine.kernel.importable
    assert "has no top-level segmented_rmsnorm" in engine.kernel.why_missing
    runtime = Runtime((engine,))
    assert not runtime.starts
    (run001,) = [f for f in runtime_findings(runtime, family="k3_dspark") if f.code == "RUN001"]
    assert "will not start" in run001.message and "registry.py" in run001.message


def test_an_unknown_revision_is_judged_by_the_nearest_naming_what_differs(fabricated_engine):
    # PR 1031's files, but the drafter reads the variable again
    site = fabricated_engine("pr1031", drafter_lines='X = "TOKENSPEED_DFLASH_AUX_STREAM"\n\n'
                             "def _resolve_aux_hidden_stream(cfg):\n    return 'prefix'\n")
    (engine,) = find_installed_engines(site)
    assert not engine.exact and engine.profile == "tokenspeed@pr1031"
    (difference,) = engine.differences
    assert "TOKENSPEED_DFLASH_AUX_STREAM" in difference and "dflash.py:1" in difference
    (warning,) = [f for f in runtime_findings(Runtime((engine,)), family="k3_dspark") if f.code == "RUN004"]
    assert "matches no revision dspark knows" in warning.message and "tokenspeed@pr1031" in warning.message


def test_found_on_the_python_path_and_by_the_environment(fabricated_engine, monkeypatch):
    site = fabricated_engine("pr1031")
    monkeypatch.syspath_prepend(str(site))
    (engine,) = probe_runtime().engines
    assert engine.profile == "tokenspeed@pr1031" and engine.location == str(site / "tokenspeed")
    other = fabricated_engine("main")
    assert probe_runtime(environ={"DSPARK_ENGINE_PATH": str(other)}).profile == "tokenspeed@main"
    assert probe_runtime(other / "tokenspeed").profile == "tokenspeed@main"  # the package folder itself


def test_nothing_installed_is_said_and_judged_with_the_default():
    runtime = Runtime(())
    assert runtime.profile == "tokenspeed@0.1.1"
    (finding,) = runtime_findings(runtime, family="k3_dspark")
    assert finding.code == "RUN005" and "no serving engine is installed here" in finding.message


def test_a_missing_engine_path_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="--engine-path"):
        engine_path_from(tmp_path / "nowhere")


@pytest.mark.parametrize("name, version", [("vllm", "0.33.0"), ("sglang", "0.5.23"), ("vllm", "0.40.0")])
def test_engines_told_by_version_without_a_profile_are_warned(versioned_engine, name, version):
    (engine,) = find_installed_engines(versioned_engine(name, version))
    assert (engine.distribution, engine.version) == (name, version)
    try:
        engine_by_spec(name)
        modelled = version in ("0.33.0", "0.5.23")
    except UsageError:
        modelled = False
    runtime = Runtime((engine,))
    codes = {f.code for f in runtime_findings(runtime, family="k3_dspark")}
    if modelled:
        assert engine.profile == runtime.profile == engine_by_spec(name).spec and "RUN003" in codes
    else:  # said, and judged by the same engine's nearest release, never another engine's
        assert runtime.profile == engine_by_spec(name).spec and not engine.exact and "RUN004" in codes


@pytest.mark.parametrize("version, judged_as, exact", [
    ("0.33.0.post1", "vllm@0.33.0", True), ("0.33.0+cu130", "vllm@0.33.0", True),
    ("0.32.0", "vllm@0.32.0", True), ("0.29.0", "vllm@0.30.0", False), ("0.34.0", "vllm@0.33.0", False)])
def test_an_unmodelled_vllm_release_is_judged_by_the_nearest_vllm_release(versioned_engine, version, judged_as,
                                                                         exact):
    (engine,) = find_installed_engines(versioned_engine("vllm", version))
    runtime = Runtime((engine,))
    assert runtime.profile == judged_as and engine.exact is exact
    codes = {f.code for f in runtime_findings(runtime, family="k3_dspark")}
    assert ("RUN003" if exact else "RUN004") in codes


def test_engine_flag_must_agree_with_the_installed_engine(fabricated_engine):
    runtime = probe_runtime(fabricated_engine("main"))
    assert runtime_engine(runtime, None) == "tokenspeed@main"
    assert runtime_engine(runtime, "tokenspeed@main") == "tokenspeed@main"
    with pytest.raises(UsageError, match="disagree"):
        runtime_engine(runtime, "tokenspeed@pr1031")


def test_a_source_checkout_says_its_version_in_its_pyproject(fabricated_engine):
    site = fabricated_engine("pr1031")
    for info in site.glob("tokenspeed-*.dist-info"):
        (info / "METADATA").unlink()
        info.rmdir()
    (engine,) = find_installed_engines(site)
    assert engine.version is None
    (site / "pyproject.toml").write_text('[project]\nname = "tokenspeed"\nversion = "0.1.0"\n')
    (engine,) = find_installed_engines(site)
    assert engine.version == "0.1.0" and engine.profile == "tokenspeed@pr1031"


def test_the_0_1_1_release_is_told_by_its_code_and_judged_as_itself(fabricated_engine, tiny_draft):
    site = fabricated_engine("0.1.1", version="0.1.1")
    runtime = probe_runtime(site)
    engine = runtime.serving
    assert engine.profile == "tokenspeed@0.1.1" and engine.exact, engine.differences
    [said] = [f for f in runtime_findings(runtime, family="k3_dspark") if f.code == "RUN003"]
    assert "TokenSpeed 0.1.1, the PyPI release" in said.message
    # pull request 1031's files differ from it in one fact: its drafter resolves the stream
    assert probe_runtime(fabricated_engine("pr1031")).profile == "tokenspeed@pr1031"


def test_the_0_1_0_release_has_no_k3_model_and_is_judged_as_itself(fabricated_engine, tiny_draft):
    runtime = probe_runtime(fabricated_engine("0.1.0", version="0.1.0"))
    assert runtime.profile == "tokenspeed@0.1.0" and runtime.serving.exact
    from dspark.converters.runtime import check_with_runtime

    report = check_with_runtime(tiny_draft(), runtime=runtime)
    assert "ENG006" in {f.code for f in report.errors}  # 0.1.0 serves no K3 DSpark draft: never a pass by default
    # the same files under another version are no release dspark knows
    assert probe_runtime(fabricated_engine("0.1.0", version="0.1.5")).profile != "tokenspeed@0.1.0"
