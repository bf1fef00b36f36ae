"""`examples/mcp_server.rs` driven by the official MCP Python SDK, over every transport
(see conftest.py): annotations, retries, client keys, sessions, timeouts, budgets."""

from __future__ import annotations

import anyio
import pytest
from conftest import CLIENT_ID, IDEM_EXTENSION, KEY, TURN_ID, for_a_model, text
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_REQUEST, REQUEST_TIMEOUT

pytestmark = pytest.mark.anyio

WRITES = {"open_ticket", "close_ticket", "comment"}


async def tickets(client) -> list[dict]:
    result = await client.call_tool("list_tickets", {})
    assert not result.is_error, text(result)
    return result.structured_content["tickets"]


async def hints(client) -> dict[str, object]:
    listed = await client.list_tools()
    return {tool.name: tool.annotations for tool in listed.tools}


async def test_the_server_declares_the_idempotency_extension(start):
    async with start().client() as client:
        extensions = client.server_capabilities.extensions or {}
        assert extensions[IDEM_EXTENSION] == {
            "turnIdMeta": TURN_ID,
            "idempotencyKeyMeta": KEY,
            "clientIdMeta": CLIENT_ID,
        }


async def test_a_client_that_sends_nothing_is_told_the_truth_by_the_hints(start):
    """No `_meta`, no extension: a plain retry is a new action, so no write is `idempotentHint`."""
    async with start().client() as client:
        annotations = await hints(client)
        assert set(annotations) == WRITES | {"list_tickets"}
        for name, hint in annotations.items():
            read_only = name == "list_tickets"
            assert hint.read_only_hint is read_only, name
            assert hint.destructive_hint is (not read_only), name
            assert hint.idempotent_hint is read_only, name
        # What the hint says: the same call twice, with nothing in `_meta`, acts twice.
        for _ in range(2):
            result = await client.call_tool("open_ticket", {"title": "printer"})
            assert not result.is_error, text(result)
        assert len(await tickets(client)) == 2


async def test_a_client_that_declares_the_extension_sees_idempotent_writes(start, transport):
    """Declaring the extension promises a turn id per user message: retries are then replayed.
    A server without sessions on protocol 2025-11-25 sees no client capabilities with a call
    (they went with an `initialize` another server instance answered), so it promises nothing."""
    known = transport != "http-2025-stateless"
    async with start().client(declare=True) as client:
        for name, hint in (await hints(client)).items():
            assert hint.idempotent_hint is (known or name == "list_tickets"), name


async def test_idempotent_hint_is_true_only_where_a_retry_is_deduplicated(start, transport):
    """A declaring client that names no action (no turn id, no key): where it was told
    `idempotentHint: true` its write is refused rather than run as a new action each time;
    where the server cannot see its capabilities (no session, 2025-11-25), it was told `false`
    and the write runs each time."""
    async with start().client(declare=True) as client:
        promised = (await hints(client))["open_ticket"].idempotent_hint
        refused = 0
        for _ in range(2):
            try:
                result = await client.call_tool("open_ticket", {"title": "no turn"})
                assert not result.is_error, text(result)
            except MCPError as error:
                assert error.error.data["idem"]["error"] == "no_turn_id", error
                refused += 1
        assert (promised, refused, len(await tickets(client))) in [(True, 2, 0), (False, 0, 2)]
        assert promised is (transport != "http-2025-stateless")


@pytest.mark.parametrize("meta", [{TURN_ID: "conv-1/turn-1"}, {KEY: "key-1"}], ids=["turn", "key"])
async def test_a_retry_with_the_same_meta_runs_once_and_returns_the_first_result(start, meta):
    async with start().client(declare=True) as client:
        first = await client.call_tool("open_ticket", {"title": "vpn down"}, meta=meta)
        retry = await client.call_tool("open_ticket", {"title": "vpn down"}, meta=meta)
        assert not first.is_error, text(first)
        assert retry.structured_content == first.structured_content
        assert text(retry) == text(first)
        assert len(await tickets(client)) == 1
        if TURN_ID in meta:
            # The next user message is a new turn: the same call is a new action.
            await client.call_tool("open_ticket", {"title": "vpn down"}, meta={TURN_ID: "conv-1/turn-2"})
            assert len(await tickets(client)) == 2


