// The schema check of the client matrix: every message mcpgate sent to a client during the run
// (as the tap recorded it, tap.py) is validated with the zod schemas that the official
// TypeScript SDK exports (@modelcontextprotocol/sdk 1.32.2, types.js): JSONRPCMessageSchema for
// each, then the schema of what it is: the result schema of the request's method, the error
// schema, ServerRequestSchema or ServerNotificationSchema. Then a few bad requests go to mcpgate
// (and to server-everything, for comparison) and their error answers are validated the same way.
//
//   node validate.cjs --taps DIR --match REGEX --mcpgate URL --everything URL --out FILE
//     DIR/<run>.jsonl: tap logs; the runs whose file name matches REGEX are mcpgate's. Answers on
//     other paths than /mcp (a client's OAuth discovery, say) are listed, not validated.
//   Prints every failure (where, the path in the message, the zod error); exit status 0.
"use strict";

const fs = require("node:fs");
const path = require("node:path");
const { createRequire } = require("node:module");

const sdk = createRequire(path.join(process.env.CLIENTS_DIR, "package.json"));
const T = sdk("@modelcontextprotocol/sdk/types.js");

function arg(name) {
  const i = process.argv.indexOf(name);
  if (i < 0 || i + 1 >= process.argv.length) throw new Error(`missing ${name}`);
  return process.argv[i + 1];
}

const RESULT = {
  initialize: T.InitializeResultSchema,
  ping: T.EmptyResultSchema,
  "tools/list": T.ListToolsResultSchema,
  "tools/call": T.CallToolResultSchema,
  "prompts/list": T.ListPromptsResultSchema,
  "prompts/get": T.GetPromptResultSchema,
  "resources/list": T.ListResourcesResultSchema,
  "resources/templates/list": T.ListResourceTemplatesResultSchema,
  "resources/read": T.ReadResourceResultSchema,
  "resources/subscribe": T.EmptyResultSchema,
  "resources/unsubscribe": T.EmptyResultSchema,
  "logging/setLevel": T.EmptyResultSchema,
  "completion/complete": T.CompleteResultSchema,
};

// Which schema a message from the server must satisfy, and its name.
function schemaFor(message, methodOf) {
  if ("method" in message && "id" in message) return ["ServerRequestSchema", T.ServerRequestSchema];
  if ("method" in message) return ["ServerNotificationSchema", T.ServerNotificationSchema];
  if ("error" in message) return ["JSONRPCErrorResponseSchema", T.JSONRPCErrorResponseSchema];
  const method = methodOf(message.id);
  if (method && RESULT[method]) {
    const name = Object.keys(T).find((k) => T[k] === RESULT[method]);
    return [`${name} (${method})`, RESULT[method]];
  }
  return [`ResultSchema (${method || "unknown request"})`, T.ResultSchema];
}

function issues(result) {
  return result.error.issues.map((i) => `at ${JSON.stringify(i.path)}: ${i.message}${i.code ? ` (${i.code})` : ""}`);
}

// Validates one message; returns the failures, [] when it is valid. Each failure has a category:
// `id-null` for an error answer with "id": null (known of mcpgate), else the schema's name.
function check(message, methodOf, modern = false) {
  const failures = checkOnly(message, methodOf, modern);
  const idNull = message && typeof message === "object" && "error" in message && message.id === null;
  return failures.map((f) => ({ category: idNull ? "id-null" : f.schema, ...f }));
}

// What a result of 2026-07-28 carries beyond the session era's (SDK 1.32.2 knows that era only):
// `resultType`, which it must carry, and the cache hints `ttlMs` and `cacheScope`, which it may.
const RESULT_TYPES = ["complete", "input_required", "task"];
function eraFields(result) {
  const errors = [];
  if (!RESULT_TYPES.includes(result.resultType)) errors.push(`resultType ${JSON.stringify(result.resultType)}: not one of ${RESULT_TYPES.join(", ")}`);
  if ("ttlMs" in result && !(Number.isInteger(result.ttlMs) && result.ttlMs >= 0)) errors.push(`ttlMs ${JSON.stringify(result.ttlMs)}: not a count of ms`);
  if ("cacheScope" in result && !["public", "private"].includes(result.cacheScope)) errors.push(`cacheScope ${JSON.stringify(result.cacheScope)}`);
  const { resultType, ttlMs, cacheScope, ...rest } = result; // eslint-disable-line no-unused-vars
  return [errors, rest];
}

// An input-required result: `inputRequests`, a map of keys to requests (each with a method), and an
// optional opaque `requestState` string.
function inputRequired(result) {
  const errors = [];
  const asks = result.inputRequests;
  if (!asks || typeof asks !== "object" || Array.isArray(asks) || Object.keys(asks).length === 0) {
    errors.push(`inputRequests ${JSON.stringify(asks)}: not a map of requests`);
  } else {
    for (const [key, ask] of Object.entries(asks)) {
      if (!ask || typeof ask.method !== "string") errors.push(`inputRequests.${key}: no method`);
    }
  }
  if ("requestState" in result && typeof result.requestState !== "string") errors.push("requestState: not a string");
  return errors;
}

