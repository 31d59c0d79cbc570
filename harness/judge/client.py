"""The HTTP judge: any OpenAI-compatible ``/chat/completions`` endpoint (standard library ``urllib``: no new
dependency). Like the local judge (:mod:`harness.judge.local`) it answers ``complete(messages) -> str`` or
raises :class:`JudgeFailure` with the reason (:func:`harness.judge.grade.make_judge` picks one).

HTTP: requests are spaced by a rate limiter shared by every thread (``requests_per_minute``); a 408, 409,
429 or 5xx response, a timeout or a dropped connection is retried up to ``max_retries`` times with
exponential backoff (``backoff_s`` doubled each retry, jittered, at most ``backoff_max_s``; a server's
``Retry-After`` is honoured within that bound); any other HTTP error fails at once. The API key is read
from the environment variable named by ``api_key_env`` and sent only in the ``Authorization`` header:
every error text is scrubbed of it before it becomes a reason, and a response that holds it (an endpoint
echoing it) fails, so it is never cached or written.

Each attempt has an overall deadline of ``timeout_s`` (not only per socket read: a server trickling a byte
at a time is cut off — a watchdog shuts the connection down at the deadline, and the body is read in
chunks against the clock) and a size cap (:data:`MAX_RESPONSE_BYTES`).
"""
from __future__ import annotations

import http.client
import json
import random
import re
import socket
import threading
import time
import urllib.error
import urllib.request
from typing import Callable, Mapping
from urllib.parse import urlparse

from harness.judge.config import JudgeConfig

MAX_RESPONSE_BYTES = 4 << 20  # a judgment is a few KB; error bodies are read up to 300 bytes
RETRY_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})
LOOPBACK = ("127.0.0.1", "localhost", "::1")
_SECRET_SHAPES = re.compile(r"(Bearer\s+\S+|\bsk-[A-Za-z0-9_*\-]{4,})")


class JudgeFailure(Exception):
    """No judgment could be had; the message is the reason (it never holds the API key)."""


