"""`turbospec serve`'s --host / --port: checked, bound and listening before the model loads (which
may take minutes), and held open until uvicorn serves on them (`server.run(sockets=...)`).

- A port outside 0-65535 is refused first (uvicorn raised an OverflowError after printing
  `listening on`).
- A failed bind names the fix for its cause (a host that is not an address of this machine, a
  port in use, a privileged port).
- The sockets listen from then on, so nothing can take the port while the model loads (a bind
  alone does not reserve it: with SO_REUSEADDR a second process may bind the same port until one
  of them listens). A client that connects meanwhile waits in the backlog until the server starts.
- `--port 0` gets a free port from the kernel; the `listening on` line (`announce_when_serving`)
  names the port actually bound, once uvicorn's start-up is done.
"""
from __future__ import annotations

import errno
import socket

MAX_PORT = 65535
BACKLOG = 2048                 # uvicorn's default --backlog
NO_SUCH_ADDRESS = (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT)


class ListenError(Exception):
    """Why the server cannot listen on --host / --port, with the fix (one line)."""


def port_error(port: int) -> str | None:
    """Why `port` is not a TCP port, or None."""
    if 0 <= port <= MAX_PORT:
        return None
    return f"--port {port} is not a TCP port: use 0-{MAX_PORT} (0: any free port)"


def listen_sockets(host: str, port: int, backlog: int = BACKLOG) -> list[socket.socket]:
    """Listening sockets on (host, port), opened as uvicorn's asyncio `create_server` opens them:
    one per address `host` resolves to, SO_REUSEADDR, IPv6 ones v6-only. With port 0 every
    address gets the port the first bind got. An address family this machine lacks is skipped
    when another address binds. The caller closes them (uvicorn does once it has served).
    Raises ListenError."""
    socks: list[socket.socket] = []
    first_error: OSError | None = None
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        for family, kind, proto, _, addr in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                if port == 0 and socks:
                    addr = (addr[0], socks[0].getsockname()[1], *addr[2:])
                sock.bind(addr)
                sock.listen(backlog)
            except OSError as e:
                sock.close()
                if e.errno not in NO_SUCH_ADDRESS:
                    raise
                first_error = first_error or e
                continue
            socks.append(sock)
        if not socks:
            raise first_error or OSError(errno.EADDRNOTAVAIL, "no address to listen on")
    except (OSError, UnicodeError) as e:          # UnicodeError: a host name no DNS label can hold
        for sock in socks:
            sock.close()
        if isinstance(e, UnicodeError):
            e = socket.gaierror(socket.EAI_NONAME, f"not a host name ({e})")
        raise ListenError(f"cannot listen on {host}:{port}: {e.strerror or e}; {bind_hint(e, port)}") from None
    return socks


def bind_hint(e: OSError, port: int) -> str:
    """What to change for the bind failure `e`."""
    if isinstance(e, socket.gaierror) or e.errno in NO_SUCH_ADDRESS:
        return ("fix --host: an IP address or host name of this machine (127.0.0.1 for this machine "
                "alone, 0.0.0.0 for every interface)")
    if e.errno == errno.EADDRINUSE:
        return "stop what holds the port or pass another --port"
    if e.errno in (errno.EACCES, errno.EPERM) and 0 < port < 1024:
        return (f"port {port} is privileged (below 1024): pass --port 1024 or above (e.g. 8000), or give "
                "the process the right to bind it (root or CAP_NET_BIND_SERVICE)")
    return "check --host and --port"


def listen_url(host: str, sock: socket.socket) -> str:
    """`http://HOST:PORT` with the port `sock` is bound to (the real one for --port 0); an IPv6
    address in brackets."""
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{sock.getsockname()[1]}"


def announce_when_serving(server, line: str) -> None:
    """Print `line` once the uvicorn `server` serves: after its start-up (the app's lifespan
    start-up included) is done, not before; nothing when the start-up fails."""
    startup = server.startup

    async def startup_then_announce(sockets=None):
        await startup(sockets=sockets)
        if server.started:
            print(line, flush=True)
    server.startup = startup_then_announce
