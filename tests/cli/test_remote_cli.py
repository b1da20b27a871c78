"""Remote checkpoints: `dspark check` over HTTP, the Hub (HF_ENDPOINT at a
local server) and fsspec, read by range, judged as the local copy is.

Every server here is `tests/range_server.py` on 127.0.0.1, started and
stopped by the test; nothing else is reached. fsspec's s3 backend cannot be
tested offline: object stores are tested through fsspec's `memory://` and
`file://` filesystems, which take the same code path (`FsspecSource`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dspark.cli.errors import EXIT_CHECK_FAILED, EXIT_OK, EXIT_USAGE
from dspark.converters.check import check_checkpoint
from dspark.examples.fabricate import write_sparse_draft
from range_server import HUB_COMMIT, RangeServer


def codes(report) -> list[str]:
    return sorted(f.code for f in report.findings)


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """`served(draft, repo="org/draft", honour_range=True)` -> a started
    server holding `draft` under /files/draft/ and as Hub repo `repo`,
    with HF_ENDPOINT pointed at it; stopped when the test ends."""
    started: list[RangeServer] = []

    def serve(draft: Path, *, repo: str = "org/draft", honour_range: bool = True) -> RangeServer:
        root = tmp_path / "served"
        (root / "hub" / repo).parent.mkdir(parents=True)
        # links, not copies: a copy of a sparse 6.6 GiB draft is 6.6 GiB on disk
        (root / "draft").symlink_to(draft.resolve(), target_is_directory=True)
        (root / "hub" / repo).symlink_to(draft.resolve(), target_is_directory=True)
        server = RangeServer(root, honour_range=honour_range).__enter__()
        started.append(server)
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
        monkeypatch.delenv("HF_TOKEN", raising=False)
        return server

    yield serve
    for server in started:
        server.__exit__(None, None, None)


# --------------------------------------------------------------------------
# The same verdict as the local copy


@pytest.mark.parametrize("options", [{}, {"shards": 2}, {"defect": "missing-layer"}, {"defect": "no-config"}],
                         ids=["single", "sharded", "missing-layer", "no-config"])
def test_http_folder_is_judged_as_the_local_copy(tiny_draft, served, options):
    draft = tiny_draft(**options)
    server = served(draft)
    local = check_checkpoint(draft)
    remote = check_checkpoint(f"{server.url}/files/draft/")
    assert codes(remote) == codes(local)
    assert (remote.format, remote.family, remote.tensor_count, remote.total_bytes) == (
        local.format, local.family, local.tensor_count, local.total_bytes)
    assert remote.checkpoint == f"{server.url}/files/draft/"


@pytest.mark.parametrize("scale, severity", [(1, "warning"), (3, "error")], ids=["identical", "different"])
def test_a_tensor_stored_twice_is_compared_by_range(tiny_draft, served, scale, severity):
    """As for a local folder: the two copies' bytes decide the verdict."""
    from safetensors.torch import load_file, save_file

    draft = tiny_draft(shards=2)
    first = load_file(draft / "model-00001-of-00002.safetensors")
    name, tensor = next(iter(first.items()))
    second = load_file(draft / "model-00002-of-00002.safetensors")
    second[name] = tensor * scale
    save_file(second, str(draft / "model-00002-of-00002.safetensors"), metadata={"format": "pt"})
    server = served(draft)
    local = check_checkpoint(draft)
    remote = check_checkpoint(f"{server.url}/files/draft/")
    assert [(f.code, f.severity.value) for f in remote.findings if f.code == "IDX005"] == [("IDX005", severity)]
    assert codes(remote) == codes(local)
    assert [f.severity for f in remote.findings] == [f.severity for f in local.findings]


def test_deep_reads_payloads_by_range(tiny_draft, served, dspark):
    draft = tiny_draft(defect="nan")
    server = served(draft)
    local = check_checkpoint(draft, deep=True)
    remote = check_checkpoint(f"{server.url}/files/draft", deep=True)
    assert "PAY001" in codes(remote) and codes(remote) == codes(local)
    assert remote.payloads_read and remote.scanned_bytes == local.scanned_bytes
    run = dspark("check", f"{server.url}/files/draft", "--deep")
    assert run.exit_code == EXIT_CHECK_FAILED and "PAY001" in run.stdout


