// Connections from the official MCP TypeScript SDK to examples/mcp_server.rs. The SDK (1.32)
// speaks protocol 2025-11-25, so the transports are stdio, streamable HTTP with sessions, and
// streamable HTTP from a server run without sessions. Over HTTP the client names itself with
// an `Idem-Client-Id` header (which wins over the session).

import { spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { existsSync } from "node:fs";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

export const TRANSPORTS = ["stdio", "http", "http-stateless"];
export const EXTENSION = "idem/idempotency";
export const TURN_ID = "idem/turnId";
export const KEY = "idempotencyKey";
export const CLIENT_ID = "idem/clientId";

export function serverBinary() {
  const path = process.env.IDEM_MCP_SERVER;
  if (!path || !existsSync(path)) {
    throw new Error("set IDEM_MCP_SERVER to the built example server (see scripts/mcp-client-tests.sh)");
  }
  return path;
}

/** The example server for `transport` with extra arguments; `close()` stops what it started. */
export async function start(transport, ...args) {
  const server = { transport, args, log: "", processes: [], clients: [] };
  server.stateless = transport === "http-stateless";
  if (transport.startsWith("http")) {
    const httpArgs = ["--http", "127.0.0.1:0", ...args, ...(server.stateless ? ["--stateless"] : [])];
    const child = spawn(serverBinary(), httpArgs, { stdio: ["ignore", "ignore", "pipe"] });
    server.processes.push(child);
    server.url = await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no address in 20 s: ${server.log}`)), 20_000);
      child.stderr.on("data", (chunk) => {
        server.log += chunk;
        const found = /listening on (http:\/\/\S+)\n/.exec(server.log); // the whole line
        if (found) {
          clearTimeout(timer);
          resolve(found[1]);
        }
      });
      child.on("exit", () => reject(new Error(`the server exited: ${server.log}`)));
    });
  }
  /** A connected client; `declare`: it declares the idem extension; `clientId`: its
   * Idem-Client-Id header over HTTP ("fresh": a new UUID, null: none). */
  server.client = async ({ declare = false, clientId = "fresh" } = {}) => {
    const capabilities = declare ? { extensions: { [EXTENSION]: {} } } : {};
    const client = new Client({ name: "idem-tests", version: "0" }, { capabilities });
    let transport;
    if (server.url) {
      const headers = clientId === null ? {} : { "Idem-Client-Id": clientId === "fresh" ? randomUUID() : clientId };
      transport = new StreamableHTTPClientTransport(new URL(server.url), { requestInit: { headers } });
    } else {
      transport = new StdioClientTransport({ command: serverBinary(), args, stderr: "pipe" });
      transport.stderr.on("data", (chunk) => { server.log += chunk; });
    }
    await client.connect(transport);
    server.clients.push(client);
    return client;
  };
  server.close = async () => {
    for (const client of server.clients) await client.close();
    for (const child of server.processes) child.kill();
  };
  return server;
}

export const text = (result) => result.content?.[0]?.text ?? "";
export const forAModel = (message) => !message.includes("`") && !message.includes("Turn::");

export async function tickets(client) {
  const result = await client.callTool({ name: "list_tickets", arguments: {} });
  return result.structuredContent.tickets;
}
