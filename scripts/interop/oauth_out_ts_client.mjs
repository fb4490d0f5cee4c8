// The TypeScript SDK (@modelcontextprotocol/sdk 1.32.2, from .interop/clients) through mcpgate in
// front of a server that wants OAuth (scripts/interop/oauth_out.sh), with `oauth_client.ask`
// "elicitation": the client declares URL elicitation, mcpgate sends `elicitation/create` with
// `mode: "url"` in the call's stream, the client's handler has the person consent in headless
// Chromium (oauth_chromium.py) and answers `accept`, and the same call then answers with the
// user's subject, after `notifications/elicitation/complete`. Writes the checks as JSON.
//
//   node oauth_out_ts_client.mjs --url URL --profile DIR --login NAME --out FILE
//                                             (CLIENTS_DIR: .interop/clients; VPY: the venv's python)
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const sdk = createRequire(path.join(process.env.CLIENTS_DIR, "package.json"));
const { Client } = sdk("@modelcontextprotocol/sdk/client/index.js");
const { StreamableHTTPClientTransport } = sdk("@modelcontextprotocol/sdk/client/streamableHttp.js");
const { ElicitRequestSchema, ElicitationCompleteNotificationSchema } = sdk("@modelcontextprotocol/sdk/types.js");

const arg = (name) => {
  const i = process.argv.indexOf(name);
  if (i < 0 || i + 1 >= process.argv.length) throw new Error(`missing ${name}`);
  return process.argv[i + 1];
};
const url = new URL(arg("--url"));
const profile = arg("--profile");
const login = arg("--login");
const results = [];
const check = (name, ok, detail = "") => {
  results.push({ name, ok: Boolean(ok), detail: String(detail).slice(0, 400) });
  console.log(`${ok ? "PASS" : "FAIL"}  ${name}  ${String(detail).slice(0, 200)}`);
};

async function main() {
  const client = new Client(
    { name: "mcpgate-interop-ts-oauth-out", version: "1.0" },
    { capabilities: { elicitation: { form: {}, url: {} } } },
  );
  const asked = [];
  const completed = [];
  client.setRequestHandler(ElicitRequestSchema, async (request) => {
    asked.push(request.params);
    if (request.params.mode !== "url") return { action: "decline" };
    // The person opens the link in their own browser, and says so.
    const out = execFileSync(process.env.VPY, [path.join(here, "oauth_chromium.py"), request.params.url, "--profile", profile,
      "--login", login, "--timeout", "60"], { encoding: "utf8", timeout: 120000 }).trim().split("\n").pop();
    const page = JSON.parse(out);
    check("Chromium signs in on the authorization server's pages and lands on mcpgate's page", page.ok
      && page.text.includes("signed in to server `prot`"), `${page.title}: ${page.text}`);
    return { action: page.ok ? "accept" : "cancel" };
  });
  client.setNotificationHandler(ElicitationCompleteNotificationSchema, (notification) => {
    completed.push(notification.params.elicitationId);
  });
  const transport = new StreamableHTTPClientTransport(url);
  await client.connect(transport);
  const answer = await client.callTool({ name: "prot__whoami", arguments: {} }, undefined, { timeout: 180000 });
  const text = (answer.content || []).map((c) => c.text || "").join(" ");
  const first = asked[0] || {};
  check("mcpgate asks with elicitation/create, mode url, its own sign-in link", asked.length === 1 && first.mode === "url"
    && first.url.startsWith(`${url.origin}/oauth/connect?e=`) && first.elicitationId, JSON.stringify(first));
  check("the same call then answers the user's subject (no retry by the client)", text.startsWith(`${login} http://127.0.0.1:`), text);
  check("notifications/elicitation/complete names the elicitation", completed.includes(first.elicitationId), JSON.stringify(completed));
  await transport.terminateSession();
  await client.close();
}

try {
  await main();
} catch (e) {
  check("the TypeScript SDK's run ran to its end", false, `${e.constructor.name}: ${e.message}`);
  console.error(e);
}
fs.writeFileSync(arg("--out"), JSON.stringify(results, null, 1));
process.exit(results.every((r) => r.ok) ? 0 : 1);