async def test_a_key_reused_with_other_arguments_is_refused_in_words_for_a_model(start):
    async with start().client(declare=True) as client:
        first = await client.call_tool("open_ticket", {"title": "one"}, meta={KEY: "key-42"})
        assert not first.is_error, text(first)
        reused = await client.call_tool("open_ticket", {"title": "two"}, meta={KEY: "key-42"})
        assert reused.is_error
        assert "different arguments" in text(reused), text(reused)
        # The key is the client's, not an argument: the model is not told to send a new one.
        assert "not one of your arguments" in text(reused), text(reused)
        assert "new idempotency key" not in text(reused), text(reused)
        assert for_a_model(text(reused)), text(reused)
        assert [t["title"] for t in await tickets(client)] == ["one"]


async def test_an_idempotency_key_among_the_arguments_is_refused(start):
    """It belongs in `_meta`; among the arguments it would do nothing, silently."""
    async with start().client() as client:
        misplaced = await client.call_tool("open_ticket", {"title": "t", KEY: "key-1"})
        assert misplaced.is_error
        assert "_meta" in text(misplaced) and for_a_model(text(misplaced)), text(misplaced)
        assert await tickets(client) == []


async def test_two_clients_reusing_a_turn_id_are_isolated(start, transport):
    """Two sessions (or two `Idem-Client-Id`s) of one server: neither replays the other's call."""
    if not transport.startswith("http"):
        pytest.skip("over stdio each client has a server process (and tickets) of its own")
    server = start()
    async with server.client(declare=True) as alice, server.client(declare=True) as bob:
        open_ = ("open_ticket", {"title": "same"})
        meta = {TURN_ID: "turn-1"}
        a = await alice.call_tool(*open_, meta=meta)
        b = await bob.call_tool(*open_, meta=meta)
        assert a.structured_content["id"] != b.structured_content["id"]
        # Each still replays its own retries.
        assert (await alice.call_tool(*open_, meta=meta)).structured_content == a.structured_content
        assert (await bob.call_tool(*open_, meta=meta)).structured_content == b.structured_content
        assert len(await tickets(alice)) == 2


async def test_one_client_id_is_one_namespace_across_connections(start, transport):
    """Over HTTP the client's `Idem-Client-Id` names it, with sessions too (the id wins over
    the session): a retry from a new connection with the same id is replayed."""
    server = start()
    if not server.http:
        pytest.skip("over stdio each client has a server process of its own")
    meta = {TURN_ID: "turn-1"}
    async with server.client(client_id="agent-7") as first:
        a = await first.call_tool("open_ticket", {"title": "x"}, meta=meta)
    async with server.client(client_id="agent-7") as again:
        assert (await again.call_tool("open_ticket", {"title": "x"}, meta=meta)).structured_content == (
            a.structured_content
        )
        assert len(await tickets(again)) == 1


async def test_a_restarted_stdio_server_replays_to_a_client_that_names_itself(start, transport, tmp_path):
    """Over stdio each connection is a server process of its own: a client that restarts it
    (a crash, a restarted run) and names itself with `_meta["idem/clientId"]` is replayed what
    the first process ran, from the SQLite file both use; one that does not name itself is a
    new client, and the action runs again."""
    server = start("--sqlite", str(tmp_path / "idem.db"))
    if server.http:
        pytest.skip("over HTTP the Idem-Client-Id header names the client")
    named = {TURN_ID: "turn-restart", CLIENT_ID: "agent-7"}
    async with server.client() as first:
        a = await first.call_tool("open_ticket", {"title": "printer"}, meta=named)
        assert not a.is_error, text(a)
        assert len(await tickets(first)) == 1
    async with server.client() as restarted:
        b = await restarted.call_tool("open_ticket", {"title": "printer"}, meta=named)
        assert b.structured_content == a.structured_content
        # The help desk of this process opened nothing: the first process's result was replayed.
        assert await tickets(restarted) == []
        unnamed = {TURN_ID: "turn-restart"}
        c = await restarted.call_tool("open_ticket", {"title": "printer"}, meta=unnamed)
        assert not c.is_error, text(c)
        assert len(await tickets(restarted)) == 1