// A task result (the tasks extension, flat): its `taskId` and `status`.
function task(result) {
  const errors = [];
  if (typeof result.taskId !== "string" || !result.taskId) errors.push(`taskId ${JSON.stringify(result.taskId)}`);
  if (typeof result.status !== "string") errors.push(`status ${JSON.stringify(result.status)}`);
  return errors;
}

// `modern`: the answer to a request of 2026-07-28 (its MCP-Protocol-Version header): its result is
// checked for that era's fields, and the rest against the session era's schema of its method.
function checkOnly(message, methodOf, modern) {
  if (message === null || typeof message !== "object" || Array.isArray(message)) {
    return [{ schema: "JSON object", errors: [`not a JSON-RPC object: ${JSON.stringify(message).slice(0, 120)}`] }];
  }
  const failures = [];
  const base = T.JSONRPCMessageSchema.safeParse(message);
  if (!base.success) failures.push({ schema: "JSONRPCMessageSchema", errors: issues(base) });
  const [name, schema] = schemaFor(message, methodOf);
  let payload = "result" in message ? message.result : message;
  if (modern && "result" in message && payload && typeof payload === "object") {
    const [errors, rest] = eraFields(payload);
    // Only a complete result is the method's; the others are the era's own shapes.
    if (payload.resultType === "input_required") errors.push(...inputRequired(rest));
    if (payload.resultType === "task") errors.push(...task(rest));
    if (errors.length) failures.push({ schema: `2026-07-28 result (${name})`, errors });
    if (payload.resultType !== "complete") return failures;
    payload = rest;
  }
  const specific = schema.safeParse(payload);
  if (!specific.success) failures.push({ schema: name, errors: issues(specific) });
  return failures;
}

// Every message of every tap log of mcpgate's runs.
function validateTaps(dir, match) {
  const report = { messages: 0, runs: 0, failures: [], other_paths: [] };
  for (const file of fs.readdirSync(dir).filter((f) => new RegExp(match).test(f)).sort()) {
    report.runs++;
    const rows = fs.readFileSync(path.join(dir, file), "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l));
    const requests = new Map(); // seq -> request record
    const methods = new Map(); // `${session} ${id}` -> method
    const statuses = new Map();
    for (const r of rows) {
      if (r.type === "request") {
        requests.set(r.seq, r);
        const session = r.headers["mcp-session-id"] || "";
        for (const m of [].concat(r.body || [])) {
          if (m && typeof m === "object" && "method" in m && "id" in m) methods.set(`${session} ${JSON.stringify(m.id)}`, m.method);
        }
      } else if (r.type === "response") {
        statuses.set(r.seq, r);
      } else if (r.type === "message") {
        const request = requests.get(r.seq) || { headers: {}, body: null };
        if (request.path && request.path.split("?")[0] !== "/mcp") {
          const response = statuses.get(r.seq);
          report.other_paths.push(`${request.method} ${request.path} -> ${response ? response.status : "?"}: ${JSON.stringify(r.data).slice(0, 100)}`);
          continue;
        }
        const session = request.headers["mcp-session-id"] || (statuses.get(r.seq) || { headers: {} }).headers["mcp-session-id"] || "";
        const methodOf = (id) => methods.get(`${session} ${JSON.stringify(id)}`) || methods.get(` ${JSON.stringify(id)}`);
        const modern = request.headers["mcp-protocol-version"] === "2026-07-28";
        for (const message of [].concat(r.data)) {
          report.messages++;
          for (const f of check(message, methodOf, modern)) {
            const response = statuses.get(r.seq);
            report.failures.push({
              run: file.replace(/\.jsonl$/, ""),
              http: `${request.method || "?"} -> ${response ? response.status : "?"} ${(response && response.headers["content-type"]) || ""}`,
              request: request.body && !Array.isArray(request.body) ? request.body.method : Array.isArray(request.body) ? "batch" : "",
              message: JSON.stringify(message).slice(0, 300),
              ...f,
            });
          }
        }
      }
    }
  }
  return report;
}

async function post(url, body, headers = {}) {
  const response = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json", accept: "application/json, text/event-stream", ...headers },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
  const text = await response.text();
  return { status: response.status, type: response.headers.get("content-type") || "", text, session: response.headers.get("mcp-session-id") };
}

function parseBody(answer) {
  if (answer.type.includes("text/event-stream")) {
    const data = answer.text.split(/\r?\n/).filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trim()).filter(Boolean);
    return data.length ? JSON.parse(data[data.length - 1]) : null;
  }
  try {
    return answer.text ? JSON.parse(answer.text) : null;
  } catch {
    return undefined;
  }
}

