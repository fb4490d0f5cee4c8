// The client matrix's TypeScript SDK client (@modelcontextprotocol/sdk 1.32.2, the newest 1.x,
// from .interop/clients): the flow of flow.py, feature for feature, with the SDK's Client and
// StreamableHTTPClientTransport, declaring sampling, elicitation and roots. Same spec
// (matrix_spec.json), same JSON output, so matrix.py can put it beside the others.
// With MATRIX_TS_SDK=2, the same flow with the SDK's v2 client (@modelcontextprotocol/client
// 2.3.1) in `versionNegotiation: {mode: 'auto'}`: server/discover, then initialize where the
// server is not of 2026-07-28 (the matrix's `typescript-sdk-2`).
//
//   node ts_client.cjs --url URL --target direct:py|mcpgate --out FILE   (CLIENTS_DIR: .interop/clients)
//
// resume: the SDK resumes a POST stream that ends before its response (GET + Last-Event-ID,
// SEP-1699). A fetch wrapper cuts the stream of one tools/call after its first progress
// event, as a dropped connection would, and the SDK must get the rest by itself.
"use strict";

const fs = require("node:fs");
const path = require("node:path");
const { createRequire } = require("node:module");

const sdk = createRequire(path.join(process.env.CLIENTS_DIR, "package.json"));
const V2 = process.env.MATRIX_TS_SDK === "2";
const CLIENT_NAME = V2 ? "typescript-sdk-2" : "typescript-sdk";
const { Client, StreamableHTTPClientTransport } = V2
  ? sdk("@modelcontextprotocol/client")
  : {
      Client: sdk("@modelcontextprotocol/sdk/client/index.js").Client,
      StreamableHTTPClientTransport: sdk("@modelcontextprotocol/sdk/client/streamableHttp.js").StreamableHTTPClientTransport,
    };
const types = V2 ? {} : sdk("@modelcontextprotocol/sdk/types.js");
// v1 names a handler by its zod schema, v2 by its method.
const handlerKey = (schema, method) => (V2 ? method : types[schema]);

const SPEC = JSON.parse(fs.readFileSync(path.join(__dirname, "matrix_spec.json"), "utf8"));
const FEATURES = ["initialize", "ping", "tools/list", "prompts/list", "resources/list", "templates/list", "tools/call",
  "prompts/get", "resources/read", "cacheScope", "progress", "logging", "sampling", "elicitation", "roots", "subscribe",
  "list_changed", "GET stream", "resume", "cancel", "DELETE"];
const STEP_TIMEOUT = 20000;

class NotAvailable extends Error {}

function arg(name) {
  const i = process.argv.indexOf(name);
  if (i < 0 || i + 1 >= process.argv.length) throw new Error(`missing ${name}`);
  return process.argv[i + 1];
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const short = (s, n = 100) => {
  s = String(s).split(/\s+/).join(" ");
  return s.length <= n ? s : s.slice(0, n - 3) + "...";
};

function valueFor(prop) {
  if (prop.enum) return prop.enum[0];
  if (prop.oneOf) return prop.oneOf[0].const;
  switch (prop.type) {
    case "string":
      return { email: "interop@example.com", uri: "https://example.com", date: "2000-01-01" }[prop.format] || "Interop";
    case "integer":
      return Math.trunc(prop.minimum ?? 7);
    case "number":
      return prop.minimum ?? 1.5;
    case "boolean":
      return true;
    case "array":
      return [valueFor(prop.items || {})];
    default:
      return "Interop";
  }
}
// flow.fill_form: every default, and a value for each required field.
function fillForm(schema) {
  const required = new Set(schema.required || []);
  const content = {};
  for (const [name, prop] of Object.entries(schema.properties || {})) {
    if ("default" in prop) content[name] = prop.default;
    else if (required.has(name)) content[name] = valueFor(prop);
  }
  return content;
}

const url = arg("--url");
const target = arg("--target");
const out = arg("--out");
const through = target === "mcpgate";
const servers = through ? Object.keys(SPEC.servers) : [target.split(":")[1]];
const results = Object.fromEntries(FEATURES.map((f) => [f, {}]));
const notes = [];
const callbacks = { sampling: 0, elicitation: 0, roots: 0 };
let cutNext = null; // the tool whose POST stream the fetch wrapper cuts (resume)
const cuts = [];

// Cuts the SSE answer of a tools/call of `cutNext` after its first progress event with an id.
function cuttingFetch(input, init) {
  const body = init && typeof init.body === "string" ? init.body : "";
  const cut = cutNext && init && init.method === "POST" && body.includes(`"name":"${cutNext}"`);
  return fetch(input, init).then((response) => {
    const type = response.headers.get("content-type") || "";
    if (!cut || !type.includes("text/event-stream") || !response.body) {
      if (cut) cuts.push(`not cut: the answer was ${response.status} ${type}`);
      return response;
    }
    cutNext = null;
    const reader = response.body.getReader();
    const encoder = new TextEncoder();
    let pending = "";
    const stream = new ReadableStream({
      async pull(controller) {
        const { value, done } = await reader.read();
        if (done) {
          if (pending) controller.enqueue(encoder.encode(pending));
          return controller.close();
        }
        pending += Buffer.from(value).toString().replace(/\r\n/g, "\n");
        const events = pending.split("\n\n");
        pending = events.pop(); // an event not complete yet
        for (const event of events) {
          controller.enqueue(encoder.encode(event + "\n\n"));
          if (/^id:/m.test(event) && event.includes("notifications/progress")) {
            cuts.push(`cut after event ${(/^id:\s*(.*)$/m.exec(event) || [])[1]}`);
            await reader.cancel(); // the connection is gone, as far as the server can tell
            controller.error(new Error("connection dropped by the test"));
            return;
          }
        }
      },
    });
    return new Response(stream, { status: response.status, statusText: response.statusText, headers: response.headers });
  });
}

function record(feature, server, ok, detail) {
  results[feature][server] = { ok, detail: short(detail, 300) };
  const mark = ok === true ? "ok  " : ok === false ? "FAIL" : "n/a ";
  console.log(`  ${mark} ${feature.padEnd(15)} ${server.padEnd(11)} ${short(detail, 110)}`);
}

async function step(feature, server, body) {
  let timer;
  try {
    const timeout = new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`timed out after ${STEP_TIMEOUT / 1000} s`)), STEP_TIMEOUT);
    });
    const [ok, detail] = await Promise.race([body(), timeout]);
    record(feature, server, ok, detail);
  } catch (e) {
    if (e instanceof NotAvailable) record(feature, server, null, e.message);
    else record(feature, server, false, `${e.name}: ${e.message}`);
  } finally {
    clearTimeout(timer);
  }
}

