// The authorization server of scripts/interop/oauth.sh: oidc-provider (OpenID certified), from
// .interop/oauth, pinned in scripts/interop/oauth/package-lock.json. What the MCP authorization
// spec asks of one, and no more: dynamic client registration (RFC 7591, open), authorization code
// with PKCE (required for public clients), resource indicators (RFC 8707) with JWT access tokens
// (RFC 9068, ES256) for the resources given, an opaque access token for --opaque-resource, and
// introspection (RFC 7662) for the confidential client `mcpgate`. Its signing keys are made at
// each start. Its login and consent pages are oidc-provider's own development pages: the test's
// clients fill them in over HTTP (oauth_browser.py, and its copy in oauth_ts_client.mjs), as a
// person would in a browser; any login name is taken, and becomes the token's `sub`.
//
//   node oauth_server.mjs --port P --resource URL [--resource URL] [--opaque-resource URL]
//                         [--introspection-secret S]          (OIDC_PROVIDER_DIR: .interop/oauth)
//
// Prints `listening on http://127.0.0.1:P` once it listens (on 127.0.0.1 only).
import { generateKeyPairSync, randomBytes } from "node:crypto";
import path from "node:path";
import { pathToFileURL } from "node:url";

const dir = process.env.OIDC_PROVIDER_DIR;
if (!dir) throw new Error("OIDC_PROVIDER_DIR is not set");
const { default: Provider, errors } = await import(
  pathToFileURL(path.join(dir, "node_modules/oidc-provider/lib/index.js")).href
);

function args(name) {
  const out = [];
  process.argv.forEach((a, i) => {
    if (a === name && i + 1 < process.argv.length) out.push(process.argv[i + 1]);
  });
  return out;
}
const port = Number(args("--port")[0]);
const resources = args("--resource");
const opaque = args("--opaque-resource");
const secret = args("--introspection-secret")[0] || "";
if (!port || resources.length === 0) throw new Error("usage: --port P --resource URL");

const issuer = `http://127.0.0.1:${port}`;
const key = (type, options, kid, alg) => ({
  ...generateKeyPairSync(type, options).privateKey.export({ format: "jwk" }),
  kid,
  alg,
  use: "sig",
});

const clients = [];
if (secret) {
  // mcpgate itself, for introspection only: it asks what opaque tokens are.
  clients.push({
    client_id: "mcpgate",
    client_secret: secret,
    grant_types: [],
    response_types: [],
    redirect_uris: [],
    token_endpoint_auth_method: "client_secret_basic",
  });
}

const provider = new Provider(issuer, {
  clients,
  jwks: {
    keys: [key("ec", { namedCurve: "P-256" }, "ec-1", "ES256"), key("rsa", { modulusLength: 2048 }, "rsa-1", "RS256")],
  },
  cookies: { keys: [randomBytes(32).toString("hex")] },
  scopes: ["openid", "offline_access", "mcp"],
  clientDefaults: { grant_types: ["authorization_code", "refresh_token"], response_types: ["code"] },
  findAccount: (_ctx, id) => ({ accountId: id, claims: () => ({ sub: id }) }),
  features: {
    devInteractions: { enabled: true },
    registration: { enabled: true },
    introspection: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: () => resources[0],
      useGrantedResource: () => true,
      getResourceServerInfo: (_ctx, indicator) => {
        if (resources.includes(indicator)) {
          return { scope: "mcp", audience: indicator, accessTokenTTL: 3600, accessTokenFormat: "jwt",
            jwt: { sign: { alg: "ES256" } } };
        }
        if (opaque.includes(indicator)) {
          return { scope: "mcp", audience: indicator, accessTokenTTL: 3600, accessTokenFormat: "opaque" };
        }
        throw new errors.InvalidTarget();
      },
    },
  },
  ttl: { AccessToken: 3600, AuthorizationCode: 120, Grant: 3600, Interaction: 600, Session: 3600 },
});
// Every refusal in the log: what a client did wrong shows there.
provider.on("server_error", (_ctx, e) => console.error(`server_error: ${e.stack || e}`));
for (const event of ["authorization.error", "grant.error", "registration_create.error", "introspection.error"]) {
  provider.on(event, (_ctx, e) => console.error(`${event}: ${e.message} ${e.error_description || ""}`));
}
provider.on("access_token.issued", (token) => console.error(`issued an access token to ${token.clientId} for ${token.accountId}`));

provider.listen(port, "127.0.0.1", () => console.log(`listening on ${issuer}`));
