//! mcpgate as each user's OAuth client toward the servers it fronts that
//! want OAuth 2.1 (`"oauth": {...}` on a server): the [`Authorizer`], one
//! per gateway, keeps every user's tokens for every such server, and a
//! [`server::ServerAuth`] is one server's view of it, which its HTTP links ask for
//! a bearer token before each request and tell when the server refused one.
//!
//! - `discovery`: the server's 401 challenge, its protected-resource
//!   metadata (RFC 9728), its authorization server's metadata (RFC 8414,
//!   OpenID), each checked (issuer, PKCE S256, endpoints).
//! - `register`: a configured client, else the client ID metadata document
//!   mcpgate serves, else dynamic registration (RFC 7591), kept.
//! - `flow`: the sign-ins waiting for their users (the links clients show),
//!   bound to the user, the server and an expiry; PKCE, `state`, cookie.
//! - `server`: one server's view ([`server::ServerAuth`]): a request's bearer
//!   token, a refused one, discovery and registration kept, exchanges.
//! - `target`: who signs in ([`User`]) and where ([`Target`]).
//! - `tokens`: the token endpoint (code, refresh, exchange).
//! - `store`: tokens and registrations at rest, sealed with AES-256-GCM.
//! - `fetch`: every exchange with an authorization server, bounded in time
//!   and size and charged to `max_memory_mb`.
//!
//! Tokens are per user (a static token's digest, an OAuth issuer and
//! subject's; without `auth`, the one user) and server. They never go into
//! a log line, an error, the status page or `/metrics`; refreshes run one
//! at a time per user and server, and a rotated refresh token is written
//! to the store before the access token that came with it is used.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, RwLock};
use serde_json::Value;

use crate::config::{Config, HttpConfig, OAuthClientConfig, OAuthConfig, Trust};
use crate::runtime::memory::Charge;
use crate::stats::Counter;

mod discovery;
pub(crate) mod fetch;
mod flow;
mod register;
pub(crate) mod server;
pub(crate) mod store;
mod target;
mod tokens;

pub(crate) use flow::Refusal;
use flow::{Flows, Purpose};
use register::Client;
use target::short;
pub(crate) use target::{Target, User, user_key};
use tokens::Tokens;

/// How long what discovery found is trusted, and a failure remembered.
const KNOWN_FOR: Duration = Duration::from_secs(3600);
const FAILED_FOR: Duration = Duration::from_secs(10);

/// What every sign-in shares, from the configuration in force.
struct Settings {
    client: OAuthClientConfig,
    connect: Duration,
    /// mcpgate's own issuer: who opens a link, and where tokens are exchanged.
    inbound: Option<Arc<OAuthConfig>>,
    /// The top-level trust (`ca_file`, `trust_store`), for mcpgate's own issuer.
    trust: Trust,
}

impl Settings {
    /// The settings of `config`; `bound`: the address mcpgate listens on,
    /// for a `public_url` not given (`listen` may have port 0).
    fn of(config: &Config, bound: Option<&str>) -> Settings {
        let mut client = config.oauth_client.clone();
        if let (false, Some(bound)) = (client.public_url_given, bound) {
            client.public_url = bound.to_string();
        }
        Settings { client, connect: config.connect_timeout, inbound: config.oauth.clone(), trust: config.trust.clone() }
    }
}

/// What one server's sign-ins count, for the status page and `/metrics`.
#[derive(Default, Debug)]
pub(crate) struct Counters {
    pub(crate) refreshes: Counter,
    pub(crate) failures: Counter,
    pub(crate) signins: Counter,
}

/// What the status page shows of one server's sign-ins: counts, never tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub(crate) struct View {
    /// Users holding a token for it now.
    pub(crate) users: u64,
    pub(crate) refreshes: u64,
    pub(crate) failures: u64,
    pub(crate) signins: u64,
    /// Sign-ins waiting for their user now.
    pub(crate) waiting: u64,
}

