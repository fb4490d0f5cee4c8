// The TypeScript SDK's 2026-07-28 client (@modelcontextprotocol/client, from .interop/clients)
// through mcpgate, in front of the servers of modern.sh (`py`: both eras, spoken to in the session
// era; `pym`: 2026-07-28 only). Pinned to 2026-07-28 (`versionNegotiation: {mode: {pin}}`), then
// `mode: 'auto'`. Per server: call, progress, sampling, elicitation, roots (answered through the
// SDK's input_required auto-fulfilment), list_changed (`client.listen`), cancel (an aborted call).
// Writes [{name, ok, detail}] to --out, as modern_checks.py does, for report.py.
//
//   node ts_modern_client.cjs --url URL --out FILE   (CLIENTS_DIR: .interop/clients)
"use strict";

const fs = require("node:fs");
const path = require("node:path");
const { createRequire } = require("node:module");

const sdk = createRequire(path.join(process.env.CLIENTS_DIR, "package.json"));
const { Client, StreamableHTTPClientTransport } = sdk("@modelcontextprotocol/client");

const MODERN = "2026-07-28";
const SERVERS = ["py", "pym"];
const SAMPLED = "interop-sampled-text";
const ROOT_URI = "file:///tmp/interop-root";
const STEP_TIMEOUT = 20000;
const { RESULTS, arg, record, within, check: checkWithin } = require("./checks.cjs");
const check = (name, body) => checkWithin(STEP_TIMEOUT, name, body);
const counts = { sampling: 0, elicitation: 0, roots: 0, listChanged: 0 };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const textOf = (result) =>
  (result?.content ?? []).filter((c) => c.type === "text").map((c) => c.text).join("\n");

function newClient(url, mode) {
  const client = new Client(
    { name: "mcpgate-interop-ts", version: "1.0" },
    {
      capabilities: { sampling: {}, elicitation: {}, roots: { listChanged: true } },
      versionNegotiation: { mode },
    },
  );
  client.setRequestHandler("sampling/createMessage", async () => {
    counts.sampling += 1;
    return { model: "interop-model", role: "assistant", stopReason: "endTurn", content: { type: "text", text: SAMPLED } };
  });
  client.setRequestHandler("elicitation/create", async () => {
    counts.elicitation += 1;
    return { action: "accept", content: { name: "Interop" } };
  });
  client.setRequestHandler("roots/list", async () => {
    counts.roots += 1;
    return { roots: [{ uri: ROOT_URI, name: "interop-root" }] };
  });
  client.setNotificationHandler("notifications/tools/list_changed", async () => {
    counts.listChanged += 1;
  });
  return { client, transport: new StreamableHTTPClientTransport(new URL(url)) };
}

async function call(client, name, args, options) {
  const result = await client.callTool({ name, arguments: args }, options);
  if (result.isError) throw new Error(`isError: ${textOf(result).slice(0, 200)}`);
  return textOf(result);
}

async function features(client, era, server) {
  const p = `${server}__`;
  const label = (f) => `TypeScript ${era} client -> ${server} server: ${f}`;
  await client.listTools();
  await check(label("call"), async () => {
    const text = await call(client, `${p}echo`, { text: "ts" });
    return [text.endsWith("echo: ts"), text];
  });
  await check(label("progress"), async () => {
    const seen = [];
    const text = await call(client, `${p}progress`, { steps: 3 }, { onprogress: (pr) => seen.push(pr.progress) });
    return [seen.join(",") === "1,2,3" && text.includes("done after 3"), `progress [${seen}]; ${text}`];
  });
  for (const [feature, tool, args, needle, key] of [
    ["sampling", "sample", { prompt: "hello" }, SAMPLED, "sampling"],
    ["elicitation", "ask", {}, "elicited: Interop", "elicitation"],
    ["roots", "roots", {}, ROOT_URI, "roots"],
  ]) {
    await check(label(feature), async () => {
      const before = counts[key];
      const text = await call(client, `${p}${tool}`, args);
      return [text.includes(needle) && counts[key] === before + 1, `${text} (handler ran ${counts[key] - before}x)`];
    });
  }
  await check(label("list_changed"), async () => {
    const name = `dyn_ts_${Math.random().toString(16).slice(2, 8)}`;
    const subscription = await client.listen({ toolsListChanged: true });
    try {
      const before = counts.listChanged;
      await call(client, `${p}add_tool`, { name });
      for (let i = 0; i < 50 && counts.listChanged === before; i++) await sleep(100);
      const came = counts.listChanged > before;
      const listed = (await client.listTools()).tools.some((t) => t.name === `${p}${name}`);
      const text = listed ? await call(client, `${p}${name}`, {}) : "";
      return [came && listed && text.includes("added at run time"), `list_changed ${came}; listed ${listed}; ${text}`];
    } finally {
      await subscription.close();
    }
  });
  await check(label("cancel"), async () => {
    const tag = Math.random().toString(16).slice(2, 10);
    const abort = new AbortController();
    const running = client.callTool({ name: `${p}cancellable`, arguments: { ms: 10000, tag } }, { signal: abort.signal });
    await sleep(500);
    abort.abort();
    await running.catch(() => {});
    let text = "";
    for (let i = 0; i < 50; i++) {
      text = await call(client, `${p}cancelled`, { tag });
      if (text.endsWith("cancelled: 1")) return [true, `the server saw the call cancelled: ${text}`];
      await sleep(100);
    }
    return [false, `after 5 s the server says ${JSON.stringify(text)}`];
  });
}

async function main() {
  const url = arg("--url");
  const out = arg("--out");
  for (const [mode, era] of [[{ pin: MODERN }, MODERN], ["auto", "auto"]]) {
    const { client, transport } = newClient(url, mode);
    try {
      await within(STEP_TIMEOUT, client.connect(transport), "connect");
      const version = client.getNegotiatedProtocolVersion?.() ?? transport.protocolVersion;
      record(`TypeScript client (versionNegotiation ${JSON.stringify(mode)}) through mcpgate`, version === MODERN,
        `protocol ${version}`);
      for (const server of SERVERS) {
        if (era === "auto") {
          await check(`TypeScript auto client -> ${server} server: call`, async () => {
            await client.listTools();
            const text = await call(client, `${server}__echo`, { text: "auto" });
            return [text.endsWith("echo: auto"), text];
          });
        } else {
          await features(client, era, server);
        }
      }
    } catch (e) {
      record(`TypeScript client (versionNegotiation ${JSON.stringify(mode)}) through mcpgate`, false,
        `${e?.name ?? "Error"}: ${e?.message ?? e}`);
    } finally {
      await client.close().catch(() => {});
    }
  }
  fs.writeFileSync(out, JSON.stringify(RESULTS, null, 1));
  const failed = RESULTS.filter((r) => !r.ok).length;
  console.log(`\nTypeScript 2026-07-28 checks: ${RESULTS.length - failed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
}

main().catch((e) => {
  console.error(e);
  process.exit(2);
});