def test_deep_streams_in_bounded_ranges(served):
    """A payload is asked for in ranges of at most the scan's chunk size,
    never whole: memory stays bounded however large the file."""
    from dspark.converters.payload_scan import scan_payloads
    from dspark.converters.readers import open_checkpoint

    draft = write_sparse_draft(Path("k3"), scale="k3")
    server = served(draft)
    checkpoint = open_checkpoint(f"{server.url}/files/draft/")
    server.wait_idle()
    # two tensors past the header's first read, a few MiB each
    entries = [e for e in checkpoint.entries if e.byte_range[0] > 2**20 and e.nbytes <= 8 * 2**20][:2]
    assert entries
    server.traffic.clear()
    chunk = 256 * 1024
    scans = scan_payloads(checkpoint.reader, entries, chunk_bytes=chunk)
    server.wait_idle()
    assert all(scan.error is None for scan in scans)
    assert max(sent for _, _, sent in server.traffic.requests) <= chunk
    assert server.traffic.bytes_sent == sum(e.nbytes for e in entries)


def test_full_size_draft_is_judged_from_its_headers(served):
    """A 6.6 GiB K3 draft over HTTP: under 1 MiB and a few requests per file."""
    draft = write_sparse_draft(Path("k3"), scale="k3")
    server = served(draft)
    report = check_checkpoint(f"{server.url}/files/draft/")
    server.wait_idle()
    assert report.passed() and report.total_bytes > 6 * 2**30
    assert server.traffic.bytes_sent < 2**20
    assert len(server.traffic.requests) <= 3 * 4  # the probed names, one request each for these sizes


def test_server_that_ignores_range_is_refused_not_downloaded(served, dspark):
    draft = write_sparse_draft(Path("k3"), scale="k3")
    server = served(draft, honour_range=False)
    run = dspark("check", f"{server.url}/files/draft/")
    server.wait_idle()
    assert run.exit_code == EXIT_USAGE
    assert "ignores Range requests" in run.stderr
    assert server.traffic.bytes_sent < 64 * 2**20  # the client hung up; never the 6.6 GiB


def test_missing_http_folder_is_a_usage_error(served, tiny_draft, dspark):
    server = served(tiny_draft())
    run = dspark("check", f"{server.url}/files/nothing-here/")
    assert run.exit_code == EXIT_USAGE
    # every name asked for was 404: the address was not found, no claim about a folder
    assert "not found" in run.stderr and "404" in run.stderr and "not a checkpoint folder" not in run.stderr


def test_unreachable_server_is_a_usage_error(dspark):
    run = dspark("check", "http://127.0.0.1:9/draft/")
    assert run.exit_code == EXIT_USAGE and "127.0.0.1:9" in run.stderr and "Traceback" not in run.stderr


@pytest.mark.parametrize("argv", [["check", "ftp://127.0.0.1:9/draft/"],
                                  ["check", "DRAFT", "--target", "ftp://127.0.0.1:9/target/"]],
                         ids=["draft", "target"])
def test_a_backend_that_connects_when_opened_is_a_usage_error(dspark, tiny_draft, argv):
    """fsspec's ftp filesystem connects as the address is opened, before any read."""
    pytest.importorskip("fsspec")
    run = dspark(*[str(tiny_draft()) if a == "DRAFT" else a for a in argv])
    assert run.exit_code == EXIT_USAGE, run.stderr
    assert "127.0.0.1:9" in run.stderr and "cannot connect" in run.stderr and "Traceback" not in run.stderr


# --------------------------------------------------------------------------
# The Hub, through huggingface_hub and HF_ENDPOINT


def test_hub_repo_is_judged_as_the_downloaded_folder(tiny_draft, served, dspark):
    pytest.importorskip("huggingface_hub")
    draft = tiny_draft(shards=2)
    served(draft)
    local = check_checkpoint(draft)
    for url in ("hf://org/draft", "hf://org/draft@main", f"hf://org/draft@{HUB_COMMIT}"):
        remote = check_checkpoint(url)
        assert codes(remote) == codes(local), url
        assert "SRV001" not in codes(remote)  # a repository is servable as a folder
    run = dspark("check", "hf://org/draft", "--format", "json")
    assert run.exit_code == EXIT_OK and run.json()["checkpoint"] == "hf://org/draft"