const client = new Client(
  { name: "interop-matrix-ts", version: "1.0" },
  {
    capabilities: { sampling: {}, elicitation: { form: {} }, roots: { listChanged: true } },
    ...(V2 ? { versionNegotiation: { mode: "auto" } } : {}),
  },
);
client.setRequestHandler(handlerKey("CreateMessageRequestSchema", "sampling/createMessage"), async () => {
  callbacks.sampling++;
  return { role: "assistant", content: { type: "text", text: SPEC.sampled }, model: "interop", stopReason: "endTurn" };
});
client.setRequestHandler(handlerKey("ElicitRequestSchema", "elicitation/create"), async (request) => {
  callbacks.elicitation++;
  const schema = request.params.requestedSchema;
  return schema ? { action: "accept", content: fillForm(schema) } : { action: "decline" };
});
client.setRequestHandler(handlerKey("ListRootsRequestSchema", "roots/list"), async () => {
  callbacks.roots++;
  return { roots: [{ uri: SPEC.root_uri, name: "interop-root" }] };
});
client.fallbackNotificationHandler = async (n) => {
  notes.push([n.method, n.params || {}]);
};
for (const [schema, method] of [
  ["LoggingMessageNotificationSchema", "notifications/message"],
  ["ResourceUpdatedNotificationSchema", "notifications/resources/updated"],
]) {
  client.setNotificationHandler(handlerKey(schema, method), async (n) => notes.push([n.method, n.params || {}]));
}
const transport = new StreamableHTTPClientTransport(new URL(url), { fetch: cuttingFetch });

const name = (server, n) => (through ? `${server}__${n}` : n);
let dynCount = 0;
// flow.py's Flow.args: `@dyn` a new name each time, `@run` a tag of this run (clients run at once).
const fresh = { "@dyn": () => `dyn_ts_${Date.now() % 100000}_${dynCount++}`, "@run": () => `dyn_ts_${process.pid}` };
const args = (a) => Object.fromEntries(Object.entries(a).map(([k, v]) => [k, fresh[v] ? fresh[v]() : v]));
const textOf = (result) => (result.content || []).filter((c) => c.type === "text").map((c) => c.text).join("\n");

async function call(tool, a, options = {}) {
  const callOptions = { timeout: STEP_TIMEOUT, ...options };
  const result = V2
    ? await client.callTool({ name: tool, arguments: a }, callOptions)
    : await client.callTool({ name: tool, arguments: a }, undefined, callOptions);
  if (result.isError) throw new Error(`isError: ${textOf(result)}`);
  return textOf(result);
}
const count = (method) => notes.filter(([m]) => m === method).length;
async function waitFor(predicate, ms = 5000) {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    const found = predicate();
    if (found) return found;
    await sleep(50);
  }
  return null;
}

