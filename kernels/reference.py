"""Torch reference for the segmented RMSNorm.

It lives in the library, not only in the tests, so that ``dspark smoke`` and the
kernel tests compare against the same definition.

Notation used in every docstring of this package: ``T`` token rows, ``S``
segments (target taps), ``H`` hidden size of one segment (``target_hidden_size``).
"""

from __future__ import annotations

import torch

__all__ = ["CAST_ORDERS", "inverse_rms", "segmented_rmsnorm_reference", "split_segments"]

#: ``"fp32"``: normalise and weight in fp32, round once to the input dtype (the
#: serving kernel's order). ``"hf"``: round the normalised value to the input
#: dtype, then multiply by the weight and round again (Hugging Face
#: ``LlamaRMSNorm``, the order the draft was trained with).
CAST_ORDERS = ("fp32", "hf")

SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def split_segments(x: torch.Tensor, num_segments: int, hidden: int) -> torch.Tensor:
    """View ``x`` as ``[..., S, H]``.

    Args:
        x: ``[..., S*H]`` (the concatenated taps) or ``[..., S, H]``.
        num_segments: ``S``.
        hidden: ``H``.

    Returns:
        ``[..., S, H]``; a view where torch can make one, else a copy.

    Raises:
        ValueError: the trailing dimensions are neither ``(S, H)`` nor ``(S*H,)``.
    """
    if x.dim() >= 2 and tuple(x.shape[-2:]) == (num_segments, hidden):
        return x
    if x.dim() >= 1 and x.shape[-1] == num_segments * hidden:
        return x.reshape(*x.shape[:-1], num_segments, hidden)
    raise ValueError(
        f"x has shape {tuple(x.shape)}; expected [..., {num_segments * hidden}] "
        f"(S*H) or [..., {num_segments}, {hidden}] (S, H) for a weight of shape "
        f"[{num_segments}, {hidden}]"
    )


def inverse_rms(x: torch.Tensor, eps: float) -> torch.Tensor:
    """``1 / sqrt(mean(x**2, -1) + eps)`` for each row of ``x``, in fp32.

    Args:
        x: ``[..., H]``, any float dtype.
        eps: rounded to fp32 first, as an fp32 ``variance + eps`` would.

    Returns:
        ``[..., 1]`` fp32.

    The sum of squares is taken in fp64 and rounded to fp32 once, so it is the
    exact sum correctly rounded; the rest (``/ H``, ``+ eps``, ``sqrt``,
    ``1 / .``) are single correctly rounded fp32 operations. A plain fp32 sum's
    last bit depends on the order of the additions, which differs between a
    GPU tree reduction and a CPU loop, and in the ``"hf"`` order a one-ulp
    difference in the normalised intermediate can become two ulps of the
    output. With these steps every implementation that also sums in fp64 gets
    the same factor, bit for bit, up to a sum within 1e-13 of a rounding tie
    (the kernel sums in fp64 in the ``"hf"`` order for fp16/bf16 inputs, and
    in fp32 otherwise, where a last-bit difference moves an output by one ulp
    at most).
    """
    eps32 = torch.tensor(eps, dtype=torch.float32).item()
    hidden = x.shape[-1]

    def fp32(value: torch.Tensor) -> torch.Tensor:
        # One fp32 operation, correctly rounded: done in fp64 and rounded once,
        # which for + - * / sqrt gives the fp32 result exactly (53 >= 2*24 + 2).
        # torch's own fp32 sqrt on the CPU is not correctly rounded.
        return value.float().double()

    sum_squares = fp32(x.double().pow(2).sum(dim=-1, keepdim=True))
    mean_square = fp32(sum_squares / hidden)
    root = fp32(torch.sqrt(fp32(mean_square + eps32)))
    return (1.0 / root).float()


def segmented_rmsnorm_reference(
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    *,
    cast_order: str = "fp32",
) -> torch.Tensor:
    """RMS-normalise each segment of each row with its own weight, in torch.

    For row ``t`` and segment ``s`` (``x_s = x[t, s*H:(s+1)*H]``)::

        y_s = x_s / sqrt(mean(x_s**2) + eps) * w_s

    The per-row factor ``1 / sqrt(mean(x_s**2) + eps)`` is formed in fp32 from
    the correctly rounded sum of squares (see :func:`inverse_rms`); ``x_s``
    times that factor times ``w_s`` is computed in fp32.

    Args:
        x: ``[T, S*H]`` (the concatenated taps) or ``[..., S, H]``; fp32, fp16
            or bf16; any strides.
        weight: ``[S, H]``, one RMSNorm weight per segment; fp32 or any of the
            three float dtypes.
        eps: added to the mean of squares.
        cast_order: ``"fp32"`` (normalise and weight in fp32, round once to
            ``x.dtype``) or ``"hf"`` (round the normalised value to
            ``x.dtype``, multiply by the weight in fp32, round again). For fp32
            inputs the two are the same.

    Returns:
        A new tensor of ``x``'s shape and dtype.
    """
    if cast_order not in CAST_ORDERS:
        raise ValueError(f"cast_order must be one of {CAST_ORDERS}, got {cast_order!r}")
    if weight.dim() != 2:
        raise ValueError(f"weight must be [S, H], got shape {tuple(weight.shape)}")
    num_segments, hidden = weight.shape
    segments = split_segments(x, num_segments, hidden).float()
    inv_rms = inverse_rms(segments, eps)
    normed = segments * inv_rms
    if cast_order == "hf":
        normed = normed.to(x.dtype).float()
    y = (normed * weight.float()).to(x.dtype)
    return y.reshape(x.shape)