class _Retryable(Exception):
    def __init__(self, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.retry_after = retry_after


class RateLimiter:
    """At most ``per_minute`` starts per minute, evenly spaced, across threads (None = no limit)."""

    def __init__(self, per_minute: float | None, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep):
        self.interval = 60.0 / per_minute if per_minute else 0.0
        self.clock, self.sleep = clock, sleep
        self._next = -float("inf")
        self._lock = threading.Lock()

    def wait(self) -> float:
        """Block until the next request may start; returns the time waited."""
        if not self.interval:
            return 0.0
        with self._lock:
            now = self.clock()
            start = max(now, self._next)
            self._next = start + self.interval
        if start > now:
            self.sleep(start - now)
        return max(0.0, start - now)


def _retry_after(headers) -> float | None:
    try:
        value = float(headers.get("Retry-After")) if headers is not None and headers.get("Retry-After") else None
    except (TypeError, ValueError):
        return None
    return value if value is not None and value >= 0 else None


class OpenAIJudge:
    """An OpenAI-compatible chat-completions endpoint (OpenAI, vLLM, TGI, llama.cpp, LiteLLM, ...)."""

    def __init__(self, cfg: JudgeConfig, environ: Mapping[str, str] | None = None,
                 sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic):
        """``sleep`` and ``clock``: the retry back-off's, the rate limiter's and each request's deadline (injected
        by tests)."""
        import os

        if not cfg.base_url:
            raise JudgeFailure("judge.base_url: the openai judge needs the API's base URL")
        self.cfg = cfg
        self.url = cfg.base_url.rstrip("/") + "/chat/completions"
        env = os.environ if environ is None else environ
        self._key = env.get(cfg.api_key_env) if cfg.api_key_env else None
        if cfg.api_key_env and not self._key:
            raise JudgeFailure(f"environment variable {cfg.api_key_env} (judge.api_key_env) is not set")
        self.sleep, self.clock = sleep, clock
        self.limiter = RateLimiter(cfg.requests_per_minute, clock=clock, sleep=sleep)
        # a judge on this machine is reached directly, never through an HTTP proxy from the environment
        self._direct = urlparse(self.url).hostname in LOOPBACK

    def scrub(self, text: str) -> str:
        """``text`` without the API key (and anything shaped like a bearer token or an OpenAI key)."""
        if self._key:
            text = text.replace(self._key, "[redacted]")
        return _SECRET_SHAPES.sub("[redacted]", text)

    def complete(self, messages: list[dict]) -> str:
        body = json.dumps({"model": self.cfg.model, "messages": messages, "temperature": self.cfg.temperature,
                           "max_tokens": self.cfg.max_tokens, "n": 1}).encode()
        attempts = self.cfg.max_retries + 1
        for attempt in range(attempts):
            self.limiter.wait()
            try:
                return self._post(body)
            except _Retryable as e:
                if attempt == attempts - 1:
                    raise JudgeFailure(f"{e} (gave up after {attempts} attempt(s))") from None
                self.sleep(self._delay(attempt, e.retry_after))
        raise AssertionError("unreachable")

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        backoff = self.cfg.backoff_s * (2 ** attempt) * random.uniform(0.5, 1.0)
        return min(self.cfg.backoff_max_s, max(backoff, retry_after or 0.0))

    def _headers(self) -> dict:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        return headers

    def _open(self, request, connections: list):
        """``urlopen`` through a proxy-aware opener whose connections are recorded (for the watchdog)."""
        def recorded(cls):
            def make(host, **kw):
                connections.append(cls(host, **kw))
                return connections[-1]
            return make

        class Http(urllib.request.HTTPHandler):
            def http_open(self, req):
                return self.do_open(recorded(http.client.HTTPConnection), req)

        class Https(urllib.request.HTTPSHandler):
            def https_open(self, req):
                return self.do_open(recorded(http.client.HTTPSConnection), req, context=self._context)

        proxy = urllib.request.ProxyHandler({}) if self._direct else urllib.request.ProxyHandler()
        return urllib.request.build_opener(proxy, Http(), Https()).open(request, timeout=self.cfg.timeout_s)

    def _read(self, response, deadline: float) -> bytes:
        """The body, in chunks, until ``deadline`` (the injected clock) or :data:`MAX_RESPONSE_BYTES`."""
        chunks: list[bytes] = []
        total = 0
        while True:
            if self.clock() > deadline:
                raise _Retryable(f"no complete response from {self.url} within {self.cfg.timeout_s} s "
                                 "(judge.timeout_s)")
            chunk = response.read1(1 << 16)
            if not chunk:
                return b"".join(chunks)
            total += len(chunk)
            if total > MAX_RESPONSE_BYTES:
                raise JudgeFailure(f"the response from {self.url} is larger than {MAX_RESPONSE_BYTES >> 20} MiB "
                                   "(not read further, not retried)")
            chunks.append(chunk)

    def _post(self, body: bytes) -> str:
        request = urllib.request.Request(self.url, data=body, headers=self._headers(), method="POST")
        deadline = self.clock() + self.cfg.timeout_s
        connections: list[http.client.HTTPConnection] = []
        expired: list[bool] = []

        def cut_off():  # the real-time bound: whatever phase the request is in (headers trickled included)
            expired.append(True)
            for c in connections:
                try:
                    c.sock and c.sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        watchdog = threading.Timer(self.cfg.timeout_s, cut_off)
        watchdog.daemon = True
        watchdog.start()
        try:
            with self._open(request, connections) as response:
                raw = self._read(response, deadline)
        except urllib.error.HTTPError as e:
            detail = self.scrub(e.read()[:300].decode("utf-8", errors="replace").strip())
            message = f"HTTP {e.code} from {self.url}: {detail}" if detail else f"HTTP {e.code} from {self.url}"
            if e.code in RETRY_STATUS:
                raise _Retryable(message, _retry_after(e.headers)) from None
            raise JudgeFailure(message + " (not retried)") from None
        except (urllib.error.URLError, http.client.HTTPException, OSError) as e:  # timeouts, refused, reset
            raise _Retryable(f"{type(e).__name__} calling {self.url}: {self.scrub(str(e))}") from None
        finally:
            watchdog.cancel()
        if expired:
            raise _Retryable(f"no complete response from {self.url} within {self.cfg.timeout_s} s (judge.timeout_s)")
        return self._content(raw)

    def _content(self, raw: bytes) -> str:
        if self._key and self._key.encode() in raw:
            raise JudgeFailure(f"the response from {self.url} holds the API key (an endpoint echoing it): not used, "
                               "cached or written")
        try:
            content = json.loads(raw)["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError):
            raise JudgeFailure(f"malformed response from {self.url} (no choices[0].message.content): "
                               f"{self.scrub(raw[:200].decode('utf-8', errors='replace'))}") from None
        if not isinstance(content, str):
            raise JudgeFailure(f"malformed response from {self.url}: message content is {type(content).__name__}")
        if self._key and self._key in content:  # escaped differently in the JSON than in the raw bytes
            raise JudgeFailure(f"the response from {self.url} holds the API key (an endpoint echoing it): not used, "
                               "cached or written")
        return content
