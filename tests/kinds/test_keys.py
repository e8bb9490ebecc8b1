"""The answer store's keys, each kind's own (kinds/<kind>.py `keys`, `asked`): byte for byte the keys
that answers were stored under before the kinds held them, or every stored answer would be lost."""

from functools import partial

from quail.kinds import classify, extract, filter, join, map, writes
from quail.specs import FieldSpec
from quail.store import answer_key

DOCS = [[1, 2, 3], [4, 5]]
FIELDS = (FieldSpec("name", "str", "who"), FieldSpec("mood", "enum", "", ("up", "down")))


def asked(what: str, document: list[int]) -> tuple[str, list[int]]:
    """A key that shows what it names."""
    return what, document


def test_each_kind_names_what_it_names_in_its_keys():
    assert filter.keys(asked, [[9, 10], [11]], DOCS, False) == [
        [("filter\x1fnone\x1f[9, 10]", d), ("filter\x1fnone\x1f[11]", d)] for d in DOCS]
    assert filter.keys(asked, [[9]], DOCS[:1], True) == [[("filter\x1fcontextual\x1f[9]", DOCS[0])]]
    assert classify.keys(asked, [9, 10], [[20], [21, 22]], DOCS, False) == [
        [("classify\x1fnone\x1f[9, 10]\x1f[[20], [21, 22]]", d)] for d in DOCS]
    assert join.keys(asked, join.PairQuestion([], [14, 15]), DOCS, [[7], [8, 9]], True) == [
        [("join\x1fcontextual\x1f[14, 15]", a + [-1] + p) for p in ([7], [8, 9])] for a in DOCS]
    assert join.keys(asked, join.PairQuestion([3], [14]), DOCS, [[7]], True, [[0], []]) == [
        [("join\x1fcontextual\x1f[3]\x1f[14]", DOCS[0] + [-1, 7])], []]  # the layouts' keys differ
    assert extract.asked([30, 31], FIELDS, 64) == (
        'extract\x1f[30, 31]\x1f{"additionalProperties": false, "properties": {"mood": {"anyOf": [{"enum": '
        '["up", "down"], "type": "string"}, {"type": "null"}]}, "name": {"anyOf": [{"type": "string"}, {"type": '
        '"null"}]}}, "required": ["name", "mood"], "type": "object"}\x1f64\x1f(\', \', \': \')')
    assert map.asked([30, 31], 256) == "map\x1f[30, 31]\x1f256"
    assert writes.keys(asked, "map\x1f[30]\x1f8", DOCS) == [[("map\x1f[30]\x1f8", d)] for d in DOCS]


def test_labels_that_begin_others_are_keyed_apart_from_answers_stored_before_they_were_scored_so():
    key = partial(answer_key, "model")
    before = answer_key("model", "classify\x1fnone\x1f[9, 10]\x1f[[20], [20, 21]]", DOCS[0])
    assert classify.keys(key, [9, 10], [[20], [20, 21]], DOCS[:1], False) != [[before]]
    assert classify.keys(asked, [9, 10], [[20], [20, 21]], DOCS[:1], False) == [
        [("classify\x1fnone\x1f[9, 10]\x1f[[20], [20, 21]]\x1fends", DOCS[0])]]


def test_the_digests_are_those_answers_were_stored_under():
    """Computed by Session.filter_keys, classify_keys, join_keys and written_keys before the kinds
    held the keys (model identity "model")."""
    key = partial(answer_key, "model")

    def hexes(rows: list[list[bytes]]) -> list[list[str]]:
        return [[k.hex() for k in row] for row in rows]

    assert hexes(filter.keys(key, [[9, 10], [11]], DOCS, False)) == [
        ["f17e4c2ef07b863838adb2a52312a0ed8fefe04b277d519d5613064a2d9f44ee",
         "22b1dfda5405809a01c5d1a4c4f7d3a4887c0785523f1093dda4562c94e270cc"],
        ["a1d81fb135a1f9279e106673536a57f73e566ed6679cde002e5a2aac2719ca24",
         "ccc661a57b01e5e81cb096df4211e0ea4c3d1622c01247b4eeea284c301c88cf"]]
    assert hexes(filter.keys(key, [[9, 10]], DOCS[:1], True)) == [
        ["55c49e4ad6bf835a96e487e180e1c841eb5b9ea5712742c1f926cdb5786c0a86"]]
    assert hexes(classify.keys(key, [9, 10], [[20], [21, 22]], DOCS, False)) == [
        ["1b5e5d712d77310df80bfe48ddd474cb75829160dcba076ff463b2fcc27c52f3"],
        ["b13d514da24e6c365692b4cea3bda08f1da123d4f49cf97cf1c2d2f900600c5b"]]
    assert hexes(classify.keys(key, [9, 10], [[20], [20, 21]], DOCS[:1], True)) == [
        ["9a8f197981979c719a73ff1ff70306b2e93c0a13aa510192530a17a5dbd23bd5"]]
    assert hexes(join.keys(key, join.PairQuestion([], [14, 15]), DOCS, [[7], [8, 9]], False)) == [
        ["9c30e2ceb798d3be9c020bb77a73a75f1e28f07fe8105d154f72cced1797e2e7",
         "f6e51df43218551d8fe41d979432c783ee45100610f23e3d3e5e3da95a96ad9f"],
        ["1b607fc9f6ca548b3c18aa65563742c7e2c667a0ad3c8617b4cfd9fb19d3dea0",
         "eba7b030cbd0fee18a4afcddaa0d87b04b77b736c9149e4d97675b3f1e1120cc"]]
    assert hexes(writes.keys(key, extract.asked([30, 31], FIELDS, 64), DOCS)) == [
        ["f62b03e6e7364f4471b0b4f74c3125bfdb2edfe714e61aed2656e02d77cad202"],
        ["382594288d4b4f5a9262b287f8fe3766841d487ce02c10efc551527c66012481"]]
    assert hexes(writes.keys(key, map.asked([30, 31], 256), DOCS)) == [
        ["1d11a0ccc5ce66cdd779ec5d91e5a44ad31d0c83a9df3ef5a92c0221b77da11b"],
        ["b1327eff88456132a37fc6ab055e12676ec54be19814003e2460ca1faeb6ca9f"]]