/// One user's tokens for one server; `changed` wakes those waiting for a refresh.
#[derive(Default)]
struct Slot {
    /// Guards the tokens and whether a refresh runs; never held across I/O.
    state: Mutex<SlotState>,
    changed: Condvar,
}

#[derive(Default)]
struct SlotState {
    tokens: Option<Tokens>,
    refreshing: bool,
    /// What the tokens hold, against `max_memory_mb`.
    charge: Option<Charge>,
}

/// What discovery found for a server, or how it failed.
enum Discovered {
    Known(Arc<Target>, Instant),
    Failed(String, Instant),
}

/// The user's own token of `auth.oauth`, for token exchange (memory only).
struct Subject {
    token: String,
    expires: u64,
}

/// A token got by exchange, kept until it expires.
struct Exchanged {
    token: String,
    expires: u64,
    obtained: u64,
    /// SHA-256 of the subject token it was exchanged for.
    subject: [u8; 32],
}

/// A sign-in as its pages see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FlowView {
    /// Whose it is.
    pub(crate) user: User,
    pub(crate) server: String,
    /// The browser that opened its link showed it is its user.
    pub(crate) identified: bool,
    /// How it ended, once it did.
    pub(crate) done: Option<Result<(), String>>,
}

/// How a callback ended, for the page and the sessions to tell.
pub(crate) enum Completed {
    /// The browser signed in at mcpgate's own issuer: its access token, to
    /// check who it is; then [`Authorizer::identified`].
    Identity { id: String, access_token: String },
    /// The user's tokens for `server` are kept.
    Authorized { id: String, server: String, user: User, sessions: Vec<String> },
}

/// Every user's tokens for every server with `oauth`: one per gateway.
pub struct Authorizer {
    /// Guards the swap of the settings (a reload).
    settings: RwLock<Arc<Settings>>,
    /// Guards mcpgate's own URL as it listens (`http://127.0.0.1:8780`),
    /// once it does: the public URL when none is configured.
    bound: Mutex<Option<String>>,
    /// Guards the store (opened at start, or at the reload that first
    /// gives a server `oauth`); why not, when the key could not be had.
    store: RwLock<Result<Arc<store::Store>, String>>,
    /// Guards what discovery found, by server name and URL.
    targets: Mutex<HashMap<String, Discovered>>,
    /// Guards the map of slots; each slot locks its own state.
    slots: Mutex<HashMap<(String, String), Arc<Slot>>>,
    /// Guards the sign-ins waiting.
    flows: Mutex<Flows>,
    /// Guards users' own tokens (token exchange), by user.
    subjects: Mutex<HashMap<String, Subject>>,
    /// Guards exchanged tokens, by user and server.
    exchanged: Mutex<HashMap<(String, String), Exchanged>>,
    /// Guards the counters by server (each counter is atomic).
    counters: Mutex<HashMap<String, Arc<Counters>>>,
    /// Guards mcpgate's own client at `auth.oauth.issuer`, once found.
    identity: Mutex<Option<(Arc<Target>, Instant)>>,
}

impl Authorizer {
    /// The authorizer for `config`: its store opened (and its tokens read)
    /// when a server signs users in; `Err` in the store says why tokens
    /// cannot be kept (a key file others may read, say).
    pub(crate) fn new(config: &Config) -> Arc<Authorizer> {
        let store = if wants_store(config) { open_store(config) } else { Err(NO_STORE.to_string()) };
        let authorizer = Authorizer {
            settings: RwLock::new(Arc::new(Settings::of(config, None))),
            bound: Mutex::new(None),
            store: RwLock::new(store.map(Arc::new)),
            targets: Mutex::new(HashMap::new()),
            slots: Mutex::new(HashMap::new()),
            flows: Mutex::new(Flows::default()),
            subjects: Mutex::new(HashMap::new()),
            exchanged: Mutex::new(HashMap::new()),
            counters: Mutex::new(HashMap::new()),
            identity: Mutex::new(None),
        };
        authorizer.load_tokens();
        Arc::new(authorizer)
    }

