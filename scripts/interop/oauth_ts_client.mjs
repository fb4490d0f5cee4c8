// The TypeScript SDK's OAuth client (@modelcontextprotocol/sdk 1.32.2, from .interop/clients)
// through mcpgate, over HTTPS (NODE_EXTRA_CA_CERTS: the test's CA), against oidc-provider: the SDK
// discovers the authorization server from mcpgate's 401, registers itself, runs authorization
// code with PKCE and gets its token; this script supplies what the SDK leaves to an app, an
// OAuthClientProvider whose redirectToAuthorization hands the URL to the person at the browser
// (oauth_browser.py, run as a command) and keeps the code for finishAuth. Then initialize,
// tools/list and a call. Writes the checks as JSON for report.py.
//
//   node oauth_ts_client.mjs --url URL --issuer URL --out FILE   (CLIENTS_DIR: .interop/clients;
//                                                                 VPY: the venv's python)
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const sdk = createRequire(path.join(process.env.CLIENTS_DIR, "package.json"));
const { Client } = sdk("@modelcontextprotocol/sdk/client/index.js");
const { StreamableHTTPClientTransport } = sdk("@modelcontextprotocol/sdk/client/streamableHttp.js");
const { UnauthorizedError } = sdk("@modelcontextprotocol/sdk/client/auth.js");

const arg = (name) => {
  const i = process.argv.indexOf(name);
  if (i < 0 || i + 1 >= process.argv.length) throw new Error(`missing ${name}`);
  return process.argv[i + 1];
};
const url = new URL(arg("--url"));
const issuer = arg("--issuer");
const results = [];
const check = (name, ok, detail = "") => {
  results.push({ name, ok: Boolean(ok), detail: String(detail).slice(0, 400) });
  console.log(`${ok ? "PASS" : "FAIL"}  ${name}  ${String(detail).slice(0, 200)}`);
};

// What an app keeps for the SDK: the registration, the tokens, the PKCE verifier.
class Provider {
  constructor(login) {
    this.login = login;
    this.saved = {};
    this.code = null;
  }
  get redirectUrl() {
    return "http://localhost:9/callback";
  }
  get clientMetadata() {
    return {
      client_name: `mcpgate interop, TypeScript SDK (${this.login})`,
      redirect_uris: [this.redirectUrl],
      grant_types: ["authorization_code", "refresh_token"],
      response_types: ["code"],
      token_endpoint_auth_method: "none",
    };
  }
  clientInformation() {
    return this.saved.client;
  }
  saveClientInformation(info) {
    this.saved.client = info;
  }
  tokens() {
    return this.saved.tokens;
  }
  saveTokens(tokens) {
    this.saved.tokens = tokens;
  }
  saveCodeVerifier(verifier) {
    this.saved.verifier = verifier;
  }
  codeVerifier() {
    return this.saved.verifier;
  }
  redirectToAuthorization(authorizationUrl) {
    const final = execFileSync(process.env.VPY, [path.join(here, "oauth_browser.py"), authorizationUrl.href, "--login", this.login], {
      encoding: "utf8",
      timeout: 30000,
    }).trim();
    const back = new URL(final);
    if (back.searchParams.get("error")) throw new Error(`the authorization server refused: ${final}`);
    this.code = back.searchParams.get("code");
  }
}

async function main() {
  const provider = new Provider("carol");
  const client = new Client({ name: "mcpgate-interop-ts-oauth", version: "1.0" });
  try {
    await client.connect(new StreamableHTTPClientTransport(url, { authProvider: provider }));
    check("the first connect needs a sign-in", false, "connected without one");
  } catch (e) {
    check("the first connect is refused with 401 and the SDK starts the sign-in", e instanceof UnauthorizedError && provider.code,
      `${e.constructor.name}: ${e.message}`);
  }
  const transport = new StreamableHTTPClientTransport(url, { authProvider: provider });
  await transport.finishAuth(provider.code);
  const token = provider.saved.tokens?.access_token || "";
  const claims = token.split(".").length === 3 ? JSON.parse(Buffer.from(token.split(".")[1], "base64url")) : {};
  check("registered (DCR), code with PKCE, a JWT for the resource", provider.saved.client?.client_id && claims.aud === url.href
    && claims.iss === issuer && String(claims.scope).split(" ").includes("mcp"), JSON.stringify({ aud: claims.aud, sub: claims.sub, scope: claims.scope }));
  await client.connect(transport);
  const tools = (await client.listTools()).tools.map((t) => t.name);
  const answer = await client.callTool({ name: "fx__echo", arguments: { text: "hello from carol" } });
  const text = (answer.content || []).map((c) => c.text || "").join(" ");
  check(`initialize, tools/list (${tools.length} tools), tools/call through mcpgate`, tools.includes("fx__echo") && text === "hello from carol",
    `tools ${tools.slice(0, 5)}, answer ${JSON.stringify(text)}`);
  await transport.terminateSession();
  await client.close();
}

try {
  await main();
} catch (e) {
  check("the TypeScript SDK's OAuth flow ran to its end", false, `${e.constructor.name}: ${e.message}`);
  console.error(e);
}
fs.writeFileSync(arg("--out"), JSON.stringify(results, null, 1));
process.exit(results.every((r) => r.ok) ? 0 : 1);
