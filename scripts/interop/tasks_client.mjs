// The official Tasks client (@modelcontextprotocol/ext-tasks, on the TypeScript SDK v2 client in
// auto mode, from .interop/clients) in front of server-everything, directly and through mcpgate:
// the era each lands in and the task capabilities the session finds (they must agree), a
// simulate-research-query run as a task to its report, and a task cancelled. Writes
// [{name, ok, detail}] to --out, as modern_checks.py does, for report.py. Not checked: an
// ambiguous query, whose task asks for input on its tasks/result stream, hangs this client
// (0.2.2) directly too.
//
//   node tasks_client.mjs --direct URL --gateway URL --out FILE   (CLIENTS_DIR: .interop/clients)
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";
import shared from "./checks.cjs";

const modules = path.join(process.env.CLIENTS_DIR, "node_modules");
// The SDK as ext-tasks imports it (ESM), so both see one module.
const { Client, StreamableHTTPClientTransport } = await import(
  pathToFileURL(path.join(modules, "@modelcontextprotocol/client/dist/index.mjs")).href
);
const tasks = await import(pathToFileURL(path.join(modules, "@modelcontextprotocol/ext-tasks/dist/client/index.js")).href);

const STEP_TIMEOUT = 30000;
const check = (name, body) => shared.check(STEP_TIMEOUT, name, body);
const { RESULTS, arg, record, within } = shared;

const textOf = (result) =>
  (result?.content ?? []).filter((c) => c.type === "text").map((c) => c.text).join("\n");

/** One client and its task session at `url`; `prefix` names the server's tools there. */
async function run(label, url, prefix) {
  const client = new Client(
    { name: "mcpgate-interop-tasks", version: "1.0" },
    { capabilities: { elicitation: {} }, versionNegotiation: { mode: "auto" } },
  );
  const transport = new StreamableHTTPClientTransport(new URL(url));
  await within(STEP_TIMEOUT, client.connect(transport), `${label}: connect`);
  const era = client.getProtocolEra();
  const session = tasks.createTaskSessionFromClient(client, { endpointId: `interop-${label}` });
  // What the session found the server can do with tasks (inventory, execution, cancellation, input).
  const generation = JSON.stringify(session.capabilities ?? null);
  const { tools } = await within(STEP_TIMEOUT, client.listTools(), `${label}: tools/list`);
  const tool = tools.find((t) => t.name === `${prefix}simulate-research-query`);
  const declaration = tool && tasks.toolDeclarationFromMcpTool(tool);
  const options = { declaration, task: { preference: "require" } };
  const name = (f) => `Tasks client (${label}): ${f}`;
  await check(name("simulate-research-query runs as a task to its report"), async () => {
    if (!tool) return [false, `no ${prefix}simulate-research-query among ${tools.length} tools`];
    const execution = await session.callTool(tool.name, { topic: "mcpgate" }, options);
    const { outcome } = await execution.settle();
    const text = outcome.status === "completed" ? textOf(outcome.result) : "";
    return [execution.kind === "task" && text.includes("Research Report: mcpgate"),
      `${execution.kind}, ${outcome.status}: ${text.split("\n")[0]}`];
  });
  await check(name("a task is cancelled"), async () => {
    if (!tool) return [false, "no tool"];
    const execution = await session.callTool(tool.name, { topic: "cancel me" }, options);
    await execution.cancel();
    const { outcome } = await execution.settle();
    return [execution.kind === "task" && outcome.status === "cancelled", `${execution.kind}, ${outcome.status}`];
  });
  await session.close();
  await client.close();
  return { era, generation };
}

/** `run`, or a failed row naming why it could not (a client that cannot connect, say). */
async function attempt(label, url, prefix) {
  try {
    return await run(label, url, prefix);
  } catch (e) {
    record(`Tasks client (${label}): connects and runs its checks`, false, `${e?.name ?? "Error"}: ${e?.message ?? e}`);
    return { era: "none", generation: "none" };
  }
}

const direct = await attempt("direct", arg("--direct"), "");
const through = await attempt("through mcpgate", arg("--gateway"), "everything__");
record(
  "Tasks client: the same era and task capabilities directly and through mcpgate",
  direct.era === through.era && direct.generation === through.generation,
  `direct ${direct.era} ${direct.generation}, through mcpgate ${through.era} ${through.generation}`,
);
fs.writeFileSync(arg("--out"), JSON.stringify(RESULTS, null, 1));
process.exit(RESULTS.every((r) => r.ok) ? 0 : 1);
