// The TypeScript SDK client (@modelcontextprotocol/sdk 1.32.2, from .interop/clients) against an
// mcpgate whose servers are real stdio servers it starts itself (scripts/interop/stdio.sh):
// server-filesystem, server-memory ("sharing": "shared"), server-everything in stdio mode and
// mcp-server-time. One session, declaring sampling, elicitation and roots, with the checks of
// stdio_checks.py's session A; ends with DELETE (terminateSession).
//
//   node stdio_client.cjs --url URL --spec stdio_spec.json --roots DIR --json OUT   (CLIENTS_DIR: .interop/clients)
//
// The root is DIR/ts (made here), below the filesystem server's own directory DIR, which holds
// outside.txt. Prints one PASS/FAIL line per check; writes the rows for report.py (--json).
"use strict";

const fs = require("node:fs");
const path = require("node:path");
const { createRequire } = require("node:module");

const sdk = createRequire(path.join(process.env.CLIENTS_DIR, "package.json"));
const { Client } = sdk("@modelcontextprotocol/sdk/client/index.js");
const { StreamableHTTPClientTransport } = sdk("@modelcontextprotocol/sdk/client/streamableHttp.js");
const types = sdk("@modelcontextprotocol/sdk/types.js");

const CALL_TIMEOUT = 20000;
const NONCE = `ts${process.pid}x${Date.now() % 100000}`;

function arg(name) {
  const i = process.argv.indexOf(name);
  if (i < 0 || i + 1 >= process.argv.length) throw new Error(`missing ${name}`);
  return process.argv[i + 1];
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const short = (s, n = 110) => {
  s = String(s).split(/\s+/).join(" ");
  return s.length <= n ? s : s.slice(0, n - 3) + "...";
};
const textOf = (result) => (result.content || []).filter((c) => c.type === "text").map((c) => c.text).join("\n");

const url = arg("--url");
const spec = JSON.parse(fs.readFileSync(arg("--spec"), "utf8"));
const fsDir = arg("--roots");
const out = arg("--json");
const root = path.join(fsDir, "ts");
fs.mkdirSync(root, { recursive: true });

const results = [];
function record(name, ok, detail = "") {
  results.push({ name, ok: !!ok, detail });
  console.log(`${ok ? "PASS" : "FAIL"}  ${name}${detail ? ` -- ${detail}` : ""}`);
}
async function check(name, body) {
  let timer;
  try {
    const timeout = new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`timed out after ${CALL_TIMEOUT / 1000} s`)), CALL_TIMEOUT);
    });
    const [ok, detail] = await Promise.race([body(), timeout]);
    record(name, ok, detail);
  } catch (e) {
    record(name, false, `${e.name}: ${e.message}`);
  } finally {
    clearTimeout(timer);
  }
}

const asked = { sampling: 0, elicitation: 0, roots: 0 };
const client = new Client(
  { name: "mcpgate-interop-stdio-ts", version: "1.0" },
  { capabilities: { sampling: {}, elicitation: { form: {}, url: {} }, roots: { listChanged: true } } },
);
client.setRequestHandler(types.CreateMessageRequestSchema, async () => {
  asked.sampling++;
  return { role: "assistant", content: { type: "text", text: spec.sampled }, model: "interop", stopReason: "endTurn" };
});
client.setRequestHandler(types.ElicitRequestSchema, async (request) => {
  asked.elicitation++;
  const schema = request.params.requestedSchema;
  if (!schema) return { action: "decline" }; // URL mode
  // Every default, and the required `name`.
  const content = {};
  for (const [k, p] of Object.entries(schema.properties || {})) if ("default" in p) content[k] = p.default;
  for (const k of schema.required || []) if (!(k in content)) content[k] = k === "name" ? `Name ${NONCE}` : "Interop";
  return { action: "accept", content };
});
client.setRequestHandler(types.ListRootsRequestSchema, async () => {
  asked.roots++;
  return { roots: [{ uri: `file://${root}`, name: "interop-ts" }] };
});
const transport = new StreamableHTTPClientTransport(new URL(url));
const call = (name, args, options = {}) =>
  client.callTool({ name, arguments: args }, undefined, { timeout: CALL_TIMEOUT, ...options });

async function allowedDirs(want) {
  const deadline = Date.now() + 5000;
  for (;;) {
    const text = textOf(await call("filesystem__list_allowed_directories", {}));
    const dirs = text.split("\n").slice(1).map((l) => l.trim()).filter(Boolean);
    const ok = dirs.length === 1 && dirs[0] === want;
    if (ok || Date.now() > deadline) return [ok, `roots/list answered ${asked.roots}x; allowed: ${JSON.stringify(dirs)}`];
    await sleep(100);
  }
}

