from hypothesis import given, settings
from hypothesis import strategies as st

from quail.prefix_tree import PrefixTree, common_prefix


def test_seed_example_three_prefixes_of_one_trace():
    trace = [(i * 7919) % 1000 + 1 for i in range(1900)]
    docs = [trace[:1000], trace[:1400], trace[:1900]]
    tree = PrefixTree.build(docs)
    assert tree.order == [0, 1, 2]
    assert tree.parent == [None, 0, 1]
    assert tree.shared == [0, 992, 1392]
    assert tree.tokens_computed([len(d) for d in docs]) == 1916
    assert sum(map(len, docs)) == 4300


def test_parent_links_skip_a_neighbour_that_reuses_the_whole_prefix():
    base = list(range(1, 41))
    docs = [base + [100], base + [200], base + [300]]  # all three share 32 tokens (two pages)
    tree = PrefixTree.build(docs)
    assert tree.shared == [0, 32, 32]
    assert tree.parent == [None, 0, 0]  # doc 2 takes the pages from 0, which computed them


def test_last_token_is_always_computed():
    docs = [list(range(32)), list(range(32))]
    tree = PrefixTree.build(docs)
    assert tree.shared[tree.order[1]] == 16  # 31 tokens in common at most, floored to a page


def _best_possible(docs, order, i, page=16):
    """Brute force: the most whole pages doc i could take from any document admitted before it."""
    before = order[: order.index(i)]
    best = 0
    for j in before:
        n = min(common_prefix(docs[i], docs[j]), len(docs[i]) - 1)
        best = max(best, n - n % page)
    return best


token_lists = st.lists(
    st.lists(st.integers(0, 2), min_size=1, max_size=80).map(lambda t: [1] * 16 + t),
    min_size=1, max_size=12,
) | st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=70), min_size=1, max_size=12)


@settings(max_examples=300, deadline=None)
@given(token_lists)
def test_sharing_is_sound_and_as_good_as_brute_force(docs):
    tree = PrefixTree.build(docs)
    assert sorted(tree.order) == list(range(len(docs)))
    position = {d: k for k, d in enumerate(tree.order)}
    for i, (p, s) in enumerate(zip(tree.parent, tree.shared)):
        assert s % 16 == 0 and 0 <= s <= len(docs[i]) - 1
        if p is None:
            assert s == 0
            continue
        assert position[p] < position[i]  # the parent is admitted first
        assert docs[p][:s] == docs[i][:s]  # no shared page holds different tokens
        assert len(docs[p]) >= s
        assert s == _best_possible(docs, tree.order, i)
    lengths = [len(d) for d in docs]
    assert tree.tokens_computed(lengths) <= sum(lengths)
