"""What Quail keeps for its user (the worker's socket and token, staged windows, $QUAIL_HOME) must be
out of other users' reach: a folder another user owns, or one that others may write, lets them plant
or swap what is read from it. Such a folder or file is refused, never used or repaired."""

import os
import stat
from pathlib import Path

from quail.errors import QuailError


def _refuse(path: Path, st: os.stat_result, kind: str) -> None:
    if st.st_uid != os.getuid():
        raise QuailError(f"{kind} {path} belongs to another user (uid {st.st_uid}); Quail uses only its own user's "
                         f"{kind}s: choose another, or remove it")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise QuailError(f"{kind} {path} is writable by other users (mode {stat.filemode(st.st_mode)}); "
                         f"chmod go-w it, or choose another")


def private_folder(path: Path) -> Path:
    """`path`, created 0700 (with its missing parents) if absent; refused if it is not a folder of
    this user's that only this user can write."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = path.lstat()
    except OSError as e:
        raise QuailError(f"folder {path}: {e.strerror}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise QuailError(f"folder {path} is not a folder ({what(st.st_mode)})")
    _refuse(path, st, "folder")
    return path


def what(mode: int) -> str:
    """What a path is, in a word or two, for an error that refuses it."""
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISLNK(mode):
        return "a link"
    return "a socket" if stat.S_ISSOCK(mode) else "a file" if stat.S_ISREG(mode) else "something else"


def owned_file(path: Path, readable_by_others: bool = True, kind: str = "file") -> bool:
    """Whether `path` exists, as a regular file (or, kind "socket", a socket) of this user's, in a
    folder of this user's, that no other user can write (or, with readable_by_others False, read);
    one that exists and is not is refused."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return False
    except OSError as e:
        raise QuailError(f"{kind} {path}: {e.strerror}") from None
    if not (stat.S_ISSOCK if kind == "socket" else stat.S_ISREG)(st.st_mode):
        raise QuailError(f"{kind} {path} is not a {'socket' if kind == 'socket' else 'regular file'} "
                         f"({what(st.st_mode)}); it is left as it is: choose another")
    _refuse(path.parent, path.parent.stat(), "folder")
    _refuse(path, st, kind)
    if not readable_by_others and st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise QuailError(f"file {path} is open to other users (mode {stat.filemode(st.st_mode)}); chmod 600 it")
    return True


def secret_file(path: str, name: str, variable: bool = False) -> str:
    """The text of a file that holds a secret (a token, a database URL with its password, a key):
    refused unless it is this user's and only this user can read it, since one on the command line
    shows in `ps`. name: the parameter that gave the path or, with `variable`, the environment
    variable."""
    parameter = None if variable else name
    try:
        st = os.stat(path)
        secret = Path(path).read_text().strip()
    except OSError as e:
        raise QuailError(f"{name} {path}: {e.strerror}", parameter=parameter) from None
    mode = st.st_mode
    if st.st_uid != os.getuid():  # its owner could have written it: a URL or key of theirs
        raise QuailError(f"{name} {path} belongs to another user (uid {st.st_uid}); give a file of your own",
                         parameter=parameter)
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise QuailError(f"{name} {path} is open to other users (mode {stat.filemode(mode)}); chmod 600 it",
                         parameter=parameter)
    if not secret:
        raise QuailError(f"{name} {path} is empty", parameter=parameter)
    return secret
