"""A tiny OpenAI-compatible ``/v1/chat/completions`` server on 127.0.0.1 for the judge's tests (standard
library ``http.server`` in a thread). ``reply(request) -> (status, body, headers)`` decides every answer;
every request is kept (path, headers, JSON body, arrival time: monotonic ``t`` and ``wall``) for the test."""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def completion(content: str) -> dict:
    return {"id": "stub", "object": "chat.completion", "model": "stub",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}]}


def rating(score="7") -> callable:
    """A reply function: always ``Rating: [[score]]``."""
    return lambda request: (200, completion(f"The answer is fine. Rating: [[{score}]]"), {})


class StubServer:
    def __init__(self, reply=None):
        self.reply = reply or rating()
        self.trickle_s = 0.01  # between the chunks of a trickled reply
        self.requests: list[dict] = []
        self._lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 — http.server's name
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = None
                request = {"path": self.path, "headers": dict(self.headers), "body": body, "t": time.monotonic(),
                           "wall": time.time()}
                with stub._lock:
                    stub.requests.append(request)
                status, payload, headers = stub.reply(request)
                chunks = payload if isinstance(payload, list) else [  # a list of bytes: sent one by one (trickled)
                    payload if isinstance(payload, bytes) else json.dumps(payload).encode()]
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(sum(map(len, chunks))))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                try:
                    for chunk in chunks:
                        self.wfile.write(chunk)
                        self.wfile.flush()
                        time.sleep(stub.trickle_s if len(chunks) > 1 else 0)
                except OSError:  # the client hung up (its deadline)
                    pass

            def log_message(self, *args):  # quiet
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> "StubServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