// Bad requests: the answer's HTTP status and its body, validated as a JSON-RPC error.
async function badRequests(url) {
  const V = "2025-11-25";
  const init = await post(url, {
    jsonrpc: "2.0", id: 1, method: "initialize",
    params: { protocolVersion: V, capabilities: {}, clientInfo: { name: "interop-validate", version: "1" } },
  }, { "mcp-protocol-version": V });
  const session = init.session;
  const h = { "mcp-session-id": session, "mcp-protocol-version": V };
  await post(url, { jsonrpc: "2.0", method: "notifications/initialized" }, h);
  const cases = [
    ["unknown method", { jsonrpc: "2.0", id: 2, method: "no/such/method" }, h],
    ["bad params (tools/call with params a string)", { jsonrpc: "2.0", id: 3, method: "tools/call", params: "x" }, h],
    ["bad params (tools/call without name)", { jsonrpc: "2.0", id: 4, method: "tools/call", params: { arguments: {} } }, h],
    ["unknown tool", { jsonrpc: "2.0", id: 5, method: "tools/call", params: { name: "everything__no_such_tool", arguments: {} } }, h],
    ["bad cursor", { jsonrpc: "2.0", id: 6, method: "tools/list", params: { cursor: "not-a-cursor" } }, h],
    ["no session id", { jsonrpc: "2.0", id: 7, method: "tools/list" }, { "mcp-protocol-version": V }],
    ["unknown session id", { jsonrpc: "2.0", id: 8, method: "tools/list" }, { ...h, "mcp-session-id": "no-such-session" }],
    ["wrong MCP-Protocol-Version header", { jsonrpc: "2.0", id: 9, method: "tools/list" }, { ...h, "mcp-protocol-version": "1999-01-01" }],
    ["not JSON", "{", h],
    ["not JSON-RPC (no jsonrpc member)", { id: 10, method: "tools/list" }, h],
  ];
  const out = [];
  for (const [name, body, headers] of cases) {
    const answer = await post(url, body, headers);
    const parsed = parseBody(answer);
    let failures = [];
    let verdict;
    if (parsed === undefined) {
      verdict = "body is not JSON";
    } else if (parsed === null) {
      verdict = "no body";
    } else {
      failures = check(parsed, () => (typeof body === "object" ? body.method : undefined));
      verdict = failures.length ? "INVALID" : "error" in parsed ? "valid error" : "valid result";
    }
    out.push({ name, status: answer.status, type: answer.type, body: answer.text.slice(0, 300), verdict, failures });
  }
  await fetch(url, { method: "DELETE", headers: h }).catch(() => null);
  return out;
}

async function main() {
  const report = validateTaps(arg("--taps"), arg("--match"));
  report.bad = { mcpgate: await badRequests(arg("--mcpgate")), everything: await badRequests(arg("--everything")) };
  // Does the pinned SDK's error schema take `"id": null` (what mcpgate writes when no id applies)?
  const nullId = { jsonrpc: "2.0", id: null, error: { code: -32600, message: "Invalid Request" } };
  const parsed = T.JSONRPCMessageSchema.safeParse(nullId);
  report.null_id = parsed.success ? "accepted" : `rejected: ${issues(parsed).join("; ")}`;
  report.no_id = T.JSONRPCMessageSchema.safeParse({ jsonrpc: "2.0", error: { code: -32600, message: "x" } }).success
    ? "accepted" : "rejected";
  fs.writeFileSync(arg("--out"), JSON.stringify(report, null, 1));

  console.log(`schema check: ${report.messages} messages from mcpgate in ${report.runs} client runs, ${report.failures.length} invalid`);
  const groups = new Map();
  for (const f of report.failures) {
    const key = `[${f.category}] ${f.schema} | ${f.errors.join("; ")}`;
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key).push(f);
  }
  for (const [key, list] of groups) {
    const f = list[0];
    console.log(`  INVALID x${list.length} (${[...new Set(list.map((x) => x.run))].join(", ")}): ${key}`);
    console.log(`    e.g. ${f.http}, answer to ${f.request || "?"}: ${f.message.slice(0, 200)}`);
  }
  const others = [...new Set(report.other_paths.map((p) => p.replace(/: .*/, "")))];
  if (others.length) console.log(`  not validated (not /mcp): ${others.join("; ")}`);
  console.log(`  {"jsonrpc":"2.0","id":null,"error":{...}} against JSONRPCMessageSchema: ${report.null_id}`);
  console.log(`  the same without "id": ${report.no_id}`);
  for (const [target, list] of Object.entries(report.bad)) {
    console.log(`bad requests to ${target}:`);
    for (const b of list) {
      console.log(`  ${b.verdict.padEnd(16)} ${b.name.padEnd(44)} HTTP ${b.status} ${b.type.split(";")[0]} ${b.body.replace(/\s+/g, " ").slice(0, 110)}`);
      for (const f of b.failures) console.log(`      ${f.schema}: ${f.errors.join("; ")}`);
    }
  }
}

main().catch((e) => {
  console.error(`validate.cjs failed: ${e.stack || e}`);
  process.exit(2);
});
