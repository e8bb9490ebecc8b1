"""The K/V tensors behind the page ids: per layer, [num_pages, page_size, kv_heads, head_dim]."""

import torch

from quail.kv.page_arena import PAGE_SIZE


class KVArena:
    def __init__(self, num_layers: int, num_pages: int, kv_heads: int, head_dim: int, dtype: torch.dtype,
                 device: str | torch.device = "cpu", page_size: int = PAGE_SIZE) -> None:
        shape = (num_pages, page_size, kv_heads, head_dim)
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.num_pages = num_pages
        self.page_size = page_size

    @staticmethod
    def page_bytes(num_layers: int, kv_heads: int, head_dim: int, dtype: torch.dtype,
                   page_size: int = PAGE_SIZE) -> int:
        itemsize = torch.empty((), dtype=dtype).element_size()
        return 2 * num_layers * page_size * kv_heads * head_dim * itemsize

    def write(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """slots are flat token slots, page * page_size + offset."""
        kvh, d = k.shape[1], k.shape[2]
        self.k[layer].view(-1, kvh, d)[slots] = k
        self.v[layer].view(-1, kvh, d)[slots] = v

    def copy_page(self, src: int, dst: int) -> None:
        for k, v in zip(self.k, self.v):
            k[dst].copy_(k[src])
            v[dst].copy_(v[src])
