"""How a run ends: one JSON shape for every exit, Ctrl-C that says so, a
closed pipe that is not a failing checkpoint, `inspect`'s verdict,
`--version`, and the fabricator on an install without torch."""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dspark.cli.errors import EXIT_CHECK_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE
from dspark.examples.fabricate import SCALES, draft_config, write_sparse_draft

REPORT_KEYS = {"passed", "exit_code", "findings"}


def assert_one_document(run) -> dict:
    """stdout is exactly one JSON document with the shape every exit has."""
    document = json.loads(run.stdout)  # raises on a second document or on text around it
    assert REPORT_KEYS <= set(document), sorted(document)
    assert document["exit_code"] == run.exit_code
    assert document["passed"] is (run.exit_code == EXIT_OK)
    return document


# --------------------------------------------------------------------------
# One shape for every exit under --format json


@pytest.mark.parametrize(
    "args, error_type",
    [
        pytest.param(["check", "{draft}", "--bogus"], "NoSuchOption", id="unknown-flag"),
        pytest.param(["check"], "MissingParameter", id="missing-argument"),
        pytest.param(["check", "no/such/draft"], "UsageError", id="missing-path"),
        pytest.param(["convert", "{draft}", "out", "--dtype", "int8"], "BadParameter", id="bad-choice"),
        pytest.param(["frobnicate"], "UsageError", id="unknown-command"),
    ],
)
def test_a_usage_error_is_one_json_document(dspark, tiny_draft, args, error_type):
    draft = tiny_draft()
    run = dspark(*[a.format(draft=draft) for a in args], "--format", "json")
    assert run.exit_code == EXIT_USAGE
    document = assert_one_document(run)
    assert document["error"]["type"] == error_type and document["findings"] == []
    assert document["error"]["message"]
    # the person reading the CI log is told too
    assert run.stderr.startswith("error: ")


def test_format_given_as_one_word_counts_for_usage_errors(dspark):
    run = dspark("check", "--format=json", "--bogus")
    assert run.exit_code == EXIT_USAGE
    assert assert_one_document(run)["error"]["message"] == "No such option: --bogus"


def test_a_usage_error_in_human_format_keeps_the_usage_line(dspark):
    run = dspark("check", "--bogus")
    assert run.exit_code == EXIT_USAGE and run.stdout == ""
    assert run.stderr.splitlines()[0].startswith("Usage: dspark check")
    assert "No such option: --bogus" in run.stderr


@pytest.mark.parametrize(
    "command, defect, exit_code",
    [
        pytest.param("check", None, EXIT_OK, id="check-passes"),
        pytest.param("check", "fc-norm-declared-not-shipped", EXIT_CHECK_FAILED, id="check-fails"),
        pytest.param("inspect", None, EXIT_OK, id="inspect-passes"),
        pytest.param("inspect", "fc-norm-declared-not-shipped", EXIT_CHECK_FAILED, id="inspect-fails"),
    ],
)
def test_reports_have_the_same_keys_and_their_exit_code(dspark, tiny_draft, command, defect, exit_code):
    draft = tiny_draft(defect=defect)
    run = dspark(command, draft, "--format", "json")
    assert run.exit_code == exit_code
    document = assert_one_document(run)
    assert "error" not in document


def test_convert_and_its_plan_have_the_same_keys(dspark, tiny_draft, tmp_path):
    draft = tiny_draft()
    plan = dspark("convert", draft, tmp_path / "out", "--plan", "--format", "json")
    assert plan.exit_code == EXIT_OK
    assert_one_document(plan)
    done = dspark("convert", draft, tmp_path / "out", "--format", "json")
    assert done.exit_code == EXIT_OK
    document = assert_one_document(done)
    assert [f["code"] for f in document["findings"]] == [f["code"] for f in document["verification"]["findings"]]


def test_a_failing_checkpoint_error_is_a_document_with_its_finding(dspark, tiny_draft, tmp_path):
    draft = tiny_draft(defect="fc-norm-declared-not-shipped")
    run = dspark("convert", draft, tmp_path / "out", "--format", "json")
    assert run.exit_code == EXIT_CHECK_FAILED
    document = assert_one_document(run)
    assert document["error"]["code"] == "FCN001"
    assert [f["code"] for f in document["findings"]] == ["FCN001"]
    assert document["findings"][0]["severity"] == "error"


# --------------------------------------------------------------------------
# Ctrl-C


def _default_sigint() -> None:
    # A child inherits an ignored SIGINT (pytest started as a background job,
    # `nohup`, some CI runners), and Python then leaves it ignored: the test
    # would wait for an interrupt that never comes. Ctrl-C reaches a
    # foreground process with the default disposition; restore it.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "dspark.cli.main", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_default_sigint,
    )


def bytes_read(pid: int) -> int:
    with open(f"/proc/{pid}/io") as handle:
        return int(next(line for line in handle if line.startswith("rchar:")).split()[1])


