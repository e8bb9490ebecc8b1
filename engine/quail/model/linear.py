"""A linear layer's weight, prepared once for the device and dtype it runs in.

On a CPU in bf16, oneDNN repacks a plain weight into its blocked layout at every call. Packed once
at load, the same kernel runs a writing step of 16 rows 1.2-1.9x faster and a prefill pass up to
18% faster, with bit-identical results (bench/README.md, "Linear layers"). Elsewhere (fp32, where MKL
repacks nothing worth saving, or CUDA) the plain weight goes to `F.linear`.
"""

import torch
import torch.nn.functional as F


def _packs(weight: torch.Tensor) -> bool:
    return (weight.device.type == "cpu" and weight.dtype == torch.bfloat16 and torch.backends.mkldnn.is_available()
            and torch.ops.mkldnn._is_mkldnn_bf16_supported())


class Linear:
    """y = x @ weight.T + bias, for x of [rows, in_features]."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None):
        """:param weight: [out_features, in_features], contiguous, on its device and in its dtype.
        :param bias: [out_features] or None."""
        self.nbytes = weight.nbytes + (0 if bias is None else bias.nbytes)
        self.bias = bias
        self.packed = _packs(weight)
        # the packing's row count is a hint for its block layout; every row count runs alike
        self.weight = torch.ops.mkldnn._reorder_linear_weight(weight, 256) if self.packed else weight

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.packed:
            return torch.ops.mkldnn._linear_pointwise(x, self.weight, self.bias, "none", [], "")
        return F.linear(x, self.weight, self.bias)
