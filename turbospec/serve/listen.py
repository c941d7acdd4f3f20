"""`turbospec serve`'s --host / --port, checked before the model loads (which may take minutes):
a port outside 0-65535 (uvicorn raised an OverflowError after printing `listening on`), and a
trial bind, whose failure names the fix for its cause (a host that is not an address of this
machine, a port in use, a privileged port)."""
from __future__ import annotations

import errno
import socket

MAX_PORT = 65535


def port_error(port: int) -> str | None:
    """Why `port` is not a TCP port, or None."""
    if 0 <= port <= MAX_PORT:
        return None
    return f"--port {port} is not a TCP port: use 0-{MAX_PORT} (0: any free port)"


def bind_error(host: str, port: int) -> str | None:
    """Why the server could not listen on (host, port), with the fix, or None. Binds as uvicorn
    does (SO_REUSEADDR)."""
    try:
        family, kind, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                          flags=socket.AI_PASSIVE)[0]
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(addr)
    except OSError as e:
        return f"cannot listen on {host}:{port}: {e.strerror or e}; {bind_hint(e, port)}"
    return None


def bind_hint(e: OSError, port: int) -> str:
    """What to change for the bind failure `e`."""
    if isinstance(e, socket.gaierror) or e.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT):
        return ("fix --host: an IP address or host name of this machine (127.0.0.1 for this machine "
                "alone, 0.0.0.0 for every interface)")
    if e.errno == errno.EADDRINUSE:
        return "stop what holds the port or pass another --port"
    if e.errno in (errno.EACCES, errno.EPERM) and 0 < port < 1024:
        return (f"port {port} is privileged (below 1024): pass --port 1024 or above (e.g. 8000), or give "
                "the process the right to bind it (root or CAP_NET_BIND_SERVICE)")
    return "check --host and --port"
