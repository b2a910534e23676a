"""What `headswap serve` checks before it loads a model: the API key it was given, and that uvicorn will be able
to bind --host:--port. Without these, a typo'd host or a busy port costs a model load and a "serving ... on"
line before uvicorn exits with status 3, and a key set to nothing silently turns authentication off."""

from __future__ import annotations

import ipaddress
import os
import re
import socket

from headswap.errors import ConfigError
from headswap.serve import API_KEY_ENV


def api_key(flag: str | None) -> str | None:
    """The bearer token: --api-key, else the HEADSWAP_API_KEY variable; None when neither is given. One that is
    given but empty or blank is refused: `HEADSWAP_API_KEY= headswap serve` must not mean "no authentication"."""
    where, key = ("--api-key", flag) if flag is not None else (API_KEY_ENV, os.environ.get(API_KEY_ENV))
    if key is not None and not key.strip():
        unset = "leave --api-key out" if flag is not None else f"unset {API_KEY_ENV}"
        raise ConfigError(f"{where} is {'empty' if not key else 'blank'}: give the key, or {unset} to serve "
                          f"without authentication")
    return key


def check_bind(host: str, port: int) -> None:
    """Bind host:port the way uvicorn will (same address family, SO_REUSEADDR) and let go at once; raise
    ConfigError naming --host or --port when that fails. (The port may be taken in the moment between this and
    uvicorn's bind; uvicorn then reports that itself.)"""
    if re.fullmatch(r"[0-9.]+", host):      # looks like IPv4: a bad one would otherwise go to DNS as a name
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            raise ConfigError(f"--host {host} is not a valid IPv4 address") from None
    family = socket.AF_INET6 if ":" in host else socket.AF_INET    # as uvicorn's Config.bind_socket
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except socket.gaierror as e:
        raise ConfigError(f"--host {host} does not resolve to an address ({e.strerror})") from None
    except OSError as e:
        import errno
        if e.errno == errno.EADDRINUSE:
            raise ConfigError(f"--port {port} is in use on {host}: stop what listens there or pick another "
                              f"--port") from None
        if e.errno == errno.EACCES:
            raise ConfigError(f"--port {port} on {host}: {e.strerror} (ports below 1024 need privileges); pick "
                              f"another --port") from None
        raise ConfigError(f"--host {host} cannot be bound ({e.strerror}): give an address of this machine, "
                          f"e.g. 127.0.0.1 or 0.0.0.0") from None
    finally:
        sock.close()
