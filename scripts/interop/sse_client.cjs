// The TypeScript SDK client (@modelcontextprotocol/sdk 1.32.2, from .interop/clients) against an
// mcpgate in front of two servers of the old HTTP+SSE transport (scripts/interop/sse.sh):
// server-everything in `sse` mode and a Python SDK server on `sse_app`. One session, declaring
// sampling and roots: a call of each, progress from server-everything, sampling from both. It
// closes its transport without terminateSession(), as many applications do: no DELETE, so the
// session is left to mcpgate's idle eviction (the step counts what that closes).
//
//   node sse_client.cjs --url URL --json OUT   (CLIENTS_DIR: .interop/clients)
"use strict";

const fs = require("node:fs");
const path = require("node:path");
const { createRequire } = require("node:module");

const sdk = createRequire(path.join(process.env.CLIENTS_DIR, "package.json"));
const { Client } = sdk("@modelcontextprotocol/sdk/client/index.js");
const { StreamableHTTPClientTransport } = sdk("@modelcontextprotocol/sdk/client/streamableHttp.js");
const types = sdk("@modelcontextprotocol/sdk/types.js");

const CALL_TIMEOUT = 20000;
const SAMPLED = "sampled for the TypeScript client";

function arg(name) {
  const i = process.argv.indexOf(name);
  if (i < 0 || i + 1 >= process.argv.length) throw new Error(`missing ${name}`);
  return process.argv[i + 1];
}
const textOf = (result) => (result.content || []).filter((c) => c.type === "text").map((c) => c.text).join("\n");

const results = [];
function record(name, ok, detail = "") {
  results.push({ name, ok: !!ok, detail });
  console.log(`${ok ? "PASS" : "FAIL"}  ${name}${detail ? ` -- ${detail}` : ""}`);
}
async function check(name, body) {
  try {
    const [ok, detail] = await body();
    record(name, ok, detail);
  } catch (e) {
    record(name, false, `${e.name}: ${e.message}`);
  }
}

const client = new Client(
  { name: "mcpgate-interop-sse-ts", version: "1.0" },
  { capabilities: { sampling: {}, roots: { listChanged: true } } },
);
let sampled = 0;
client.setRequestHandler(types.CreateMessageRequestSchema, async () => {
  sampled++;
  return { role: "assistant", content: { type: "text", text: SAMPLED }, model: "interop", stopReason: "endTurn" };
});
client.setRequestHandler(types.ListRootsRequestSchema, async () => ({ roots: [{ uri: "file:///srv/ts", name: "ts" }] }));
const transport = new StreamableHTTPClientTransport(new URL(arg("--url")));
const call = (name, args, options = {}) =>
  client.callTool({ name, arguments: args }, undefined, { timeout: CALL_TIMEOUT, ...options });

async function main() {
  await client.connect(transport);
  const names = (await client.listTools()).tools.map((t) => t.name);
  const counts = ["everything", "pysse"].map((s) => names.filter((n) => n.startsWith(`${s}__`)).length);
  record("tools/list: the tools of both HTTP+SSE servers", counts.every((n) => n > 0), `everything ${counts[0]}, pysse ${counts[1]}`);
  await check("everything__echo", async () => {
    const text = textOf(await call("everything__echo", { message: "from ts" }));
    return [text === "Echo: from ts", text];
  });
  await check("pysse__echo", async () => {
    const text = textOf(await call("pysse__echo", { text: "from ts" }));
    return [text === "py echo: from ts", text];
  });
  await check("everything__trigger-long-running-operation: progress notifications reach the client", async () => {
    const seen = [];
    await call("everything__trigger-long-running-operation", { duration: 1, steps: 3 }, { onprogress: (p) => seen.push(p.progress) });
    return [seen.length === 3 && seen.every((v, i) => i === 0 || seen[i - 1] < v), `progress [${seen}]`];
  });
  for (const tool of ["everything__trigger-sampling-request", "pysse__sample"]) {
    await check(`${tool}: the server's sampling request, answered by the client`, async () => {
      const before = sampled;
      const text = textOf(await call(tool, { prompt: "hi" }));
      return [sampled === before + 1 && text.includes(SAMPLED), text.replace(/\s+/g, " ").slice(0, 100)];
    });
  }
}

main()
  .catch((e) => record("the TypeScript client ran to its end", false, `${e.name}: ${e.message}`))
  .then(async () => {
    // No terminateSession(): the session is left to mcpgate's idle eviction.
    await client.close().catch(() => {});
    fs.writeFileSync(arg("--json"), JSON.stringify(results, null, 1));
    const failed = results.filter((r) => !r.ok).length;
    console.log(`typescript client: ${results.length} checks, ${failed} failed`);
    process.exit(failed ? 1 : 0);
  });
