"""Bytes and requests `dspark check` spends on a remote full-size K3 draft.

    python tests/benchmarks/bench_remote.py [--workdir DIR]

Fabricates the full-size K3 fc_norm draft (~6.6 GiB, sparse: a real header
over a hole), serves it from a local range server on 127.0.0.1
(tests/range_server.py) as an HTTP folder and as a Hub repository
(`HF_ENDPOINT` pointed at the server), runs `dspark check` on each in a
fresh process and prints what the server sent, per file.

Goals (docs/check.md records the figures): headers only, under 1 MiB in
all, and at most 2 requests per file (plus the Hub's one listing).
Not collected by pytest. Exit status: 0 when every goal passes, 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from range_server import RangeServer  # noqa: E402

from dspark.examples.fabricate import write_sparse_draft  # noqa: E402

GOAL_BYTES = 2**20
GOAL_REQUESTS_PER_FILE = 2
CLI = "import sys; from dspark.cli.main import main; sys.argv[0] = 'dspark'; main()"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workdir", type=Path)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(dir=args.workdir))
    draft = write_sparse_draft(work / "k3", scale="k3")
    root = work / "served"
    (root / "hub" / "org").mkdir(parents=True)
    (root / "draft").symlink_to(draft, target_is_directory=True)
    (root / "hub" / "org" / "k3-draft").symlink_to(draft, target_is_directory=True)
    size = sum(p.stat().st_size for p in draft.iterdir())
    print(f"draft: {size / 2**30:.2f} GiB in {len(list(draft.iterdir()))} files\n")

    ok = True
    with RangeServer(root) as server:
        env = {**os.environ, "HF_ENDPOINT": server.url, "HF_HUB_DISABLE_TELEMETRY": "1", "NO_COLOR": "1"}
        env.pop("HF_TOKEN", None)
        for label, url in (("https", f"{server.url}/files/draft/"), ("hf", "hf://org/k3-draft")):
            server.traffic.clear()
            done = subprocess.run([sys.executable, "-c", CLI, "check", url, "-q"], env=env,
                                  capture_output=True, text=True, timeout=300)
            server.wait_idle()
            per_file: dict[str, list[int]] = defaultdict(list)
            for _, path, sent in server.traffic.requests:
                name = "(listing: model_info)" if path.startswith("/api/") else path.split("?")[0].rsplit("/", 1)[-1]
                per_file[name].append(sent)
            total = server.traffic.bytes_sent
            print(f"{label}: dspark check {url}  -> exit {done.returncode}")
            for name, sends in sorted(per_file.items()):
                print(f"    {name:40s} {len(sends):2d} request(s) {sum(sends):>9,} bytes")
            weight_requests = max((len(s) for n, s in per_file.items() if n.endswith(".safetensors")), default=0)
            passed = done.returncode == 0 and total < GOAL_BYTES and weight_requests <= GOAL_REQUESTS_PER_FILE
            ok &= passed
            print(f"    total {len(server.traffic.requests)} requests, {total:,} bytes "
                  f"({total / size * 100:.5f}% of the draft)  {'PASS' if passed else 'FAIL'}\n")
            if done.returncode != 0:
                print(done.stdout, done.stderr)
    for path in sorted(work.rglob("*"), reverse=True):
        path.unlink() if path.is_file() or path.is_symlink() else path.rmdir()
    work.rmdir()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