    /// Takes the settings of a reloaded configuration; the store stays as
    /// opened (a change of its file or key needs a restart), or is opened
    /// now when the first server with `oauth` came.
    pub(crate) fn configure(&self, config: &Config) {
        let bound = self.bound.lock().clone();
        *self.settings.write() = Arc::new(Settings::of(config, bound.as_deref()));
        let unopened = matches!(&*self.store.read(), Err(why) if why == NO_STORE);
        if unopened && wants_store(config) {
            *self.store.write() = open_store(config).map(Arc::new);
            self.load_tokens();
        }
        self.targets.lock().clear();
        *self.identity.lock() = None;
    }

    fn settings(&self) -> Arc<Settings> {
        self.settings.read().clone()
    }

    /// mcpgate listens at `url` (`http://` or `https://` and the address it
    /// bound): the public URL of links and callbacks when none is configured.
    pub fn listening_at(&self, url: &str, config: &Config) {
        *self.bound.lock() = Some(url.to_string());
        *self.settings.write() = Arc::new(Settings::of(config, Some(url)));
    }

    /// The `oauth_client` settings in force, with the public URL as it is.
    pub(crate) fn client_settings(&self) -> OAuthClientConfig {
        self.settings().client.clone()
    }

    fn store(&self) -> Result<Arc<store::Store>, String> {
        self.store.read().clone()
    }

    /// Reads every user's tokens from the store into memory.
    fn load_tokens(&self) {
        let Ok(store) = self.store() else { return };
        let mut loaded = 0;
        for (name, value) in store.read_all("token/") {
            let mut parts = name.splitn(3, '/').skip(1);
            let (Some(user), Some(server)) = (parts.next(), parts.next()) else { continue };
            let Ok(tokens) = serde_json::from_value::<Tokens>(value) else { continue };
            let slot = self.slot_by_key(user, server);
            let mut st = slot.state.lock();
            st.charge = Charge::new(tokens.size());
            st.tokens = Some(tokens);
            loaded += 1;
        }
        if loaded > 0 {
            log::info!("OAuth: {loaded} user token(s) read from the store");
        }
    }

    fn slot_by_key(&self, user: &str, server: &str) -> Arc<Slot> {
        self.slots.lock().entry((user.to_string(), server.to_string())).or_default().clone()
    }

    fn slot(&self, user: &User, server: &str) -> Arc<Slot> {
        self.slot_by_key(&user_key(user), server)
    }

    fn counters(&self, server: &str) -> Arc<Counters> {
        self.counters.lock().entry(server.to_string()).or_default().clone()
    }

    /// The user's own access token of `auth.oauth`, presented now: what a
    /// token exchange exchanges (kept in memory until it expires).
    pub(crate) fn remember_subject(&self, user: &User, token: &str, expires: u64) {
        let mut subjects = self.subjects.lock();
        let now = crate::runtime::clock::unix_now();
        if subjects.len() >= 4096 {
            subjects.retain(|_, s| s.expires > now);
        }
        if subjects.len() < 4096 {
            subjects.insert(user_key(user), Subject { token: token.to_string(), expires });
        }
    }

    /// Why tokens cannot be kept, when the store could not be opened for
    /// servers that need it (mcpgate refuses to start then).
    pub fn store_problem(&self) -> Option<String> {
        match &*self.store.read() {
            Err(why) if why != NO_STORE => Some(why.clone()),
            _ => None,
        }
    }

    /// Forgets the user's tokens for `server` (`mcpgate logout`): in memory
    /// and in the store. Whether there were any.
    pub(crate) fn logout(&self, user: &User, server: &str) -> Result<bool, String> {
        let slot = self.slot(user, server);
        let had = {
            let mut st = slot.state.lock();
            st.charge = None;
            st.tokens.take().is_some()
        };
        self.exchanged.lock().remove(&(user_key(user), server.to_string()));
        self.flows.lock().drop_of(*user, server);
        if let Ok(store) = self.store() {
            store.put(&token_record(user, server), None)?;
        }
        Ok(had)
    }