def test_hub_reads_headers_only(served):
    pytest.importorskip("huggingface_hub")
    draft = write_sparse_draft(Path("k3"), scale="k3")
    server = served(draft)
    report = check_checkpoint("hf://org/draft")
    server.wait_idle()
    assert report.passed()
    assert server.traffic.bytes_sent < 2**20
    # model_info once, then config.json and each weight file's header once
    assert len(server.traffic.requests) <= 1 + 2 * len(report.files) + 2
    assert any(path.startswith("/api/models/org/draft") for _, path, _ in server.traffic.requests)


@pytest.mark.parametrize("url, words", [
    ("hf://org/nothing", "no repository org/nothing"),
    ("hf://org/draft@v9", "no revision 'v9'"),
    ("hf://just-a-name", "not a model repository address"),
], ids=["no-repo", "no-revision", "bad-address"])
def test_hub_errors_are_usage_errors(tiny_draft, served, dspark, url, words):
    pytest.importorskip("huggingface_hub")
    served(tiny_draft())
    run = dspark("check", url)
    assert run.exit_code == EXIT_USAGE and words in run.stderr and "Traceback" not in run.stderr


def test_a_hub_that_cannot_be_reached_is_a_usage_error(tiny_draft, dspark, monkeypatch):
    pytest.importorskip("huggingface_hub")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens on the discard port
    run = dspark("check", "hf://org/draft")
    assert run.exit_code == EXIT_USAGE, run.stderr
    assert "cannot reach the Hub at http://127.0.0.1:9" in run.stderr and "internal error" not in run.stderr
    run = dspark("check", tiny_draft(), "--target", "hf://org/target")
    assert run.exit_code == EXIT_USAGE and "--target hf://org/target" in run.stderr


# --------------------------------------------------------------------------
# Object stores through fsspec (memory:// and file:// stand in for s3://)


def test_fsspec_memory_and_file_urls(tiny_draft):
    fsspec = pytest.importorskip("fsspec")
    draft = tiny_draft(shards=2)
    memory = fsspec.filesystem("memory")
    for file in draft.iterdir():
        memory.pipe_file(f"/bucket/draft/{file.name}", file.read_bytes())
    local = check_checkpoint(draft, deep=True)
    for url in ("memory://bucket/draft", f"file://{draft}"):
        remote = check_checkpoint(url, deep=True)
        assert codes(remote) == codes(local), url
        assert remote.scanned_bytes == local.scanned_bytes


def test_s3_url_keeps_its_slashes(dspark):
    """Not "no such file s3:/bucket/draft": the URL reaches fsspec whole."""
    pytest.importorskip("fsspec")
    run = dspark("check", "s3://bucket/draft")
    assert run.exit_code == EXIT_USAGE
    assert "s3://bucket/draft" in run.stderr and "s3:/bucket" not in run.stderr.replace("s3://", "")
    assert "Traceback" not in run.stderr


# --------------------------------------------------------------------------
# A remote --target: the target's config.json read by range


def _target_config(draft: Path, **fields) -> dict:
    config = json.loads((draft / "config.json").read_text())
    return {"model_type": "kimi_k3", "hidden_size": config["target_hidden_size"],
            "num_hidden_layers": config["target_num_hidden_layers"], "vocab_size": config["vocab_size"], **fields}


def test_a_remote_target_is_judged_as_the_local_one(tiny_draft, served, tmp_path, dspark):
    draft = tiny_draft()
    short = _target_config(draft, num_hidden_layers=10)  # the draft's last tap, 11, is past it
    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_text(json.dumps(short))
    (draft / "target.json").write_text(json.dumps(short))  # served beside the draft, under its own name
    server = served(draft)
    local = check_checkpoint(draft, target=target)
    assert "TGT005" in codes(local)
    url = f"{server.url}/files/draft/target.json"
    remote = check_checkpoint(draft, target=url)
    assert codes(remote) == codes(local)
    assert remote.target == url
    run = dspark("check", draft, "--target", f"{server.url}/files/draft/target.json", "--format", "json")
    assert run.exit_code == EXIT_CHECK_FAILED and "TGT005" in {f["code"] for f in run.json()["findings"]}


