// examples/mcp_server.rs driven by the official MCP TypeScript SDK over each transport it
// speaks (see support.mjs): hints, retries, client keys, sessions, timeouts.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { ErrorCode, McpError } from "@modelcontextprotocol/sdk/types.js";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CLIENT_ID, EXTENSION, KEY, TRANSPORTS, TURN_ID, forAModel, start, text, tickets } from "./support.mjs";

const WRITES = ["close_ticket", "comment", "open_ticket"];
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function withServer(transport, args, body) {
  const server = await start(transport, ...args);
  try {
    await body(server);
  } finally {
    await server.close();
  }
}

async function hints(client) {
  const { tools } = await client.listTools();
  return Object.fromEntries(tools.map((tool) => [tool.name, tool.annotations]));
}

for (const transport of TRANSPORTS) {
  describe(transport, () => {
    test("the server declares the idempotency extension", () =>
      withServer(transport, [], async (server) => {
        const client = await server.client();
        const extensions = client.getServerCapabilities().extensions ?? {};
        assert.deepEqual(extensions[EXTENSION], { turnIdMeta: TURN_ID, idempotencyKeyMeta: KEY, clientIdMeta: CLIENT_ID });
      }));

    test("a client that sends nothing is told no write is idempotent, and a plain retry acts twice", () =>
      withServer(transport, [], async (server) => {
        const client = await server.client();
        const annotations = await hints(client);
        assert.deepEqual(Object.keys(annotations).sort(), [...WRITES, "list_tickets"].sort());
        for (const [name, hint] of Object.entries(annotations)) {
          const readOnly = name === "list_tickets";
          assert.equal(hint.readOnlyHint, readOnly, name);
          assert.equal(hint.destructiveHint, !readOnly, name);
          assert.equal(hint.idempotentHint, readOnly, name);
        }
        for (let i = 0; i < 2; i++) {
          await client.callTool({ name: "open_ticket", arguments: { title: "printer" } });
        }
        assert.equal((await tickets(client)).length, 2);
      }));

    test("a client that declares the extension sees idempotent writes", () =>
      withServer(transport, [], async (server) => {
        const client = await server.client({ declare: true });
        // Without sessions (2025-11-25), a call carries no capabilities: nothing is promised.
        for (const [name, hint] of Object.entries(await hints(client))) {
          assert.equal(hint.idempotentHint, !server.stateless || name === "list_tickets", name);
        }
      }));

    test("a retry with the same _meta runs once and returns the first result", () =>
      withServer(transport, [], async (server) => {
        const client = await server.client({ declare: true });
        const open = { name: "open_ticket", arguments: { title: "vpn down" }, _meta: { [TURN_ID]: "conv-1/turn-1" } };
        const first = await client.callTool(open);
        const retry = await client.callTool(open);
        assert.equal(first.isError, false);
        assert.deepEqual(retry.structuredContent, first.structuredContent);
        assert.equal((await tickets(client)).length, 1);
      }));

    test("a key reused with other arguments is refused in words for a model", () =>
      withServer(transport, [], async (server) => {
        const client = await server.client({ declare: true });
        const keyed = (title) => ({ name: "open_ticket", arguments: { title }, _meta: { [KEY]: "key-42" } });
        await client.callTool(keyed("one"));
        const reused = await client.callTool(keyed("two"));
        assert.equal(reused.isError, true);
        assert.match(text(reused), /different arguments/);
        // The key is the client's, not an argument: the model is not told to send a new one.
        assert.match(text(reused), /not one of your arguments/);
        assert.doesNotMatch(text(reused), /new idempotency key/);
        assert.ok(forAModel(text(reused)), text(reused));
        assert.deepEqual((await tickets(client)).map((t) => t.title), ["one"]);
      }));

    test("a client timeout then a retry runs once", () =>
      withServer(transport, ["--latency-ms", "600"], async (server) => {
        const client = await server.client({ declare: true });
        const open = { name: "open_ticket", arguments: { title: "disk full" }, _meta: { [TURN_ID]: "conv-9/turn-1" } };
        await assert.rejects(client.callTool(open, undefined, { timeout: 100 }), (error) => {
          assert.equal(error.code, ErrorCode.RequestTimeout);
          return true;
        });
        const retry = await client.callTool(open);
        assert.equal(retry.isError, false, text(retry));
        assert.equal(retry.structuredContent.id, 1);
        await sleep(800);
        assert.equal((await tickets(client)).length, 1, "one side effect");
        if (transport === "stdio") {
          assert.match(server.log, /notifications\/cancelled/, "the SDK told the server");
        }
      }));

    test("the idempotent hint is true only where a retry is deduplicated", () =>
      withServer(transport, [], async (server) => {
        // A declaring client that names no action (no turn id, no key): told `true`, its write
        // is refused rather than run as a new action; told `false` (no session, so no
        // capabilities seen), it runs each time.
        const client = await server.client({ declare: true });
        const promised = (await hints(client)).open_ticket.idempotentHint;
        let refused = 0;
        for (let i = 0; i < 2; i++) {
          try {
            const result = await client.callTool({ name: "open_ticket", arguments: { title: "no turn" } });
            assert.equal(result.isError, false, text(result));
          } catch (error) {
            assert.equal(error.data?.idem?.error, "no_turn_id", String(error));
            refused += 1;
          }
        }
        const outcome = [promised, refused, (await tickets(client)).length];
        assert.deepEqual(outcome, server.stateless ? [false, 0, 2] : [true, 2, 0]);
      }));

    if (transport.startsWith("http")) {
      test("one client id is one namespace across connections, with sessions too", () =>
        withServer(transport, [], async (server) => {
          const open = { name: "open_ticket", arguments: { title: "x" }, _meta: { [TURN_ID]: "turn-1" } };
          const first = await server.client({ clientId: "agent-7" });
          const a = await first.callTool(open);
          await first.close(); // reconnecting: a new session where the server keeps them
          const again = await server.client({ clientId: "agent-7" });
          assert.deepEqual((await again.callTool(open)).structuredContent, a.structuredContent);
          assert.equal((await tickets(again)).length, 1);
        }));

      test("two clients reusing a turn id are isolated", () =>
        withServer(transport, [], async (server) => {
          const alice = await server.client({ declare: true });
          const bob = await server.client({ declare: true });
          const open = { name: "open_ticket", arguments: { title: "same" }, _meta: { [TURN_ID]: "turn-1" } };
          const a = await alice.callTool(open);
          const b = await bob.callTool(open);
          assert.notEqual(a.structuredContent.id, b.structuredContent.id);
          assert.deepEqual((await alice.callTool(open)).structuredContent, a.structuredContent);
          assert.equal((await tickets(alice)).length, 2);
        }));
    }

    if (transport === "stdio") {
      test("a restarted stdio server replays to a client that names itself, and only to it", () => {
        const db = join(mkdtempSync(join(tmpdir(), "idem-node-")), "idem.db");
        return withServer(transport, ["--sqlite", db], async (server) => {
          const named = { [TURN_ID]: "turn-restart", [CLIENT_ID]: "agent-7" };
          const open = (meta) => ({ name: "open_ticket", arguments: { title: "printer" }, _meta: meta });
          const first = await server.client();
          const a = await first.callTool(open(named));
          assert.equal((await tickets(first)).length, 1);
          await first.close(); // the server process exits with its connection
          const restarted = await server.client();
          assert.deepEqual((await restarted.callTool(open(named))).structuredContent, a.structuredContent);
          assert.equal((await tickets(restarted)).length, 0, "replayed, not run again");
          await restarted.callTool(open({ [TURN_ID]: "turn-restart" }));
          assert.equal((await tickets(restarted)).length, 1, "a client that names no one is new");
        });
      });
    }

    if (transport === "http-stateless") {
      test("without a client id, a write is refused and a read served", () =>
        withServer(transport, [], async (server) => {
          const client = await server.client({ clientId: null });
          await assert.rejects(
            client.callTool({ name: "open_ticket", arguments: { title: "x" }, _meta: { [TURN_ID]: "t" } }),
            (error) => {
              assert.ok(error instanceof McpError);
              assert.equal(error.code, ErrorCode.InvalidRequest);
              assert.match(error.message, /Idem-Client-Id/);
              return true;
            },
          );
          assert.deepEqual(await tickets(client), []);
          assert.match(server.log, /idem refused `open_ticket`/, "logged on the server");
        }));
    }
  });
}