async function main() {
  const t0 = Date.now();
  await client.connect(transport);
  const info = client.getServerVersion();
  console.log(`INFO  initialized in ${((Date.now() - t0) / 1000).toFixed(2)} s`);
  record(
    "initialize through mcpgate (four stdio servers behind it)",
    info && info.name === "mcpgate" && !!transport.sessionId,
    `protocol ${transport.protocolVersion}, server ${info && info.name}, session ${transport.sessionId ? "yes" : "none"}`,
  );

  const names = [];
  let cursor;
  let pages = 0;
  do {
    const page = await client.listTools(cursor ? { cursor } : undefined);
    names.push(...page.tools.map((t) => t.name));
    cursor = page.nextCursor;
    pages++;
  } while (cursor && pages < 50);
  for (const [server, wanted] of Object.entries(spec.tools)) {
    const listed = names.filter((n) => n.startsWith(`${server}__`)).map((n) => n.slice(server.length + 2)).sort();
    const missing = wanted.filter((w) => !listed.includes(w));
    const extra = listed.filter((l) => !wanted.includes(l));
    record(
      `tools/list: the ${wanted.length} tools of \`${server}\` as its pinned version lists them`,
      !missing.length && !extra.length,
      `${listed.length} listed` + (missing.length ? `; missing ${missing}` : "") + (extra.length ? `; not expected ${extra}` : ""),
    );
  }
  const strays = names.filter((n) => !(n.split("__")[0] in spec.tools));
  record("tools/list: nothing else", !strays.length && new Set(names).size === names.length,
    strays.join(", ") || `${names.length} tools in ${pages} page(s)`);

  await check("filesystem: its roots/list request at start reached the client; it serves the client's root", () => allowedDirs(root));

  await check("filesystem: write_file, then read_text_file gives it back (and it is on disk)", async () => {
    const file = path.join(root, "note-ts.txt");
    const content = `written by the TypeScript SDK through mcpgate, ${NONCE}\nsecond line\n`;
    const wrote = await call("filesystem__write_file", { path: file, content });
    if (wrote.isError) return [false, `write_file: ${short(textOf(wrote))}`];
    const read = await call("filesystem__read_text_file", { path: file });
    const onDisk = fs.readFileSync(file, "utf8");
    return [!read.isError && textOf(read) === content && onDisk === content,
      `write_file: ${short(textOf(wrote), 50)}; read back ${textOf(read).length} chars, on disk ${onDisk.length}`];
  });

  await check("filesystem: a file outside the client's root (in its args' directory) is refused", async () => {
    const r = await call("filesystem__read_text_file", { path: path.join(fsDir, "outside.txt") });
    return [!!r.isError && /denied/i.test(textOf(r)), `isError ${!!r.isError}: ${short(textOf(r), 80)}`];
  });

  await check("memory: create_entities, then read_graph has the entity", async () => {
    const entity = `interop-ts-${NONCE}`;
    const made = await call("memory__create_entities", {
      entities: [{ name: entity, entityType: "interop", observations: ["made by the TypeScript client"] }],
    });
    const graph = await call("memory__read_graph", {});
    const found = ((graph.structuredContent || {}).entities || []).filter((e) => e.name === entity);
    const ok = !made.isError && !graph.isError && found.length === 1 &&
      JSON.stringify(found[0].observations) === JSON.stringify(["made by the TypeScript client"]);
    return [ok, `create_entities isError ${!!made.isError}; read_graph: ${JSON.stringify(found)}`];
  });

  await check("everything: echo", async () => {
    const r = await call("everything__echo", { message: `hello ${NONCE}` });
    return [textOf(r) === `Echo: hello ${NONCE}`, short(textOf(r))];
  });

  await check("time: get_current_time in Asia/Tokyo is now, at +09:00", async () => {
    const r = await call("time__get_current_time", { timezone: "Asia/Tokyo" });
    const got = r.structuredContent || {};
    const when = Date.parse(got.datetime || "");
    const skew = Math.abs(when - Date.now()) / 1000;
    const ok = !r.isError && got.timezone === "Asia/Tokyo" && /\+09:00$/.test(got.datetime || "") && skew < 120;
    return [ok, `${got.timezone} ${got.datetime} (${got.day_of_week}), ${skew.toFixed(0)} s from now`];
  });

  await check("everything: progress of trigger-long-running-operation (progressToken)", async () => {
    const seen = [];
    const r = await call("everything__trigger-long-running-operation", spec.progress, {
      onprogress: (p) => seen.push([p.progress, p.total]),
    });
    const values = seen.map(([v]) => v);
    const ok = seen.length === spec.progress.steps && values.every((v, i) => i === 0 || values[i - 1] < v) &&
      seen.every(([, t]) => t === spec.progress.steps) && /completed/i.test(textOf(r));
    return [ok, `${seen.length} progress [${values}] of ${seen.length ? seen[seen.length - 1][1] : null} (want ${spec.progress.steps}); ${short(textOf(r), 60)}`];
  });

  await check("everything: sampling/createMessage answered by the client", async () => {
    const before = asked.sampling;
    const r = await call("everything__trigger-sampling-request", { prompt: `say ${NONCE}` });
    const n = asked.sampling - before;
    return [n === 1 && textOf(r).includes(spec.sampled), `sampling callback ran ${n}x; ${short(textOf(r), 80)}`];
  });

  await check("everything: elicitation/create answered by the client", async () => {
    const before = asked.elicitation;
    const r = await call("everything__trigger-elicitation-request", {});
    const n = asked.elicitation - before;
    const text = textOf(r);
    return [n === 1 && text.includes("accept") && text.includes(`Name ${NONCE}`), `elicitation callback ran ${n}x; ${short(text, 80)}`];
  });

  await check("everything: roots (get-roots-list has the client's root)", async () => {
    const r = await call("everything__get-roots-list", {});
    return [textOf(r).includes(`file://${root}`), short(textOf(r), 100)];
  });
  console.log(`INFO  took ${((Date.now() - t0) / 1000).toFixed(1)} s; asked of the client ${JSON.stringify(asked)}`);
}

main()
  .catch((e) => record("the TypeScript client ran to its end", false, `${e.name}: ${e.message}`))
  .then(async () => {
    try {
      // What an SDK application does to end a session: terminateSession() sends the DELETE.
      if (transport.sessionId) await transport.terminateSession();
      await client.close();
    } catch (e) {
      record("the TypeScript client ended its session (DELETE)", false, `${e.name}: ${e.message}`);
    }
    fs.writeFileSync(out, JSON.stringify(results, null, 1));
    const failed = results.filter((r) => !r.ok).length;
    console.log(`typescript client: ${results.length} checks, ${failed} failed`);
    process.exit(failed ? 1 : 0);
  });