    /// What the status page shows of `server`'s sign-ins.
    pub(crate) fn view(&self, server: &str) -> View {
        let slots: Vec<Arc<Slot>> =
            self.slots.lock().iter().filter(|((_, s), _)| s == server).map(|(_, slot)| slot.clone()).collect();
        let users = slots.iter().filter(|slot| slot.state.lock().tokens.is_some()).count() as u64;
        let exchanged = self.exchanged.lock().keys().filter(|(_, s)| s == server).count() as u64;
        let counters = self.counters(server);
        View {
            users: users + exchanged,
            refreshes: counters.refreshes.get(),
            failures: counters.failures.get(),
            signins: counters.signins.get(),
            waiting: self.flows.lock().waiting(server),
        }
    }

    /// The client ID metadata document mcpgate serves.
    pub(crate) fn metadata_document(&self) -> Value {
        let settings = self.settings();
        register::metadata_document(&settings.client.metadata_document_url(), &settings.client.redirect_uri())
    }
}

/// A user's token record's name in the store.
fn token_record(user: &User, server: &str) -> String {
    format!("token/{}/{server}", user_key(user))
}

/// A registration's record name: by issuer and redirect URI.
fn client_record(issuer: &str, redirect_uri: &str) -> String {
    let digest = crate::runtime::sha256::digest(format!("{issuer}\n{redirect_uri}").as_bytes());
    format!("client/{}", crate::runtime::sha256::to_hex(&digest))
}

/// The store of `config`, with its key.
fn open_store(config: &Config) -> Result<store::Store, String> {
    let path = store::store_path(&config.oauth_client, config.state_file.as_deref());
    let (key, from) = store::load_key(&config.oauth_client, path.as_deref())?;
    let store = store::Store::open(path.clone(), key, &from)?;
    match &path {
        Some(path) => log::info!("OAuth: users' tokens are kept in {}, encrypted with {from}", path.display()),
        None => log::warn!(
            "OAuth: users' tokens are kept in memory only (no state_file, no oauth_client.store_file): a restart \
             asks every user to sign in again"
        ),
    }
    Ok(store)
}

/// Why there is no store: no server signs users in.
const NO_STORE: &str = "no server signs users in";

/// Whether a server of `config` signs users in (not by exchange): then
/// their tokens need a store.
fn wants_store(config: &Config) -> bool {
    config.servers.iter().any(|s| {
        matches!(&s.transport, crate::config::Transport::Http(HttpConfig { oauth: Some(o), .. }) if !o.token_exchange)
    })
}

/// Whose sign-ins and tokens a link serves.
impl Authorizer {
    /// The sign-in `id`, if it is there (waiting, or ended and not expired).
    pub(crate) fn flow(&self, id: &str) -> Option<FlowView> {
        let flows = self.flows.lock();
        let flow = flows.get(id)?;
        Some(FlowView {
            user: flow.user,
            server: flow.server.clone(),
            identified: flow.identified,
            done: flow.done.clone(),
        })
    }

    /// The browser that opened the link of `id` proved it is its user.
    pub(crate) fn identified(&self, id: &str) {
        if let Some(flow) = self.flows.lock().get_mut(id) {
            flow.identified = true;
        }
    }

    /// The client session `session` was given the link of `id`.
    pub(crate) fn given_to(&self, id: &str, session: &str) {
        self.flows.lock().given_to(id, session);
    }

    /// Starts a sign-in at mcpgate's own issuer for the link `id`, to learn
    /// who opened it: where to send the browser, and its cookie.
    pub(crate) fn identity_start(&self, id: &str) -> Result<(String, String), String> {
        let target = self.identity_target()?;
        let (state, challenge, cookie) = self.flows.lock().begin(id, Purpose::Identity, target.clone())?;
        Ok((flow::authorize_url(&target, &state, &challenge), cookie))
    }