def interrupt(process: subprocess.Popen) -> tuple[int, str, str]:
    os.kill(process.pid, signal.SIGINT)
    os.kill(process.pid, signal.SIGCONT)
    out, err = process.communicate(timeout=60)
    return process.returncode, out, err


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="needs /proc/PID/io to see the scan under way")
@pytest.mark.parametrize("output", ["human", "json"])
def test_ctrl_c_during_check_deep_says_interrupted(tmp_path, output):
    # a full-size K3 header over a payload hole: gigabytes to scan, nothing on disk
    draft = write_sparse_draft(tmp_path / "k3")
    total = (draft / "model.safetensors").stat().st_size
    process = start("check", str(draft), "--deep", "--format", output)
    deadline = time.monotonic() + 60
    while bytes_read(process.pid) < 256 * 2**20:
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the scan never started"
        time.sleep(0.001)
    os.kill(process.pid, signal.SIGSTOP)
    assert bytes_read(process.pid) < total, "the scan finished before it could be interrupted"
    code, out, err = interrupt(process)
    assert code == EXIT_INTERRUPTED
    assert err == "error: interrupted\n"
    if output == "json":
        document = json.loads(out)
        assert document.pop("dspark_version") and document.pop("report_format") == 2
        assert document == {
            "command": "check", "passed": False, "exit_code": EXIT_INTERRUPTED, "findings": [],
            "error": {"type": "Interrupted", "message": "interrupted", "hint": None, "file": None, "tensor": None, "code": None},
        }
    else:
        assert out == ""


@pytest.mark.skipif(not hasattr(signal, "SIGSTOP"), reason="needs POSIX signals")
def test_ctrl_c_during_convert_in_json_is_a_document(tmp_path):
    torch = pytest.importorskip("torch")
    from dspark.examples.fabricate import make_tensors, tensor_shapes, write_safetensors

    source = tmp_path / "src"
    source.mkdir()
    spec = SCALES["tiny"]
    (source / "config.json").write_text(json.dumps(draft_config(spec)))
    tensors = make_tensors(tensor_shapes(spec))
    # a large tensor the loader skips (kept with --keep-skipped), so that the
    # write can be caught under way: 160 MB of fp32, cast as it is written
    tensors["embed_tokens.weight"] = torch.zeros(40 * 2**20)
    write_safetensors(source, {"model." + name: tensor for name, tensor in tensors.items()})
    destination = tmp_path / "out"
    process = start("convert", str(source), str(destination), "--dtype", "bfloat16", "--keep-skipped", "--format", "json")
    temporary = tmp_path / f".out.dspark-tmp-{process.pid}"
    deadline = time.monotonic() + 60
    while not (temporary / "model.safetensors").exists():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "convert never started writing"
        time.sleep(0.0005)
    os.kill(process.pid, signal.SIGSTOP)
    assert not destination.exists()
    code, out, err = interrupt(process)
    assert code == EXIT_INTERRUPTED, err
    assert err == "error: interrupted\n"
    assert json.loads(out)["error"]["type"] == "Interrupted"
    assert not destination.exists()


# --------------------------------------------------------------------------
# A closed pipe


