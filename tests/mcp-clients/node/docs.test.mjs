// The TypeScript agent of docs/adopting.md ("Agents in Python or TypeScript"), run as written
// against the example server over streamable HTTP.

import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, writeFileSync, rmSync } from "node:fs";
import { randomUUID } from "node:crypto";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { start } from "./support.mjs";

const here = dirname(fileURLToPath(import.meta.url));

function docsExample(language) {
  const docs = readFileSync(join(here, "..", "..", "..", "docs", "adopting.md"), "utf8");
  const found = new RegExp(`<!-- tests/mcp-clients: ${language} -->\\n\`\`\`\\w+\\n([\\s\\S]*?)\`\`\``).exec(docs);
  assert.ok(found, `docs/adopting.md has no ${language} example marked for the tests`);
  return found[1];
}

test("the documented agent retries a timed-out call and it runs once, across a reconnection too", async () => {
  // Written next to node_modules so that its imports resolve.
  const dir = mkdtempSync(join(here, ".docs-"));
  const file = join(dir, "agent.mjs");
  writeFileSync(file, docsExample("typescript"));
  process.env.AGENT_ID = randomUUID(); // the agent's configuration
  const server = await start("http", "--latency-ms", "500");
  try {
    const agent = await import(file);
    const client = await agent.connect(server.url);
    try {
      const { tools } = await client.listTools();
      const open = tools.find((tool) => tool.name === "open_ticket");
      assert.equal(open.annotations.idempotentHint, true, "the extension is declared");
      // The first attempts time out; the retries join the first call, then get its result.
      const opened = await agent.call(client, "conv-42/msg-7", "open_ticket", { title: "x" }, 200, 10);
      assert.equal(opened.isError, false);
      const again = await agent.call(client, "conv-42/msg-7", "open_ticket", { title: "x" });
      assert.deepEqual(again.structuredContent, opened.structuredContent);
      const listed = await agent.call(client, "conv-42/msg-7", "list_tickets", {});
      assert.equal(listed.structuredContent.tickets.length, 1);
    } finally {
      await client.close();
    }
    // Reconnected (a new HTTP session), the agent (its Idem-Client-Id) is the same client: its
    // retry is replayed.
    const reconnected = await agent.connect(server.url);
    try {
      const again = await agent.call(reconnected, "conv-42/msg-7", "open_ticket", { title: "x" });
      const listed = await agent.call(reconnected, "conv-42/msg-7", "list_tickets", {});
      assert.equal(listed.structuredContent.tickets.length, 1, "no second ticket");
      assert.equal(again.structuredContent.id, 1);
    } finally {
      await reconnected.close();
    }
    // Restarted (the module loaded again, as a new agent process would), the agent is still the
    // same client: its retry is replayed. An id made at each start would open a second ticket.
    const restartedFile = join(dir, "restarted.mjs");
    writeFileSync(restartedFile, docsExample("typescript"));
    const restarted = await import(restartedFile);
    const again = await restarted.connect(server.url);
    try {
      await restarted.call(again, "conv-42/msg-7", "open_ticket", { title: "x" });
      const listed = await restarted.call(again, "conv-42/msg-7", "list_tickets", {});
      assert.equal(listed.structuredContent.tickets.length, 1, "no second ticket after a restart");
    } finally {
      await again.close();
    }
  } finally {
    await server.close();
    rmSync(dir, { recursive: true, force: true });
  }
});
