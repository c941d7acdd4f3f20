"""Which API key goes to which endpoint, and where it came from (never the key itself in any output).

A bearer key is a credential for one provider: sending it to another host hands it over. So:

  --api-key given once per --endpoint   each endpoint gets its own ('' = no key for that one)
  --api-key given once                  every endpoint, when they all are one server (same scheme, host
                                        and port); several servers refuse it: pass one per --endpoint
  no --api-key, $OPENAI_API_KEY set     used when every endpoint is one server (a single endpoint, the
                                        usual case); in a race of several servers it is NOT sent, and
                                        the audit says so (pass --api-key once per --endpoint)

The source of each endpoint's key ("--api-key", "$OPENAI_API_KEY" or None) is printed at the start
and recorded in results.json (`endpoints[].api_key_source`).
"""
from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlparse

ENV_VAR = "OPENAI_API_KEY"


@dataclass(frozen=True)
class KeyChoice:
    keys: list[str | None]                   # one per endpoint
    sources: list[str | None]                # "--api-key" | "$OPENAI_API_KEY" | None, one per endpoint
    notes: list[str]                         # what the user should know (printed, never the key)


def server_of(url: str) -> str:
    """scheme://host:port — what a key is scoped to."""
    p = urlparse(url)
    port = p.port or (443 if p.scheme == "https" else 80)
    return f"{p.scheme}://{(p.hostname or '').lower()}:{port}"


def choose_keys(urls: list[str], given: list[str], env_key: str | None) -> KeyChoice:
    """The key each endpoint gets. ValueError (saying what to pass) for one key meant for several servers."""
    n = len(urls)
    servers = list(dict.fromkeys(server_of(u) for u in urls))
    if given:
        if len(given) == n:
            keys = [k or None for k in given]
        elif len(given) == 1 and len(servers) == 1:
            keys = [given[0] or None] * n
        elif len(given) == 1:
            raise ValueError(f"--api-key given once for {n} endpoints on {len(servers)} different servers "
                             f"({', '.join(servers)}): pass it once per --endpoint, in the same order ('' for an "
                             "endpoint that needs none), so that no server receives another's key")
        else:
            raise ValueError(f"--api-key given {len(given)} times for {n} endpoints: pass it once, or once per "
                             "--endpoint ('' for an endpoint that needs none)")
        return KeyChoice(keys, ["--api-key" if k else None for k in keys], [])
    if not env_key:
        return KeyChoice([None] * n, [None] * n, [])
    if len(servers) == 1:
        return KeyChoice([env_key] * n, [f"${ENV_VAR}"] * n,
                         [f"API key from ${ENV_VAR} (no --api-key given), sent to {servers[0]}"])
    return KeyChoice([None] * n, [None] * n,
                     [f"${ENV_VAR} is set but NOT sent: the endpoints are {len(servers)} different servers "
                      f"({', '.join(servers)}) and one key must not go to all of them; pass --api-key once per "
                      "--endpoint ('' for an endpoint that needs none)"])


def describe(urls: list[str], sources: list[str | None]) -> list[str]:
    """One line per endpoint: where its key came from."""
    return [f"{u}: API key {'from ' + s if s else 'none'}" for u, s in zip(urls, sources)]
