"""The Python agent of docs/adopting.md ("Agents in Python or TypeScript"), run as written
against the example server over streamable HTTP (the SDK's default, protocol 2026-07-28)."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest
from conftest import text

pytestmark = pytest.mark.anyio

DOCS = Path(__file__).resolve().parents[3] / "docs" / "adopting.md"


def docs_example(language: str) -> str:
    found = re.search(
        rf"<!-- tests/mcp-clients: {language} -->\n```\w+\n(.*?)```", DOCS.read_text(), re.DOTALL
    )
    assert found, f"docs/adopting.md has no {language} example marked for the tests"
    return found.group(1)


@pytest.mark.parametrize("transport", ["http-2026"])
async def test_the_documented_agent_retries_a_timed_out_call_and_it_runs_once(start, monkeypatch):
    monkeypatch.setenv("AGENT_ID", str(uuid.uuid4()))  # the agent's configuration
    agent: dict = {}
    exec(compile(docs_example("python"), "docs/adopting.md", "exec"), agent)  # noqa: S102
    server = start("--latency-ms", "500")
    async with agent["connect"](server.url) as client:
        assert client.protocol_version == "2026-07-28"
        annotations = {t.name: t.annotations for t in (await client.list_tools()).tools}
        assert annotations["open_ticket"].idempotent_hint is True, "the extension is declared"
        # Every attempt but the last few times out; the retries join the first call, then
        # get its recorded result.
        opened = await agent["call"](client, "conv-42/msg-7", "open_ticket", {"title": "x"}, timeout=0.2, tries=10)
        assert not opened.is_error, text(opened)
        again = await agent["call"](client, "conv-42/msg-7", "open_ticket", {"title": "x"})
        assert again.structured_content == opened.structured_content
        listed = await agent["call"](client, "conv-42/msg-7", "list_tickets", {})
        assert len(listed.structured_content["tickets"]) == 1
    # Reconnected, the agent (its `Idem-Client-Id`) is still the same client: a retry replays.
    async with agent["connect"](server.url) as client:
        again = await agent["call"](client, "conv-42/msg-7", "open_ticket", {"title": "x"})
        assert again.structured_content == opened.structured_content
        listed = await agent["call"](client, "conv-42/msg-7", "list_tickets", {})
        assert len(listed.structured_content["tickets"]) == 1
    # Restarted (the module run again, as a new agent process would), the agent is still the
    # same client: its retry replays. An id made at each start would open a second ticket.
    restarted: dict = {}
    exec(compile(docs_example("python"), "docs/adopting.md", "exec"), restarted)  # noqa: S102
    async with restarted["connect"](server.url) as client:
        again = await restarted["call"](client, "conv-42/msg-7", "open_ticket", {"title": "x"})
        assert again.structured_content == opened.structured_content
        listed = await restarted["call"](client, "conv-42/msg-7", "list_tickets", {})
        assert len(listed.structured_content["tickets"]) == 1, "no second ticket after a restart"
