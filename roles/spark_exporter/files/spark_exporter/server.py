"""The HTTP side: ``GET /metrics`` scrapes every source (``?collect[]=memory`` only the named
ones, as node_exporter's collect[] does), ``GET /`` says where the metrics are."""

from __future__ import annotations

import logging
import socket
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from spark_exporter.exposition import CONTENT_TYPE
from spark_exporter.scrape import SOURCES, scrape
from spark_exporter.source import Settings

logger = logging.getLogger("spark_exporter")
INDEX = b"Spark exporter: /metrics (?collect[]=<source> for some sources only)\n"


class Handler(BaseHTTPRequestHandler):
    server: Server
    server_version = "spark-exporter"

    def do_GET(self) -> None:
        self._answer(body=True)

    def do_HEAD(self) -> None:
        self._answer(body=False)

    def _answer(self, body: bool) -> None:
        url = urlsplit(self.path)
        if url.path == "/metrics":
            only = parse_qs(url.query).get("collect[]", [])
            unknown = sorted(set(only) - set(SOURCES))
            if unknown:
                text = f"unknown sources {unknown}; known: {sorted(SOURCES)}\n"
                self._send(HTTPStatus.BAD_REQUEST, "text/plain; charset=utf-8", text.encode(), body)
                return
            payload = scrape(self.server.settings, only).encode("utf-8")
            self._send(HTTPStatus.OK, CONTENT_TYPE, payload, body)
        elif url.path == "/":
            self._send(HTTPStatus.OK, "text/plain; charset=utf-8", INDEX, body)
        else:
            self._send(HTTPStatus.NOT_FOUND, "text/plain; charset=utf-8", b"not found\n", body)

    def _send(self, status: HTTPStatus, content_type: str, payload: bytes, body: bool) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if body:
            self.wfile.write(payload)

    def log_message(self, format: str, *args: object) -> None:
        pass  # a line per scrape would flood the journal


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], settings: Settings) -> None:
        self.settings = settings
        if ":" in address[0]:  # an IPv6 address such as ::
            self.address_family = socket.AF_INET6
        super().__init__(address, Handler)
