"""Connections from the official MCP Python SDK to `examples/mcp_server.rs`, over every transport.

`IDEM_MCP_SERVER` names the built example (`scripts/mcp-client-tests.sh` builds it). Each test
gets fresh servers, so its ticket counts are its own. A transport is one of:

* `stdio-2025`: stdio, the `initialize` handshake (protocol 2025-11-25);
* `stdio-2026`: stdio, the SDK's default negotiation (protocol 2026-07-28);
* `http-2025`: streamable HTTP with sessions (protocol 2025-11-25);
* `http-2025-stateless`: streamable HTTP, the server run without sessions (2025-11-25);
* `http-2026`: streamable HTTP, the SDK's default (2026-07-28, always stateless in rmcp).

Over HTTP a client names itself with an `Idem-Client-Id` header: without a session it must,
and with one its id still wins over the session.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client import advertise
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

IDEM_EXTENSION = "idem/idempotency"
TURN_ID = "idem/turnId"
KEY = "idempotencyKey"
CLIENT_ID_HEADER = "Idem-Client-Id"
CLIENT_ID = "idem/clientId"

TRANSPORTS = ["stdio-2025", "stdio-2026", "http-2025", "http-2025-stateless", "http-2026"]


def server_binary() -> str:
    path = os.environ.get("IDEM_MCP_SERVER")
    if not path or not Path(path).is_file():
        raise pytest.UsageError(
            "set IDEM_MCP_SERVER to the built example server "
            "(cargo build --example mcp_server --features rmcp); see scripts/mcp-client-tests.sh"
        )
    return path


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@dataclass
class Server:
    """One run of the example server: a process serving HTTP, or a recipe for stdio clients."""

    transport: str
    args: list[str]
    log: Path
    process: subprocess.Popen[str] | None = None
    url: str | None = None
    stdio_logs: list[Path] = field(default_factory=list)

    @property
    def http(self) -> bool:
        return self.transport.startswith("http")

    @property
    def stateless(self) -> bool:
        """No session: the client must name itself."""
        return self.transport in ("http-2025-stateless", "http-2026")

    @property
    def protocol(self) -> str:
        return "2026-07-28" if self.transport.endswith("2026") else "2025-11-25"

    def log_text(self) -> str:
        return "".join(p.read_text() for p in [self.log, *self.stdio_logs] if p.exists())

    @asynccontextmanager
    async def client(self, *, declare: bool = False, client_id: str | None = "fresh"):
        """A connected SDK client. `declare`: it advertises the idem extension. `client_id`:
        its `Idem-Client-Id` header over HTTP (`"fresh"`: a new UUID; `None`: no header).

        The SDK's task groups wrap what the test raises in exception groups; the one exception
        inside is re-raised as itself, so that a failed assertion is an `AssertionError` (which
        the `xfail(raises=AssertionError)` markers tell from a broken setup)."""
        try:
            async with self._client(declare, client_id) as client:
                yield client
        except BaseExceptionGroup as group:
            leaf = _only_exception(group)
            if leaf is None:
                raise
            raise leaf from None

    @asynccontextmanager
    async def _client(self, declare: bool, client_id: str | None):
        mode = "legacy" if self.protocol == "2025-11-25" else "auto"
        extensions = [advertise(IDEM_EXTENSION, {})] if declare else None
        if self.http:
            headers = {}
            if client_id is not None:
                headers[CLIENT_ID_HEADER] = str(uuid.uuid4()) if client_id == "fresh" else client_id
            async with httpx2.AsyncClient(headers=headers) as http:
                transport = streamable_http_client(self.url, http_client=http)
                async with Client(transport, mode=mode, extensions=extensions) as client:
                    assert client.protocol_version == self.protocol
                    yield client
        else:
            log = self.log.with_name(f"{self.log.stem}-{len(self.stdio_logs)}.log")
            self.stdio_logs.append(log)
            with log.open("w") as errlog:
                params = StdioServerParameters(command=server_binary(), args=self.args)
                transport = stdio_client(params, errlog=errlog)
                async with Client(transport, mode=mode, extensions=extensions) as client:
                    assert client.protocol_version == self.protocol
                    yield client


def _only_exception(group: BaseExceptionGroup) -> BaseException | None:
    """The one exception inside nested single-exception groups, if that is what `group` is."""
    while isinstance(group, BaseExceptionGroup):
        if len(group.exceptions) != 1:
            return None
        group = group.exceptions[0]
    return group


@pytest.fixture(params=TRANSPORTS)
def transport(request) -> str:
    return request.param


@pytest.fixture
def start(transport: str, tmp_path: Path):
    """`start(*args)`: the example server for this transport, with extra command-line args."""
    servers: list[Server] = []

    def start(*args: str) -> Server:
        args = list(args)
        log = tmp_path / f"server-{len(servers)}.log"
        server = Server(transport, args, log)
        if server.http:
            http_args = ["--http", "127.0.0.1:0", *args]
            if transport == "http-2025-stateless":
                http_args.append("--stateless")
            errlog = log.open("w+")
            server.process = subprocess.Popen(
                [server_binary(), *http_args], stderr=errlog, stdin=subprocess.DEVNULL, text=True
            )
            server.url = _wait_for_url(server.process, log)
        servers.append(server)
        return server

    yield start
    for server in servers:
        if server.process is not None:
            server.process.kill()
            server.process.wait(timeout=10)
        text = server.log_text()
        if text:
            sys.stderr.write(f"--- server log ({transport}) ---\n{text}")


def _wait_for_url(process: subprocess.Popen[str], log: Path) -> str:
    import time

    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        found = re.search(r"listening on (http://\S+)\n", log.read_text())  # the whole line
        if found:
            return found.group(1)
        if process.poll() is not None:
            raise RuntimeError(f"the server exited: {log.read_text()}")
        time.sleep(0.02)
    raise RuntimeError("the server did not start listening in 20 s")


def text(result: Any) -> str:
    """The text of a tool result's first content block."""
    return result.content[0].text if result.content else ""


def for_a_model(message: str) -> bool:
    """Worded for a model: no Rust code, no backticks."""
    return "`" not in message and "Turn::" not in message and "idem_tools" not in message
