"""An endpoint under audit: where to send requests and where its counters live.

`--endpoint` accepts the forms people paste: `http://host:8000`, `http://host:8000/v1`, or the full
`.../v1/chat/completions` / `.../v1/completions`. Server-side counters are looked for next to the
API root: `<base>/metrics` (vLLM, turbospec, SGLang with --enable-metrics) and
`<base>/get_server_info` (SGLang).
"""
from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlparse

APIS = ("chat", "completions")
_API_PATHS = {"chat": "/chat/completions", "completions": "/completions"}


def api_of(url: str, api: str | None) -> str:
    """The API an endpoint speaks: the route of a full …/chat/completions or …/completions URL, else
    --api, else chat. A full route that contradicts --api is refused (the body would not fit the route)."""
    path = urlparse(url).path.rstrip("/")
    route = "chat" if path.endswith("/chat/completions") else "completions" if path.endswith("/completions") else None
    if route and api and api != route:
        raise ValueError(f"--endpoint {url} is the {route} route but --api is {api}: leave --api out (the route "
                         "says which), or pass the API root (…/v1) as --endpoint")
    return route or api or "chat"


@dataclass(frozen=True)
class Endpoint:
    url: str                          # as given by the user; the key of this endpoint in results.json
    model: str
    api: str = "chat"
    api_key: str | None = None
    metrics_url_override: str | None = None
    api_key_source: str | None = None  # "--api-key" | "$OPENAI_API_KEY" | None (keys.py); never the key

    def __post_init__(self) -> None:
        parsed = urlparse(self.url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError(f"--endpoint {self.url!r} is not an http(s) URL: pass e.g. "
                             "http://127.0.0.1:8000 or https://api.example.com/v1")
        if self.metrics_url_override is not None:
            m = urlparse(self.metrics_url_override)
            if m.scheme not in ("http", "https") or not m.netloc:
                raise ValueError(f"--metrics-url {self.metrics_url_override!r} is not an http(s) URL: pass e.g. "
                                 "http://127.0.0.1:8000/metrics")
        if self.api not in APIS:
            raise ValueError(f"--api {self.api!r} is not supported: use chat or completions")
        if not self.model:
            raise ValueError("--model is empty: pass the model name the endpoint serves")

    @property
    def base_url(self) -> str:
        """The server root: the URL without a trailing /v1[/chat]/completions."""
        url = self.url.rstrip("/")
        for suffix in ("/chat/completions", "/completions"):
            if url.endswith(suffix):
                url = url[: -len(suffix)]
                break
        return url[:-3] if url.endswith("/v1") else url

    @property
    def request_url(self) -> str:
        url = self.url.rstrip("/")
        if url.endswith("/chat/completions") or url.endswith("/completions"):
            return url
        return f"{self.base_url}/v1{_API_PATHS[self.api]}"

    @property
    def metrics_url(self) -> str:
        return self.metrics_url_override or f"{self.base_url}/metrics"

    @property
    def server_info_url(self) -> str:
        return f"{self.base_url}/get_server_info"

    @property
    def is_local(self) -> bool:
        return urlparse(self.url).hostname in ("127.0.0.1", "localhost", "::1", "0.0.0.0")

    def metrics_headers(self) -> dict[str, str]:
        """The key goes with a /metrics scrape only to the endpoint's own server (a gateway that guards
        /metrics would otherwise lose the measured acceptance); a --metrics-url elsewhere gets none."""
        from turbospec.audit.keys import server_of
        if self.api_key and server_of(self.metrics_url) == server_of(self.url):
            return {"Authorization": f"Bearer {self.api_key}"}
        return {}

    def headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers
