"""Run a serving engine's segmented RMSNorm in a process of its own.

    python kernels/engine_child.py REQUEST.json

Started by `dspark.kernels.smoke_engine.ChildKernel` where the engine's
kernel is compiled by a Triton that cannot share a process with PyPI's (see
engine_loading.py). Run as a script, not as `dspark.kernels.engine_child`:
importing the `dspark.kernels` package would import PyPI's triton here too.
It imports the standard library, torch and engine_loading.py beside it.

The request (JSON) names the engine's kernel (module, file, root, function,
how it is called) and one job:

* ``run``: the tensors ``x`` and ``weight`` saved by torch in ``inputs``;
  the output is saved to ``output``; with ``measure_time``, the kernel and a
  copy of the same bytes are timed here, in turns (median of CUDA events).
* ``bench``: for each ``[S, th]`` in ``shapes`` and T in ``tokens``, seeded
  bf16 taps made here, the output compared with fp32, and the kernel and a
  copy timed with the engine's own Triton's ``testing.do_bench``.

It prints one JSON line: ``{"ok": true, ...}`` or ``{"ok": false, "error": ...}``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = str(Path(__file__).resolve().parent)
if sys.path and sys.path[0] in (HERE, ""):
    sys.path.pop(0)  # the kernels folder's modules must not stand in for others' top-level names
sys.path.insert(0, HERE)
import engine_loading  # noqa: E402 - the only module of this folder the child imports

sys.path.remove(HERE)

import torch  # noqa: E402


def main(argv: list[str]) -> int:
    try:
        request = json.loads(Path(argv[1]).read_text(encoding="utf-8"))
        result = serve(request)
    except Exception as error:  # noqa: BLE001 - every failure goes back to the parent as a message
        result = {"ok": False, "error": f"{type(error).__name__}: {engine_loading._first_line(error)}"}
    print(json.dumps(result), flush=True)
    return 0


def serve(request: dict) -> dict:
    function, loaded_alone = engine_loading.load_function(
        request["module"], request.get("file"), request.get("root"), request["function"])
    expected = request.get("expected_parameters") or []
    found = engine_loading.parameters(function)
    if found is not None and expected and tuple(found[:len(expected)]) != tuple(expected):
        return {"ok": False, "error": f"{request['module']}.{request['function']} takes ({', '.join(found)}), "
                                      f"not the ({', '.join(expected)}) dspark read"}
    takes_out = found is None or "out" in found
    run = engine_loading.adapt(function, request["segments_axis"], takes_out)
    answer = {"ok": True, "loaded_alone": loaded_alone, "triton": engine_loading.triton_of(function)}
    if request["job"] == "run":
        answer.update(_run(run, request))
    else:
        answer["rows"] = _bench(run, function, request)
    return answer


def _run(run, request: dict) -> dict:
    device = request["device"]
    tensors = torch.load(request["inputs"], map_location=device, weights_only=True)
    x, weight, eps = tensors["x"], tensors["weight"], float(request["eps"])
    out = run(x, weight, eps)
    if device == "cuda":
        torch.cuda.synchronize()
    torch.save(out.cpu(), request["output"])
    if not request.get("measure_time"):
        return {}
    engine_out, copy_out = torch.empty_like(x), torch.empty_like(x)
    times = engine_loading.time_cuda_ms({"engine": lambda: run(x, weight, eps, out=engine_out),
                                         "copy": lambda: copy_out.copy_(x)})
    return {"engine_ms": times["engine"], "copy_ms": times["copy"]}


def _bench(run, function, request: dict) -> list[dict]:
    do_bench = function.__globals__["triton"].testing.do_bench
    bench = request["bench"]
    eps = float(request["eps"])
    rows = []
    for segments, width in bench["shapes"]:
        for tokens in bench["tokens"]:
            generator = torch.Generator(device="cuda").manual_seed(bench.get("seed", 0))
            x = torch.randn(tokens, segments * width, device="cuda", generator=generator).to(torch.bfloat16)
            w = (torch.rand(segments, width, device="cuda", generator=generator) + 0.5).to(torch.bfloat16)
            x32 = x.float().view(tokens, segments, width)
            expected = (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps) * w.float()).view(tokens, -1)
            out, copy = torch.empty_like(x), torch.empty_like(x)
            row = {"S": segments, "th": width, "T": tokens}
            try:
                got = run(x, w, eps, out=out)
                torch.cuda.synchronize()
                row["engine_rel_rms"] = float((got.float() - expected).norm() / expected.norm())
            except Exception as error:  # noqa: BLE001 - a kernel that fails is reported in the table
                row["engine_error"] = f"{type(error).__name__}: {engine_loading._first_line(error)}"
                rows.append(row)
                continue
            repeats = 2 if tokens <= 64 else 1
            timed = {"engine": lambda: run(x, w, eps, out=out), "copy": lambda: copy.copy_(x)}
            for name, fn in timed.items():
                row[f"{name}_ms"] = min(do_bench(fn, warmup=25, rep=100, return_mode="median")
                                        for _ in range(repeats))
            rows.append(row)
    return rows


if __name__ == "__main__":
    sys.exit(main(sys.argv))
