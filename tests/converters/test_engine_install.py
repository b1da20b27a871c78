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
def test_a_version_without_the_files_is_an_unknown_release_of_that_engine(versioned_engine, name, version):
    # a package folder and a dist-info, none of the code the rules cite: no evidence of any release
    (engine,) = find_installed_engines(versioned_engine(name, version))
    assert (engine.distribution, engine.version) == (name, version)
    assert engine.profile is None and engine.revision is None and engine.missing
    runtime = Runtime((engine,))
    findings = {f.code: f for f in runtime_findings(runtime, family="k3_dspark")}
    # judged with the same engine's newest release, never another engine's, and said
    assert runtime.profile == engine_by_spec(name).spec and "RUN004" in findings and "RUN003" not in findings
    assert "cannot be told" in findings["RUN004"].message


@pytest.mark.parametrize("files, installed, judged_as, code", [
    ("0.33.0", "0.33.0", "vllm@0.33.0", "RUN003"),
    ("0.33.0", "0.33.0.post1", "vllm@0.33.0", "RUN003"),
    ("0.33.0", "0.33.0+cu130", "vllm@0.33.0", "RUN003"),
    ("0.32.0", "0.32.0", "vllm@0.32.0", "RUN003"),
    ("0.31.0", "0.31.0", "vllm@0.31.0", "RUN003"),
    ("0.30.0", "0.30.0", "vllm@0.30.0", "RUN003"),
    # an unmodelled release: the nearest modelled one, and what differs from it
    ("0.33.0", "0.34.0", "vllm@0.33.0", "RUN006"),
    ("0.30.0", "0.29.0", "vllm@0.30.0", "RUN006"),
    ("0.32.0", "0.34.0", "vllm@0.33.0", "RUN007"),
    # a build of a modelled release whose cited functions are another release's
    ("0.32.0", "0.33.0.post1", "vllm@0.33.0", "RUN007"),
])
def test_an_installed_vllm_is_told_by_its_version_and_its_cited_functions(released_engine, files, installed,
                                                                          judged_as, code):
    (engine,) = find_installed_engines(released_engine("vllm", files, installed_version=installed))
    runtime = Runtime((engine,))
    findings = {f.code: f for f in runtime_findings(runtime, family="k3_dspark")}
    assert runtime.profile == judged_as and code in findings, [f.message for f in findings.values()]
    assert engine.exact is (code == "RUN003")
    if code == "RUN007":  # the functions that differ are named, and the release they all are
        differing = engine.functions.differing
        assert differing and all(function in findings["RUN007"].message for function in differing)
        assert engine.same_as == files and f"--engine vllm@{files} judges" in findings["RUN007"].message
    else:
        assert engine.functions.matches and engine.functions.same


@pytest.mark.parametrize("version", ["0.5.23", "0.5.22", "0.5.21", "0.5.20"])
def test_each_installed_sglang_release_is_itself(released_engine, version):
    (engine,) = find_installed_engines(released_engine("sglang", version))
    assert engine.profile == f"sglang@{version}" and engine.exact, engine.differences


def test_an_edited_function_is_named_and_fails_the_gate_unless_waived(released_engine):
    from dspark.schema.policy import Policy, judge

    site = released_engine("vllm", "0.33.0", installed_version="0.33.0+local")
    edited = site / "vllm/v1/worker/gpu/spec_decode/eagle/eagle3_utils.py"
    original = edited.read_text()
    edited.write_text(original.replace("def requires_aux_hidden_states(", "def requires_aux_hidden_states(\n"
                                                 "    *_ignored,", 1))
    (engine,) = find_installed_engines(site)
    findings = runtime_findings(Runtime((engine,)), family="eagle3_llama")
    [differ] = [f for f in findings if f.code == "RUN007"]
    assert engine.functions.changed == ("vllm/v1/worker/gpu/spec_decode/eagle/eagle3_utils.py::"
                                        "requires_aux_hidden_states",)
    assert "requires_aux_hidden_states" in differ.message
    assert any(j.fails for j in judge([differ], Policy()))
    assert not any(j.fails for j in judge([differ], Policy(waivers={"RUN007": "read by hand"})))
    # a comment or a moved line is no difference
    edited.write_text("# moved down\n\n" + original.replace("(spec_config", "(  # why\n    spec_config", 1))
    (engine,) = find_installed_engines(site)
    assert engine.functions.changed == ()


def test_a_partial_install_of_a_release_is_unknown(released_engine):
    site = released_engine("vllm", "0.33.0")
    (site / "vllm/model_executor/models/registry.py").unlink()
    (engine,) = find_installed_engines(site)
    assert engine.profile is None and any(path.endswith("registry.py") for path in engine.missing)


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


