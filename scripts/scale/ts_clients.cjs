// Clients of scripts/scale.sh with the official TypeScript SDK (@modelcontextprotocol/sdk 1.32.2,
// pinned in scripts/interop/clients/, installed into .interop/clients): N clients behind the load
// balancer, each calling a tool every 0.25 s while the SDK holds its GET stream, beside the Python
// ones of clients.py, which kill (or pause) an instance after --steady seconds. A failed call is
// counted and the client calls on with the same session; the session id the SDK holds is watched
// for a change (it adopts one from any answer). Prints one JSON report on stdout.
//
//   node ts_clients.cjs --url URL --clients 5 --steady 6 --after 8 --tool alpha__add   (CLIENTS_DIR)
"use strict";

const path = require("node:path");
const { createRequire } = require("node:module");

const sdk = createRequire(path.join(process.env.CLIENTS_DIR, "package.json"));
const { Client } = sdk("@modelcontextprotocol/sdk/client/index.js");
const { StreamableHTTPClientTransport } = sdk("@modelcontextprotocol/sdk/client/streamableHttp.js");

function arg(name, fallback) {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : fallback;
}

const URL_ = arg("url");
const CLIENTS = Number(arg("clients", "5"));
const STEADY = Number(arg("steady", "6")) * 1000;
const AFTER = Number(arg("after", "8")) * 1000;
const TOOL = arg("tool", "alpha__add");
const CALL_TIMEOUT = 10000;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function one(n, start, report) {
  const transport = new StreamableHTTPClientTransport(new URL(URL_));
  const client = new Client({ name: `scale-ts-${n}`, version: "1.0.0" });
  const me = { ids: new Set(), ok_before: 0, ok_after: 0, failed_before: [], failed_after: [] };
  report.push(me);
  try {
    await client.connect(transport);
  } catch (e) {
    me.failed_before.push(`connect: ${e.message}`.slice(0, 200));
    return;
  }
  me.ids.add(transport.sessionId);
  const deadline = start + STEADY + AFTER;
  while (Date.now() < deadline) {
    const after = Date.now() >= start + STEADY;
    try {
      const result = await client.callTool({ name: TOOL, arguments: { a: n, b: 1 } }, undefined, {
        timeout: CALL_TIMEOUT,
      });
      if (result.isError) throw new Error(JSON.stringify(result.content).slice(0, 200));
      if (after) me.ok_after += 1;
      else me.ok_before += 1;
    } catch (e) {
      (after ? me.failed_after : me.failed_before).push(`${e.name}: ${e.message}`.slice(0, 200));
    }
    me.ids.add(transport.sessionId);
    await sleep(250);
  }
  try {
    await transport.terminateSession();
  } catch (e) {
    me.failed_after.push(`DELETE: ${e.message}`.slice(0, 200));
  }
  await client.close().catch(() => {});
}

async function main() {
  const start = Date.now();
  const report = [];
  await Promise.all(Array.from({ length: CLIENTS }, (_, n) => sleep(20 * n).then(() => one(n, start, report))));
  const all = (f) => report.reduce((sum, r) => sum + f(r), 0);
  const failures = report.flatMap((r) => r.failed_before.concat(r.failed_after));
  console.log(
    JSON.stringify({
      clients: CLIENTS,
      kept_their_id: report.filter((r) => r.ids.size === 1).length,
      calls_before: all((r) => r.ok_before),
      calls_after: all((r) => r.ok_after),
      failed_before: all((r) => r.failed_before.length),
      failed_after: all((r) => r.failed_after.length),
      failures_sample: [...new Set(failures)].slice(0, 6),
    }),
  );
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
