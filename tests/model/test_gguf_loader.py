"""model/gguf_loader.py: its reader gives the fields gguf-py's own reader gives, part for part,
for every kind of value, on a file written here and on the embedded smollm2's."""

import numpy as np
import pytest
from gguf import GGUFReader, GGUFWriter

from quail.model.gguf_loader import _Reader
from quail.model.registry import embedded_path


def _same_fields(path) -> None:
    ours, theirs = _Reader(str(path)), GGUFReader(str(path))
    assert list(ours.fields) == list(theirs.fields)
    for key, a in ours.fields.items():
        b = theirs.fields[key]
        assert a.types == b.types and a.data == b.data and a.offset == b.offset, key
        assert [(p.dtype, p.tobytes()) for p in a.parts] == [(p.dtype, p.tobytes()) for p in b.parts], key
        assert a.contents() == b.contents(), key
    assert [(t.name, t.data_offset, t.tensor_type) for t in ours.tensors] == \
        [(t.name, t.data_offset, t.tensor_type) for t in theirs.tensors]


def _written(path):
    w = GGUFWriter(str(path), "llama")
    w.add_array("words", ["a", "", "Ġthe", "日本", "x" * 300])
    w.add_array("no.words", [])
    w.add_array("types", [1, -2, 3])
    w.add_array("scores", [0.5, -1.25])
    w.add_array("flags", [True, False])
    w.add_array("nested", [[1, 2], [3]])
    w.add_uint32("one", 1)
    w.add_string("name", "quail")
    w.add_tensor("t", np.arange(8, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_every_kind_of_field_reads_as_gguf_py_reads_it(tmp_path):
    _same_fields(_written(tmp_path / "fields.gguf"))


def test_a_file_cut_inside_an_array_is_refused_naming_it(tmp_path):
    path = _written(tmp_path / "fields.gguf")
    data = path.read_bytes()
    types = data.index(b"types") + 5 + 4  # its name, then its value's type
    for cut in (data.index("Ġthe".encode()) + 2, types + 10, types + 14):  # in strings; an array's count; its ints
        path.write_bytes(data[:cut])
        with pytest.raises(ValueError, match="the file ends inside the array at byte"):
            _Reader(str(path))


@pytest.mark.model  # reads the embedded smollm2's GGUF
def test_a_real_models_fields_read_as_gguf_py_reads_them():
    _same_fields(embedded_path("smollm2-135m"))