    /// mcpgate's own client at `auth.oauth.issuer`.
    fn identity_target(&self) -> Result<Arc<Target>, String> {
        if let Some((target, at)) = &*self.identity.lock()
            && at.elapsed() < KNOWN_FOR
        {
            return Ok(target.clone());
        }
        let settings = self.settings();
        let inbound = settings.inbound.as_ref().ok_or("mcpgate has no auth.oauth to sign users in with")?;
        let agent = fetch::agent(&settings.trust, settings.connect);
        let metadata = discovery::authorization_server(&agent, &inbound.issuer)?;
        let given = register::Given {
            client_id: settings.client.client_id.as_deref(),
            client_secret: settings.client.client_secret.as_deref(),
            metadata_url: None,
        };
        let client = self.client_at(&agent, &metadata, &given, &settings.client, &inbound.required_scopes)?;
        let target = Arc::new(Target {
            issuer: metadata.issuer.clone(),
            authorization_endpoint: metadata.authorization_endpoint.clone(),
            token_endpoint: metadata.token_endpoint.clone(),
            sends_iss: metadata.sends_iss,
            client,
            resource: inbound.resource.clone(),
            scopes: inbound.required_scopes.clone(),
            trust: settings.trust.clone(),
        });
        *self.identity.lock() = Some((target.clone(), Instant::now()));
        Ok(target)
    }

    /// mcpgate's client at `metadata`'s server: configured, its metadata
    /// document, one registered before (the store), or registered now.
    fn client_at(
        &self,
        agent: &ureq::Agent,
        metadata: &discovery::AuthorizationServer,
        given: &register::Given<'_>,
        settings: &OAuthClientConfig,
        scopes: &[String],
    ) -> Result<Client, String> {
        let redirect = settings.redirect_uri();
        if let Some(client) =
            register::without_registering(given, metadata, &settings.metadata_document_url(), &redirect)
        {
            return Ok(client);
        }
        let record = client_record(&metadata.issuer, &redirect);
        let store = self.store().ok();
        if let Some(client) =
            store.as_ref().and_then(|s| s.read(&record)).and_then(|v| serde_json::from_value::<Client>(v).ok())
            && client.redirect_uri == redirect
        {
            return Ok(client);
        }
        let client = register::register(agent, metadata, &redirect, scopes)?;
        log::info!("OAuth: registered mcpgate at {} as client `{}`", metadata.issuer, client.client_id);
        if let Some(store) = store
            && let Err(e) = store.put(&record, serde_json::to_value(&client).ok().as_ref())
        {
            log::error!("OAuth: {e}: the registration at {} is not kept; a restart registers again", metadata.issuer);
        }
        Ok(client)
    }

    /// A callback from an authorization server (`query`: its query string),
    /// from a browser with `cookies` (the sign-in pages'); or pasted by `mcpgate login` by the
    /// user `proved`. Takes the attempt once, checks `iss`, and trades the
    /// code for tokens.
    pub(crate) fn callback(&self, query: &str, cookies: &[&str], proved: Option<User>) -> Result<Completed, String> {
        let state = fetch::query_value(query, "state");
        let (id, attempt) =
            self.flows.lock().take(state.as_deref(), cookies, proved).map_err(|refusal| refusal.to_string())?;
        let result = self.trade(query, &id, &attempt);
        if let Err(why) = &result {
            if attempt.purpose == Purpose::Authorize {
                let server = self.flows.lock().get(&id).map(|f| f.server.clone()).unwrap_or_default();
                self.counters(&server).failures.inc();
            }
            log::warn!("OAuth: a sign-in at {} failed: {why}", attempt.target.issuer);
        }
        result
    }