@pytest.mark.parametrize("version", ["0.1.1", "0.1.0"])
def test_each_installed_tokenspeed_release_is_named_by_its_wheel(released_engine, version):
    site = released_engine("tokenspeed", version, everything=True)
    runtime = probe_runtime(site)
    engine = runtime.serving
    assert engine.profile == f"tokenspeed@{version}" and engine.exact, engine.differences
    [said] = [f for f in runtime_findings(runtime, family="k3_dspark") if f.code == "RUN003"]
    assert f"TokenSpeed {version}" in said.message
    if version == "0.1.1":  # its K3 model's engine-local kernel is found
        assert runtime.kernel is not None and runtime.kernel.importable
    assert "tokenspeed" not in sys.modules  # read, never imported


def test_the_0_1_0_release_has_no_k3_model_and_never_passes_one(released_engine, tiny_draft):
    runtime = probe_runtime(released_engine("tokenspeed", "0.1.0", everything=True))
    assert runtime.profile == "tokenspeed@0.1.0"
    from dspark.converters.runtime import check_with_runtime

    report = check_with_runtime(tiny_draft(), runtime=runtime)
    assert "ENG006" in {f.code for f in report.errors}  # 0.1.0 serves no K3 DSpark draft: never a pass by default


@pytest.mark.parametrize("version", ["0.1.1", "0.1.0"])
def test_a_partial_tokenspeed_release_is_unknown(released_engine, fabricated_engine, version):
    site = released_engine("tokenspeed", version, everything=True)
    (site / "tokenspeed/runtime/models/llama_eagle3.py").unlink()
    assert probe_runtime(site).serving.profile is None
    # a tree carrying a release's facts but not its code is no release either
    assert probe_runtime(fabricated_engine(version, version=version)).serving.profile is None


def test_an_unmodelled_tokenspeed_release_is_judged_by_the_nearest(released_engine):
    engine = probe_runtime(released_engine("tokenspeed", "0.1.1", everything=True,
                                           installed_version="0.1.2")).serving
    assert engine.profile == "tokenspeed@0.1.1" and not engine.modelled and engine.functions.matches
    engine = probe_runtime(released_engine("tokenspeed", "0.1.0", everything=True,
                                           installed_version="0.1.2")).serving
    assert engine.profile == "tokenspeed@0.1.1" and engine.functions.differing


def test_the_installed_engines_lists_are_read_from_its_files(released_engine):
    from dspark.converters.runtime import installed_profile

    site = released_engine("vllm", "0.33.0")
    (engine,) = find_installed_engines(site)
    assert engine.exact and engine.list_changes == {}  # read alike in the wheel and the install
    assert "GraniteMoeForCausalLM" in engine.lists.eagle3_targets and "DFlashDraftModel" in engine.lists.drafts
    # a build whose GraniteMoe target no longer implements SupportsEagle3, and
    # whose registry maps one more draft class
    granite = site / "vllm/model_executor/models/granitemoe.py"
    granite.write_text(granite.read_text().replace("SupportsPP, SupportsEagle3):", "SupportsPP):", 1))
    registry = site / "vllm/model_executor/models/registry.py"
    registry.write_text(registry.read_text().replace(
        "_SPECULATIVE_DECODING_MODELS = {", '_SPECULATIVE_DECODING_MODELS = {\n    "NewDraftModel": ("new", "New"),', 1))
    runtime = probe_runtime(site)
    engine = runtime.serving
    assert engine.list_changes["eagle3_targets"] == ((), ("GraniteMoeForCausalLM",))
    assert engine.list_changes["drafts"] == (("NewDraftModel",), ())
    [said] = [f for f in runtime_findings(runtime, family="eagle3_llama") if f.code == "RUN008"]
    assert "GraniteMoeForCausalLM gone" in said.message and "NewDraftModel added" in said.message
    judged = installed_profile(runtime, "vllm@0.33.0")
    assert "GraniteMoeForCausalLM" in judged.loader_for("eagle3_llama").targets_without_capture
    assert "NewDraftModel" in judged.architectures.registered
    assert "GraniteMoeForCausalLM" not in engine_by_spec("vllm@0.33.0").loader_for("eagle3_llama").targets_without_capture


@pytest.mark.parametrize("name, version", [("sglang", "0.5.22"), ("tokenspeed", "0.1.1")])
def test_a_release_reads_as_the_lists_recorded_for_it(released_engine, name, version):
    (engine,) = find_installed_engines(released_engine(name, version))
    assert engine.exact and engine.lists.drafts and engine.list_changes == {}
