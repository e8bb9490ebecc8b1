"""A worker's socket and token paths: what lies there is replaced only when it is this user's own
stale socket or token, never a file of the user's data."""

import socket

import pytest

from quail.cli.main import main
from quail.errors import QuailError
from quail.worker.server import claim_socket
from quail.worker.tokens import new_token, read_token, token_path


def test_serve_on_a_socket_path_that_names_a_file_keeps_the_file(tmp_path, capsys):
    data = tmp_path / "data.parquet"
    data.write_bytes(b"PAR1 rows")
    with pytest.raises(SystemExit) as e:
        main(["worker", "serve", "--socket", str(data)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "quail: error:" in err and "is not a socket (a file)" in err, err
    assert "Traceback" not in err and data.read_bytes() == b"PAR1 rows"


def test_a_folder_or_a_link_is_not_a_socket(tmp_path):
    (tmp_path / "dir.sock").mkdir()
    (tmp_path / "link.sock").symlink_to(tmp_path / "elsewhere")
    for name, what in (("dir.sock", "a folder"), ("link.sock", "a link")):
        with pytest.raises(QuailError, match=f"is not a socket \\({what}\\)"):
            claim_socket(f"grpc+unix://{tmp_path / name}")
    assert (tmp_path / "dir.sock").is_dir() and (tmp_path / "link.sock").is_symlink()


def test_a_stale_socket_is_removed_and_a_live_one_refused(tmp_path):
    path = tmp_path / "w.sock"
    live = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    live.bind(str(path))
    live.listen()
    with pytest.raises(QuailError, match="a worker already listens"):
        claim_socket(f"grpc+unix://{path}")
    live.close()  # the file stays, and nothing listens: a worker that died
    assert path.exists()
    assert claim_socket(f"grpc+unix://{path}") == path and not path.exists()


def test_a_token_path_holding_anything_but_an_old_token_is_left_alone(tmp_path):
    location = f"grpc+unix://{tmp_path / 'data.parquet'}"
    data = token_path(location)
    data.write_text("the user's own notes")
    with pytest.raises(QuailError, match="is not a token this user's worker wrote"):
        new_token(location)
    assert data.read_text() == "the user's own notes"
    data.unlink()
    first = new_token(location)
    second = new_token(location)  # an earlier worker's token is replaced
    assert first != second == read_token(location)
