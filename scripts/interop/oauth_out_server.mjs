// The authorization server of scripts/interop/oauth_out.sh: oidc-provider (OpenID certified), from
// .interop/oauth, pinned in scripts/interop/oauth/package-lock.json. It issues the tokens mcpgate
// gets for its users at the protected servers (FastMCP, oauth_out_fm_server.py), and the tokens
// the MCP clients use with mcpgate itself. What the issue asks of one: dynamic client registration,
// authorization code with PKCE, resource indicators (RFC 8707) with JWT access tokens (RFC 9068,
// ES256) for any http://127.0.0.1:PORT/mcp resource, refresh tokens rotated at each use, and a
// token exchange grant (RFC 8693) for the confidential client `mcpgate-exchange`: a JWT of this
// issuer in, a JWT of the resource asked for out, with the same subject. Its login and consent
// pages are oidc-provider's own development pages, which headless Chromium fills in
// (oauth_chromium.py); any login name is taken, and becomes the tokens' `sub`.
//
// GET /stats answers what it did: registrations, codes, refreshes, exchanges, and every token it
// issued (for the test's grep for tokens in the clear; nothing else serves them).
//
//   node oauth_out_server.mjs --port P --ttl SECONDS --exchange-secret S   (OIDC_PROVIDER_DIR)
//
// Prints `listening on http://127.0.0.1:P` once it listens (on 127.0.0.1 only).
import { generateKeyPairSync, randomBytes, randomUUID } from "node:crypto";
import path from "node:path";
import { pathToFileURL } from "node:url";

const dir = process.env.OIDC_PROVIDER_DIR;
if (!dir) throw new Error("OIDC_PROVIDER_DIR is not set");
const load = (module) => import(pathToFileURL(path.join(dir, "node_modules", module)).href);
const { default: Provider, errors } = await load("oidc-provider/lib/index.js");
const jose = await load("jose/dist/webapi/index.js");

const arg = (name, fallback) => {
  const i = process.argv.indexOf(name);
  return i >= 0 && i + 1 < process.argv.length ? process.argv[i + 1] : fallback;
};
const port = Number(arg("--port"));
const ttl = Number(arg("--ttl", "3600"));
const exchangeSecret = arg("--exchange-secret", "");
if (!port) throw new Error("usage: --port P [--ttl SECONDS] [--exchange-secret S]");

const issuer = `http://127.0.0.1:${port}`;
const signing = { ...generateKeyPairSync("ec", { namedCurve: "P-256" }).privateKey.export({ format: "jwk" }), kid: "ec-1", alg: "ES256", use: "sig" };
const stats = { registrations: 0, codes: 0, refreshes: 0, exchanges: 0, issued: [] };
const resource = (indicator) => /^http:\/\/127\.0\.0\.1:\d+\/mcp$/.test(indicator || "");

const clients = [];
if (exchangeSecret) {
  // mcpgate exchanging its users' tokens: a confidential client of this grant only.
  clients.push({
    client_id: "mcpgate-exchange",
    client_secret: exchangeSecret,
    grant_types: ["urn:ietf:params:oauth:grant-type:token-exchange"],
    response_types: [],
    redirect_uris: [],
    token_endpoint_auth_method: "client_secret_basic",
  });
}

const provider = new Provider(issuer, {
  clients,
  jwks: { keys: [signing] },
  cookies: { keys: [randomBytes(32).toString("hex")] },
  scopes: ["openid", "offline_access", "mcp"],
  clientDefaults: {
    grant_types: ["authorization_code", "refresh_token"],
    response_types: ["code"],
    id_token_signed_response_alg: "ES256",
  },
  findAccount: (_ctx, id) => ({ accountId: id, claims: () => ({ sub: id }) }),
  // Every public client that may refresh gets a refresh token, rotated at each use.
  issueRefreshToken: (_ctx, client) => client.grantTypeAllowed("refresh_token"),
  rotateRefreshToken: () => true,
  features: {
    devInteractions: { enabled: true },
    registration: { enabled: true },
    resourceIndicators: {
      enabled: true,
      useGrantedResource: () => true,
      getResourceServerInfo: (_ctx, indicator) => {
        if (!resource(indicator)) throw new errors.InvalidTarget();
        return { scope: "mcp", audience: indicator, accessTokenTTL: ttl, accessTokenFormat: "jwt", jwt: { sign: { alg: "ES256" } } };
      },
    },
  },
  ttl: { AccessToken: ttl, AuthorizationCode: 120, Grant: 3600, Interaction: 600, Session: 3600, RefreshToken: 86400 },
});

// RFC 8693: a JWT of this issuer (checked with its own key) for one of the resource asked for.
const { d: _private, ...publicJwk } = signing;
const publicKey = await jose.importJWK(publicJwk, "ES256");
const privateKey = await jose.importJWK(signing, "ES256");
provider.registerGrantType(
  "urn:ietf:params:oauth:grant-type:token-exchange",
  async (ctx) => {
    const { subject_token: subject, subject_token_type: kind, resource: target } = ctx.oidc.params;
    if (kind !== "urn:ietf:params:oauth:token-type:access_token") throw new errors.InvalidRequest("subject_token_type must be access_token");
    if (!resource(target)) throw new errors.InvalidTarget();
    let claims;
    try {
      ({ payload: claims } = await jose.jwtVerify(subject, publicKey, { issuer }));
    } catch (e) {
      throw new errors.InvalidGrant(`the subject token is not good: ${e.message}`);
    }
    const now = Math.floor(Date.now() / 1000);
    const token = await new jose.SignJWT({ scope: "mcp", client_id: ctx.oidc.client.clientId, act: { sub: ctx.oidc.client.clientId } })
      .setProtectedHeader({ alg: "ES256", kid: "ec-1", typ: "at+jwt" })
      .setIssuer(issuer)
      .setSubject(claims.sub)
      .setAudience(target)
      .setIssuedAt(now)
      .setExpirationTime(now + ttl)
      .setJti(randomUUID())
      .sign(privateKey);
    stats.exchanges += 1;
    stats.issued.push(token);
    ctx.body = {
      access_token: token,
      issued_token_type: "urn:ietf:params:oauth:token-type:access_token",
      token_type: "Bearer",
      expires_in: ttl,
    };
  },
  ["subject_token", "subject_token_type", "requested_token_type", "audience", "resource", "scope"],
);

provider.on("grant.success", (ctx) => {
  const grant = ctx.oidc.params.grant_type;
  if (grant === "authorization_code") stats.codes += 1;
  if (grant === "refresh_token") stats.refreshes += 1;
  const body = ctx.body || {};
  for (const t of [body.access_token, body.refresh_token]) if (t && !stats.issued.includes(t)) stats.issued.push(t);
});
provider.on("registration_create.success", () => {
  stats.registrations += 1;
});
provider.on("server_error", (_ctx, e) => console.error(`server_error: ${e.stack || e}`));
for (const event of ["authorization.error", "grant.error", "registration_create.error"]) {
  provider.on(event, (_ctx, e) => console.error(`${event}: ${e.message} ${e.error_description || ""}`));
}

provider.use(async (ctx, next) => {
  if (ctx.path === "/stats") {
    ctx.body = stats;
    return;
  }
  await next();
});

provider.listen(port, "127.0.0.1", () => console.log(`listening on ${issuer}`));