def run_into_closed_pipe(*args: str) -> tuple[int, str]:
    """Run with stdout on a pipe nobody reads any more (`| head -1` after its line)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "dspark.cli.main", *args],
            stdout=write_end, stderr=subprocess.PIPE, timeout=120,
        )
    finally:
        os.close(write_end)
    return done.returncode, done.stderr.decode()


@pytest.mark.parametrize("command", ["check", "inspect"])
@pytest.mark.parametrize("output", ["human", "json"])
@pytest.mark.parametrize(
    "defect, verdict", [(None, EXIT_OK), ("fc-norm-declared-not-shipped", EXIT_CHECK_FAILED)], ids=["good", "bad"]
)
def test_a_closed_pipe_exits_with_the_verdict_and_says_nothing(tiny_draft, command, output, defect, verdict):
    draft = tiny_draft(defect=defect)
    code, err = run_into_closed_pipe(command, str(draft), "--format", output)
    assert (code, err) == (verdict, "")


def test_a_closed_pipe_on_help_is_not_an_error():
    assert run_into_closed_pipe("--help") == (EXIT_OK, "")


# --------------------------------------------------------------------------
# inspect, --version, the fabricator


def test_inspect_exits_with_checks_verdict_and_says_so_in_json(dspark, tiny_draft):
    good, bad = tiny_draft("good"), tiny_draft("bad", defect="fc-norm-shipped-declared-false")
    assert dspark("inspect", good).exit_code == EXIT_OK
    page = dspark("inspect", bad)
    assert page.exit_code == EXIT_CHECK_FAILED
    assert "1 error(s)" in page.stdout
    data = dspark("inspect", bad, "--format", "json")
    assert (data.exit_code, data.json()["passed"], data.json()["exit_code"]) == (EXIT_CHECK_FAILED, False, EXIT_CHECK_FAILED)


def test_version_is_a_top_level_option_and_a_command(dspark):
    from importlib.metadata import version

    option, command = dspark("--version"), dspark("version")
    assert option.exit_code == command.exit_code == EXIT_OK
    assert option.stdout == command.stdout == version("dspark") + "\n"


_HIDE_TORCH = "import sys; sys.modules['torch'] = None  # as on the core install"


def fabricate_without_torch(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", f"{_HIDE_TORCH}\nfrom dspark.examples.fabricate import main; main()", *args],
        capture_output=True, text=True, timeout=120,
    )


def test_the_fabricator_without_torch_names_the_extra(tmp_path):
    done = fabricate_without_torch(str(tmp_path / "draft"))
    assert done.returncode == EXIT_USAGE
    assert "Traceback" not in done.stderr
    assert "pip install 'dspark[torch]'" in done.stderr and "--sparse" in done.stderr
    assert not (tmp_path / "draft").exists()


def test_the_fabricator_without_torch_writes_a_sparse_draft(tmp_path, dspark):
    done = fabricate_without_torch(str(tmp_path / "draft"), "--sparse", "--scale", "tiny")
    assert done.returncode == EXIT_OK, done.stderr
    header_length = struct.unpack("<Q", (tmp_path / "draft" / "model.safetensors").read_bytes()[:8])[0]
    assert header_length > 0
    assert dspark("check", tmp_path / "draft").exit_code == EXIT_OK


@pytest.mark.parametrize("family", ["dflash_gqa", "eagle3_llama", "eagle3_mla"])
def test_the_fabricator_without_torch_writes_every_family_sparse_at_full_size(tmp_path, dspark, family):
    done = fabricate_without_torch(str(tmp_path / "draft"), "--family", family, "--scale", "full", "--sparse")
    assert done.returncode == EXIT_OK, done.stderr
    assert dspark("check", tmp_path / "draft").exit_code == EXIT_OK
    # A defect is applied to torch tensors, even on a sparse draft.
    broken = fabricate_without_torch(str(tmp_path / "broken"), "--family", family, "--sparse", "--defect", "fc-width")
    assert broken.returncode == EXIT_USAGE and "pip install 'dspark[torch]'" in broken.stderr
    assert not (tmp_path / "broken").exists()


# --------------------------------------------------------------------------
# A report of bounded size


def test_thousands_of_unexpected_tensors_print_a_short_report(dspark, tmp_path):
    """The CLI side of tests/converters/test_budgets.py (100,000 there): the
    page and the JSON stay short, the counts stay exact."""
    draft = tmp_path / "draft"
    draft.mkdir()
    (draft / "config.json").write_text(json.dumps(draft_config(SCALES["tiny"])))
    count = 10_000
    header = {f"stray.{n}.weight": {"dtype": "BF16", "shape": [1], "data_offsets": [2 * n, 2 * n + 2]} for n in range(count)}
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    (draft / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(2 * count))
    human = dspark("check", draft)
    data = dspark("check", draft, "--format", "json")
    assert human.exit_code == data.exit_code == EXIT_CHECK_FAILED
    assert len(human.stdout.splitlines()) < 40
    assert len(data.stdout) < 64 * 1024
    # the count is still exact: 10,000 strays, 29 missing tensors, FCN001
    assert human.stdout.rstrip().endswith("FAIL  10030 error(s), 0 warning(s), 2 note(s)")


def test_a_path_the_system_refuses_is_a_usage_error_naming_it(dspark, tiny_draft, tmp_path):
    too_long = tmp_path / ("x" * 300)  # one name past NAME_MAX: the system refuses it
    for args in (("check", too_long), ("inspect", too_long), ("convert", tiny_draft(), too_long / "out")):
        run = dspark(*args)
        assert run.exit_code == EXIT_USAGE, (args, run.stderr)
        assert "xxxx" in run.stderr and "internal error" not in run.stderr


def test_a_destination_name_as_long_as_the_filesystem_allows_converts(dspark, tiny_draft, tmp_path):
    # its temporary sibling's name would be longer: it is shortened, not refused
    destination = tmp_path / ("d" * 250)
    run = dspark("convert", tiny_draft(), destination, "--quiet")
    assert run.exit_code == EXIT_OK, run.stderr
    assert (destination / "config.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["draft", destination.name])


@pytest.mark.parametrize(("args", "says"), [
    pytest.param(("check", "{draft}", "--config", "{tmp}"), "a folder, not a file", id="config-a-folder"),
    pytest.param(("check", "{draft}", "--config", os.devnull), "not a regular file", id="config-a-device"),
    pytest.param(("gate", "{draft}", "--policy", "{tmp}"), "a folder, not a file", id="policy-a-folder"),
])
def test_an_option_naming_something_that_is_not_a_file_says_what_it_is(dspark, tiny_draft, tmp_path, args, says):
    draft = tiny_draft()
    run = dspark(*(a.format(draft=draft, tmp=tmp_path) for a in args))
    assert run.exit_code == EXIT_USAGE and says in run.stderr and "no such file" not in run.stderr


def test_a_null_config_is_named_in_json_terms(dspark, tiny_draft):
    draft = tiny_draft()
    (draft / "config.json").write_text("null")
    run = dspark("check", draft)
    assert "top level is null, not an object" in run.stdout + run.stderr