def test_a_target_on_the_hub_or_an_object_store(tiny_draft, served, tmp_path):
    fsspec = pytest.importorskip("fsspec")
    draft = tiny_draft()
    good = _target_config(draft)
    short = _target_config(draft, num_hidden_layers=10)
    memory = fsspec.filesystem("memory")
    memory.pipe_file("/models/short/config.json", json.dumps(short).encode())
    assert check_checkpoint(draft, target="memory://models/short").passed() is False
    assert "TGT005" in codes(check_checkpoint(draft, target="memory://models/short/config.json"))

    pytest.importorskip("huggingface_hub")
    target = tmp_path / "hub-target"
    target.mkdir()
    (target / "config.json").write_text(json.dumps(good))
    served(target, repo="org/target")
    report = check_checkpoint(draft, target="hf://org/target")
    assert report.passed(strict=True), codes(report)
    assert report.target == "hf://org/target/config.json"


@pytest.mark.parametrize("where, words", [
    ("memory://models/none", "no config.json there"),
    ("memory://models/bad/config.json", "Pass a valid target config.json"),
], ids=["no-config", "not-json"])
def test_a_remote_target_that_cannot_be_read_is_a_usage_error(tiny_draft, dspark, where, words):
    fsspec = pytest.importorskip("fsspec")
    memory = fsspec.filesystem("memory")
    memory.pipe_file("/models/none/README.md", b"no config")
    memory.pipe_file("/models/bad/config.json", b"{not json")
    run = dspark("check", tiny_draft(), "--target", where)
    assert run.exit_code == EXIT_USAGE and words in run.stderr + run.stdout and "Traceback" not in run.stderr


# --------------------------------------------------------------------------
# What is refused


def test_remote_dcp_or_pt_is_refused(tmp_path, dspark):
    fsspec = pytest.importorskip("fsspec")
    memory = fsspec.filesystem("memory")
    memory.pipe_file("/runs/pt/model.pt", b"not read")
    memory.pipe_file("/runs/dcp/.metadata", b"not read")
    for url in ("memory://runs/pt", "memory://runs/dcp"):
        run = dspark("check", url)
        assert run.exit_code == EXIT_USAGE and "read only as safetensors" in run.stderr, url


@pytest.mark.parametrize("argv", [
    ["check", "s3://bucket/draft", "--verify"],
    ["convert", "s3://bucket/draft", "out"],
    ["gate", "hf://org/draft"],
    ["smoke", "https://example.invalid/draft/"],
], ids=["verify", "convert", "gate", "smoke"])
def test_local_only_commands_refuse_urls(dspark, argv):
    run = dspark(*argv)
    assert run.exit_code == EXIT_USAGE
    assert argv[1] in run.stderr  # named whole, never as a mangled path


# --------------------------------------------------------------------------
# A local check never loads a network client


CLIENT_PROBE = textwrap.dedent(
    """
    import json, sys
    from dspark.cli.main import main
    sys.argv = ["dspark", *sys.argv[1:]]
    try:
        main()
    except SystemExit as exit:
        code = exit.code
    clients = sorted(m for m in ("huggingface_hub", "fsspec", "requests", "urllib3", "httpx", "httpx2",
                                 "urllib.request", "http.client") if m in sys.modules)
    sys.stderr.write(json.dumps({"exit": code, "clients": clients}) + "\\n")
    """
)


def _probe(*args: str) -> dict:
    done = subprocess.run([sys.executable, "-c", CLIENT_PROBE, *args], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "NO_COLOR": "1"})
    return json.loads(done.stderr.strip().splitlines()[-1])


def test_local_check_imports_no_network_client(tiny_draft):
    assert _probe("check", str(tiny_draft()), "--deep") == {"exit": 0, "clients": []}


def test_http_check_imports_no_hub_client(tiny_draft, served):
    server = served(tiny_draft())
    result = _probe("check", f"{server.url}/files/draft/")
    assert result["exit"] == 0
    assert not {"huggingface_hub", "fsspec", "requests", "httpx2"} & set(result["clients"])
