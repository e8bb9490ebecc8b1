"""Token-count baselines for bench/tokens.py, computed from the exact prompts a no-reuse run
evaluates, in its order.

- `lru_block_cache`: vLLM's automatic prefix caching policy: full 16-token blocks identified by
  chained hashes, looked up as the longest cached chain of a prompt's blocks, least recently used
  evicted first, no planning. Simulated one prompt at a time with the whole arena as the cache,
  which is generous to it (a real server also needs room for running requests).
- `trie_nodes`: the physical lower bound, the unique tokens of all prompts (nodes of their trie).
"""

from collections import OrderedDict


def lru_block_cache(prompts: list[list[int]], blocks: int, block_size: int = 16) -> int:
    cache: OrderedDict[int, None] = OrderedDict()
    computed = 0
    for prompt in prompts:
        hashes, h = [], 0
        for lo in range(0, len(prompt) - block_size + 1, block_size):
            h = hash((h, tuple(prompt[lo : lo + block_size])))
            hashes.append(h)
        hit = 0
        while hit < len(hashes) and hashes[hit] in cache:
            hit += 1
        computed += max(len(prompt) - hit * block_size, 1)  # the last token is always computed
        for h in hashes:
            cache[h] = None
            cache.move_to_end(h)
        while len(cache) > blocks:
            cache.popitem(last=False)
    return computed


def trie_nodes(prompts: list[list[int]]) -> int:
    root: dict = {}
    nodes = 0
    for prompt in prompts:
        node = root
        for t in prompt:
            nxt = node.get(t)
            if nxt is None:
                nxt = node[t] = {}
                nodes += 1
            node = nxt
    return nodes