    fn trade(&self, query: &str, id: &str, attempt: &flow::Attempt) -> Result<Completed, String> {
        let target = &attempt.target;
        if let Some(error) = fetch::query_value(query, "error") {
            let said = fetch::query_value(query, "error_description").map(|d| format!(" ({})", fetch::printable(&d)));
            return Err(format!(
                "{} answered `{}`{}: nothing was signed in",
                target.issuer,
                fetch::printable(&error),
                said.unwrap_or_default()
            ));
        }
        // RFC 9207: where the server sends `iss`, it must be this one.
        match fetch::query_value(query, "iss") {
            Some(iss) if iss != target.issuer => {
                return Err(format!(
                    "the callback says it comes from issuer `{}`, not {}: refused (RFC 9207, a mix-up attack)",
                    fetch::printable(&iss),
                    target.issuer
                ));
            }
            None if target.sends_iss => {
                return Err(format!(
                    "{} says it sends `iss` with its callbacks, and this one has none: refused (RFC 9207)",
                    target.issuer
                ));
            }
            _ => {}
        }
        let code = fetch::query_value(query, "code").filter(|c| !c.is_empty()).ok_or("the callback has no code")?;
        let settings = self.settings();
        let agent = fetch::agent(&target.trust, settings.connect);
        let pairs = vec![
            ("grant_type", "authorization_code"),
            ("code", code.as_str()),
            ("redirect_uri", target.client.redirect_uri.as_str()),
            ("code_verifier", attempt.verifier.as_str()),
            ("resource", target.resource.as_str()),
        ];
        let tokens =
            tokens::request(&agent, &target.token_endpoint, &target.issuer, &target.client, pairs, &target.scopes)
                .map_err(|e| e.to_string())?;
        if attempt.purpose == Purpose::Identity {
            return Ok(Completed::Identity { id: id.to_string(), access_token: tokens.access_token });
        }
        let (user, server) = {
            let flows = self.flows.lock();
            let flow = flows.get(id).ok_or(Refusal::Expired.to_string())?;
            (flow.user, flow.server.clone())
        };
        self.keep(&user, &server, tokens)?;
        self.counters(&server).signins.inc();
        let sessions = self.flows.lock().finish(id, Ok(()));
        log::info!("OAuth: user {} signed in to server `{server}` ({})", short(&user), target.issuer);
        Ok(Completed::Authorized { id: id.to_string(), server, user, sessions })
    }

    /// Keeps `tokens` for the user and server: written to the store first,
    /// then in memory.
    fn keep(&self, user: &User, server: &str, tokens: Tokens) -> Result<(), String> {
        let store = self.store()?;
        let value = serde_json::to_value(&tokens).map_err(|e| e.to_string())?;
        if let Err(e) = store.put(&token_record(user, server), Some(&value)) {
            // Kept in memory all the same: the user is not asked again until a restart.
            log::error!("OAuth: {e}: a token for `{server}` is kept in memory only");
        }
        let charge = Charge::new(tokens.size())
            .ok_or("mcpgate holds its limit of max_memory_mb: the token could not be kept; try again later")?;
        let slot = self.slot(user, server);
        let mut st = slot.state.lock();
        st.tokens = Some(tokens);
        st.charge = Some(charge);
        drop(st);
        slot.changed.notify_all();
        Ok(())
    }

    /// `mcpgate login`: the state of the sign-in `id` of `user`.
    pub(crate) fn login_state(&self, id: &str, user: &User) -> Option<Option<Result<(), String>>> {
        let flows = self.flows.lock();
        let flow = flows.get(id).filter(|f| f.user == *user)?;
        Some(flow.done.clone())
    }

    /// Drops what is past its time: sign-ins, subjects; the reaper's job.
    pub(crate) fn expire(&self) {
        self.flows.lock().expire(Instant::now());
        let now = crate::runtime::clock::unix_now();
        self.subjects.lock().retain(|_, s| s.expires > now);
        self.exchanged.lock().retain(|_, e| e.expires > now);
    }
}
