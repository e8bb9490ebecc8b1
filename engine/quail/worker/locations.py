"""Worker locations, as Arrow Flight spells them: a Unix socket (grpc+unix://PATH), a TCP port
(grpc://HOST:PORT), or a TCP port behind TLS (grpc+tls://HOST:PORT)."""

import ipaddress
from pathlib import Path
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.flight as flight

from quail.errors import QuailError
from quail.trust import secret_file


def unix_location(path: str | Path) -> str:
    try:
        return flight.Location.for_grpc_unix(str(path)).uri.decode()
    except pa.ArrowInvalid:
        raise QuailError(f"socket {path}: Flight cannot name this path (spaces and some other characters "
                         f"are not allowed); choose another") from None


def tcp_location(scheme: str, host: str, port: int) -> str:
    """SCHEME://HOST:PORT, an IPv6 address in brackets."""
    return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"


def check_location(location: str) -> str:
    """A worker location Flight can dial, or an error that says what one looks like."""
    try:
        url = urlsplit(location)
        ok = bool(url.path) if url.scheme == "grpc+unix" else \
            url.scheme in ("grpc", "grpc+tcp", "grpc+tls") and bool(url.hostname) and url.port is not None
    except ValueError:  # a port that is not a number or out of range, an unclosed [IPv6 address
        ok = False
    if not ok:
        raise QuailError(f"worker location {location!r}: give grpc://HOST:PORT, grpc+tls://HOST:PORT or "
                         f"grpc+unix://PATH")
    return location


def socket_path(location: str) -> Path | None:
    """The Unix socket a location names; None for a TCP one."""
    url = urlsplit(location)
    return Path(url.path) if url.scheme == "grpc+unix" else None


def is_loopback(location: str) -> bool:
    """Whether `location` is on this machine only: a Unix socket, or a loopback address."""
    parts = urlsplit(location)
    if parts.scheme == "grpc+unix":
        return True
    try:
        return parts.hostname == "localhost" or ipaddress.ip_address(parts.hostname or "").is_loopback
    except ValueError:
        return False


def is_tls(location: str) -> bool:
    return urlsplit(location).scheme == "grpc+tls"


def tls_options(location: str, ca: str | None) -> dict:
    """FlightClient's TLS arguments for `location`: the CA file's certificates to trust, if given."""
    if ca is None:
        return {}
    if not is_tls(location):
        raise QuailError(f"a TLS certificate authority is given for {location}, which is not grpc+tls://HOST:PORT")
    try:
        return {"tls_root_certs": Path(ca).read_bytes()}
    except OSError as e:
        raise QuailError(f"tls_ca {ca}: {e.strerror}") from None


def server_tls(cert: str | None, key: str | None) -> tuple[bytes, bytes] | None:
    """The certificate chain and private key a TCP worker serves TLS with (both or neither); the key
    file must be its owner's alone, as token files are."""
    if (cert is None) != (key is None):
        missing = "tls_key" if key is None else "tls_cert"
        raise QuailError(f"{missing} is missing: a certificate chain and its private key go together",
                         parameter=missing)
    if cert is None or key is None:
        return None
    try:
        chain = Path(cert).read_bytes()
    except OSError as e:
        raise QuailError(f"tls_cert {cert}: {e.strerror}", parameter="tls_cert") from None
    return chain, secret_file(key, "tls_key").encode()