async def test_stateless_http_without_a_client_id_refuses_writes_and_serves_reads(start):
    server = start()
    if not server.stateless:
        pytest.skip("a session (or a stdio process) names the client here")
    async with server.client(client_id=None) as client:
        with pytest.raises(MCPError) as refused:
            await client.call_tool("open_ticket", {"title": "x"}, meta={TURN_ID: "t"})
        assert refused.value.code == INVALID_REQUEST
        assert "Idem-Client-Id" in refused.value.error.message
        assert await tickets(client) == []
    assert "idem refused `open_ticket`" in server.log_text(), "logged on the server"


async def test_a_client_timeout_then_a_retry_runs_once(start, transport):
    server = start("--latency-ms", "600")
    meta = {TURN_ID: "conv-9/turn-1"}
    async with server.client(declare=True) as client:
        with pytest.raises(MCPError) as timed_out:
            await client.call_tool("open_ticket", {"title": "disk full"}, read_timeout_seconds=0.1, meta=meta)
        assert timed_out.value.code == REQUEST_TIMEOUT
        retry = await client.call_tool("open_ticket", {"title": "disk full"}, meta=meta)
        assert not retry.is_error, text(retry)
        assert retry.structured_content["id"] == 1
        await anyio.sleep(0.8)
        assert len(await tickets(client)) == 1, "one side effect"
    if transport.startswith("stdio"):
        # Over stdio the SDK tells the server (over HTTP it closes the response stream).
        assert "notifications/cancelled" in server.log_text()


async def test_past_the_per_key_budget_the_model_is_told_to_stop(start):
    async with start().client(declare=True) as client:
        meta = {TURN_ID: "t"}
        for _ in range(3):  # the default budget: three attempts per key and turn
            failed = await client.call_tool("open_ticket", {"title": " "}, meta=meta)
            assert failed.is_error and "needs a title" in text(failed), text(failed)
        stuck = await client.call_tool("open_ticket", {"title": " "}, meta=meta)
        assert stuck.is_error
        assert "Stop retrying" in text(stuck) and for_a_model(text(stuck)), text(stuck)


async def test_a_retry_of_a_succeeded_action_always_gets_its_result(start):
    async with start().client(declare=True) as client:
        meta = {TURN_ID: "t"}
        await client.call_tool("open_ticket", {"title": "x"}, meta=meta)
        results = [await client.call_tool("close_ticket", {"id": 1}, meta=meta) for _ in range(5)]
        assert [text(r) for r in results] == ["Closed ticket #1."] * 5
        assert not any(r.is_error for r in results)


async def test_the_turn_cap_counts_started_actions_and_says_so(start):
    """A turn-wide cap of 2: `a`, `a` (a retry), `b` made two changes; `c` is refused, saying 2."""
    async with start("--max-calls", "2").client(declare=True) as client:
        meta = {TURN_ID: "t"}
        a = await client.call_tool("open_ticket", {"title": "a"}, meta=meta)
        assert (await client.call_tool("open_ticket", {"title": "a"}, meta=meta)).structured_content == (
            a.structured_content
        )
        b = await client.call_tool("open_ticket", {"title": "b"}, meta=meta)
        assert not b.is_error, text(b)
        capped = await client.call_tool("open_ticket", {"title": "c"}, meta=meta)
        assert capped.is_error and for_a_model(text(capped)), text(capped)
        assert "2" in text(capped) and "3" not in text(capped), text(capped)
        # Past the cap, a retry of an action that succeeded still gets its result.
        again = await client.call_tool("open_ticket", {"title": "a"}, meta=meta)
        assert not again.is_error, text(again)
        assert again.structured_content == a.structured_content
        assert [t["title"] for t in await tickets(client)] == ["a", "b"]


async def test_a_tool_error_returned_as_ok_is_not_replayed(start):
    """`close_ticket` returns `Ok(CallToolResult::error(..))` for a missing ticket: the retry
    once the ticket exists must run, not replay the error."""
    async with start().client(declare=True) as client:
        meta = {TURN_ID: "t"}
        missing = await client.call_tool("close_ticket", {"id": 1}, meta=meta)
        assert missing.is_error and text(missing) == "There is no ticket #1."
        await client.call_tool("open_ticket", {"title": "x"}, meta=meta)
        retry = await client.call_tool("close_ticket", {"id": 1}, meta=meta)
        assert text(retry) == "Closed ticket #1.", text(retry)