const owner = (uri) => ({ demo: "everything", py: "py", fm: "fm" })[uri.split(":")[0]] || "?";
const LISTS = {
  "tools/list": ["tools", (c) => client.listTools(c), "tools", "name"],
  "prompts/list": ["prompts", (c) => client.listPrompts(c), "prompts", "name"],
  "resources/list": ["resources", (c) => client.listResources(c), "resources", "uri"],
  "templates/list": ["templates", (c) => client.listResourceTemplates(c), "resourceTemplates", "uriTemplate"],
};
const lists = {};

async function toggled(server, s, method, needle) {
  const before = notes.length;
  const text = await call(name(server, s.tool), args(s.args));
  const got = await waitFor(() =>
    notes.slice(before).find(([m, p]) => m === method && (needle == null || JSON.stringify(p).includes(needle))),
  );
  if (s.toggle) await call(name(server, s.tool), s.args);
  return [!!got, `${method}: ${got ? short(JSON.stringify(got[1]), 70) : "never came"}; ${short(text, 30)}`];
}

async function roundTrip(server, s, kind) {
  const before = callbacks[kind];
  const text = await call(name(server, s.tool), s.args);
  const asked = callbacks[kind] - before;
  return [text.includes(s.expect) && (asked >= 1 || kind === "roots"), `${kind} callback ran ${asked}x; ${short(text, 70)}`];
}

const checks = {
  async ping() {
    try {
      await client.ping();
    } catch (e) {
      // The v2 client does not send it in 2026-07-28, which left it out: nothing was asked.
      if (/not supported by the negotiated protocol version/.test(String(e.message))) throw new NotAvailable(e.message);
      throw e;
    }
    return [true, "answered"];
  },
  // flow.py's f_cache: the read's cacheScope must be what the server gives the resource.
  async cacheScope(server, s) {
    const r = await client.readResource({ uri: s.cache.uri });
    if (!("cacheScope" in r)) throw new NotAvailable("no cacheScope in this era");
    return [r.cacheScope === s.cache.scope, `cacheScope '${r.cacheScope}' (the server's: '${s.cache.scope}')`];
  },
  async "tools/call"(server, s) {
    const text = await call(name(server, s.call.tool), args(s.call.args));
    return [text.includes(s.call.expect), short(text, 80)];
  },
  async "prompts/get"(server, s) {
    const r = await client.getPrompt({ name: name(server, s.prompt.name), arguments: s.prompt.args });
    const text = r.messages.map((m) => m.content.text || "").join(" ");
    return [text.includes(s.prompt.expect), short(text, 80)];
  },
  async "resources/read"(server, s) {
    const r = await client.readResource({ uri: s.read.uri });
    const text = r.contents.map((c) => c.text || "").join(" ");
    return [text.includes(s.read.expect), short(text, 80)];
  },
  async progress(server, s) {
    const seen = [];
    const text = await call(name(server, s.progress.tool), s.progress.args, { onprogress: (p) => seen.push(p.progress) });
    const increasing = seen.every((v, i) => i === 0 || seen[i - 1] < v);
    return [seen.length === s.progress.steps && increasing, `${seen.length} progress [${seen}] (want ${s.progress.steps}); ${short(text, 40)}`];
  },
  async logging(server, s) {
    let level = "setLevel ok";
    try {
      await client.setLoggingLevel("debug");
    } catch (e) {
      if (!/not found|-32601/i.test(String(e.message))) return [false, `logging/setLevel failed: ${e.message}`];
      level = `setLevel: ${short(e.message, 40)}`;
    }
    const [ok, detail] = await toggled(server, s.logging, "notifications/message", s.logging.expect);
    return [ok, `${level}; ${detail}`];
  },
  sampling: (server, s) => roundTrip(server, s.sampling, "sampling"),
  elicitation: (server, s) => roundTrip(server, s.elicitation, "elicitation"),
  roots: (server, s) => roundTrip(server, s.roots, "roots"),
  async subscribe(server, s) {
    const method = "notifications/resources/updated";
    const before = count(method);
    await client.subscribeResource({ uri: s.subscribe.uri });
    await call(name(server, s.subscribe.tool), s.subscribe.args);
    const arrived = await waitFor(() => count(method) > before);
    await call(name(server, s.subscribe.tool), s.subscribe.args);
    await client.unsubscribeResource({ uri: s.subscribe.uri });
    return [!!arrived, `${method} ${arrived ? "arrived" : "never came"}`];
  },
  list_changed: (server, s) => toggled(server, s.list_changed, s.list_changed.notification, null),
  "GET stream": (server, s) => toggled(server, s.get_stream, s.get_stream.notification, null),
  async resume(server, s) {
    const tool = name(server, s.resume.tool);
    cutNext = tool;
    cuts.length = 0;
    const seen = [];
    // A short timeout: the call takes 2 s, and a stream that is not resumed never ends.
    const text = await call(tool, s.resume.args, { onprogress: (p) => seen.push(p.progress), timeout: 8000 });
    cutNext = null;
    const ok = cuts.some((c) => c.startsWith("cut")) && /completed/i.test(text) && seen.length === s.resume.steps;
    return [ok, `${cuts.join("; ") || "nothing cut"}; then ${seen.length} progress [${seen}]; ${short(text, 60)}`];
  },
  async cancel(server, s) {
    const countTool = name(server, s.cancel.count_tool);
    const countArgs = args(s.cancel.count_args);
    const before = await call(countTool, countArgs);
    const controller = new AbortController();
    const pending = call(name(server, s.cancel.tool), args(s.cancel.args), { signal: controller.signal }).catch(() => null);
    await sleep(500);
    controller.abort("the client gave up"); // the SDK sends notifications/cancelled
    await pending;
    let after = before;
    const deadline = Date.now() + 3000;
    while (Date.now() < deadline && after === before) {
      await sleep(100);
      after = await call(countTool, countArgs);
    }
    return [after !== before, `server's count of cancelled calls: '${before}' -> '${after}'`];
  },
};
const KEYS = {
  ping: "ping", cacheScope: "cache",
  "tools/call": "call", "prompts/get": "prompt", "resources/read": "read", progress: "progress", logging: "logging",
  sampling: "sampling", elicitation: "elicitation", roots: "roots", subscribe: "subscribe",
  list_changed: "list_changed", "GET stream": "get_stream", resume: "resume", cancel: "cancel",
};

