"""Write a K3-sized projection checkpoint for `dspark smoke` timing runs.

Only what the smoke reads: config.json of the Kimi-K3 reference draft (fc_norm
on) and, bf16 with seeded values, `model.context_proj.weight` [7168, 35840],
`model.context_norm.weight` [7168] and five `model.fc_norm.{i}.weight` [7168]
(0.5 GB, not the whole multi-GB draft). Then, for instance:

    python tests/benchmarks/k3_projection_draft.py /tmp/k3-projection
    /usr/bin/time -v dspark smoke /tmp/k3-projection --device cuda     # T = 8192

`--smoke` (before OUT) writes the same tensors at the fabricator's tiny size:
tests/benchmarks/test_benchmarks_run.py runs it so, to show the script works.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from dspark.examples.fabricate import SCALES, draft_config, make_tensors, tensor_shapes, write_safetensors

PROJECTION = ("context_proj.weight", "context_norm.weight")


def main(argv: list[str]) -> int:
    smoke = argv[:1] == ["--smoke"]
    argv = argv[1:] if smoke else argv
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    spec = SCALES["tiny" if smoke else "k3"]
    shapes = {name: shape for name, shape in tensor_shapes(spec, fc_norm=True).items()
              if name in PROJECTION or name.startswith("fc_norm.")}
    (out / "config.json").write_text(json.dumps(draft_config(spec, fc_norm=True), indent=1))
    write_safetensors(out, {"model." + name: tensor for name, tensor in make_tensors(shapes, seed=0).items()})
    print(f"wrote {out}: {', '.join(sorted(shapes))}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