async function main() {
  const started = Date.now();
  try {
    await client.connect(transport);
    const info = client.getServerVersion();
    for (const server of servers) {
      const version = V2 ? client.getNegotiatedProtocolVersion() : transport.protocolVersion;
      record("initialize", server, true, `protocol ${version}, server ${info && info.name}`);
    }
  } catch (e) {
    for (const server of servers) record("initialize", server, false, `${e.name}: ${e.message}`);
    return;
  }
  // MATRIX_OPEN_ONLY=1 (the opening sequences): initialize and list the tools, nothing else.
  for (const feature of process.env.MATRIX_OPEN_ONLY ? ["tools/list"] : FEATURES.slice(1)) {
    for (const server of servers) {
      const s = SPEC.servers[server];
      if (LISTS[feature]) {
        const [kind, fetchPage, field, key] = LISTS[feature];
        if (!(s[kind] || []).length) continue;
        await step(feature, server, async () => {
          if (!lists[kind]) { // through mcpgate: one walk of the merged list serves the three servers
            const items = [];
            let cursor;
            let pages = 0;
            do {
              const page = await fetchPage(cursor ? { cursor } : undefined);
              items.push(...page[field].map((i) => i[key]));
              cursor = page.nextCursor;
              pages++;
            } while (cursor && pages < 50);
            lists[kind] = { items, pages };
          }
          let mine = lists[kind].items;
          if (through && (kind === "tools" || kind === "prompts")) {
            mine = mine.filter((i) => i.startsWith(`${server}__`)).map((i) => i.slice(server.length + 2));
          } else if (through) {
            mine = mine.filter((i) => owner(i) === server);
          }
          const listed = [...new Set(mine.filter((i) => !i.startsWith("dyn_")))].sort();
          (results._lists = results._lists || {})[`${kind}:${server}`] = listed;
          const missing = s[kind].filter((w) => !mine.includes(w));
          return [missing.length === 0, `${listed.length} in ${lists[kind].pages} page(s)` + (missing.length ? `; missing ${missing}` : "")];
        });
      } else if (feature !== "DELETE" && s[KEYS[feature]]) {
        await step(feature, server, () => checks[feature](server, s));
      }
    }
  }
  console.log(`  flow took ${((Date.now() - started) / 1000).toFixed(1)} s`);
}

main()
  .catch((e) => {
    console.log(`  the client failed: ${e.stack || e}`);
    (results._error = results._error || {}).client = { ok: false, detail: String(e) };
  })
  .then(async () => {
    // What an SDK application does to end a session: terminateSession() sends the DELETE
    // (close() alone does not), then close().
    try {
      if (transport.sessionId) await transport.terminateSession();
      await client.close();
    } catch (e) {
      console.log(`  close: ${e.name}: ${e.message}`);
      (results._error = results._error || {}).close = { ok: false, detail: `${e.name}: ${e.message}` };
    }
    fs.writeFileSync(out, JSON.stringify({ client: CLIENT_NAME, target, features: results }, null, 1));
    process.exit(0);
  });
