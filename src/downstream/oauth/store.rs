//! Users' tokens and mcpgate's registrations at rest: one JSON file of
//! records, each sealed on its own with AES-256-GCM (ring) under a key that
//! never comes from the configuration: a file of mode 0600 (`key_file`),
//! systemd's credential `mcpgate-oauth-key` (`LoadCredential=`), or one
//! made at first start beside the store. A record's name is its associated
//! data, so a record moved under another name (another user's) does not
//! open. The file is written whole, mode 0600, to a temporary file that is
//! synced and renamed over it: a crash leaves the old file or the new one.
//!
//! Without a place to keep them (no `store_file`, no state file) records
//! live in memory only, under a key made at start, and a restart asks
//! users to sign in again.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use base64::Engine;
use parking_lot::Mutex;
use ring::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use serde_json::{Value, json};

use crate::config::OAuthClientConfig;

/// The credential name under `$CREDENTIALS_DIRECTORY`.
pub(crate) const CREDENTIAL: &str = "mcpgate-oauth-key";
/// The format this code writes.
const FORMAT: u64 = 1;

/// The sealed records, and where they are written.
pub(crate) struct Store {
    path: Option<PathBuf>,
    key: LessSafeKey,
    /// Guards the sealed records by name (base64 of nonce, ciphertext and tag).
    records: Mutex<BTreeMap<String, String>>,
    /// Serializes writes of the file: each writes what the records hold
    /// when it takes this, so a later write never loses to an earlier one.
    writing: Mutex<()>,
}

/// Where the store and its key are for `config`, beside `state_file`.
pub(crate) fn store_path(config: &OAuthClientConfig, state_file: Option<&Path>) -> Option<PathBuf> {
    config.store_file.clone().or_else(|| state_file.map(|s| PathBuf::from(format!("{}.oauth", s.display()))))
}

/// A 32-byte key from a file's bytes: 32 raw bytes, or 64 hex digits.
fn key_bytes(bytes: &[u8], whence: &str) -> Result<[u8; 32], String> {
    let text = std::str::from_utf8(bytes).map(str::trim).unwrap_or("");
    if text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit()) {
        let mut key = [0u8; 32];
        for (i, byte) in key.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).map_err(|e| e.to_string())?;
        }
        return Ok(key);
    }
    <[u8; 32]>::try_from(bytes)
        .map_err(|_| format!("{whence} holds {} bytes: a key is 32 bytes, or 64 hex digits", bytes.len()))
}

/// Reads a key file, refusing one that others may read.
fn read_key(path: &Path) -> Result<[u8; 32], String> {
    let whence = path.display().to_string();
    let meta = std::fs::metadata(path).map_err(|e| format!("the key file {whence}: {e}"))?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(format!(
            "the key file {whence} has mode {mode:04o}, so others may read it: `chmod 600 {whence}` (tokens are \
             encrypted with it)"
        ));
    }
    let bytes = std::fs::read(path).map_err(|e| format!("the key file {whence}: {e}"))?;
    key_bytes(&bytes, &whence)
}

/// The key, and where it came from (for the log): `key_file`, the
/// credential, or `oauth.key` beside the store (made now when missing).
pub(crate) fn load_key(config: &OAuthClientConfig, store: Option<&Path>) -> Result<([u8; 32], String), String> {
    if let Some(path) = &config.key_file {
        return Ok((read_key(path)?, format!("key_file {}", path.display())));
    }
    if let Some(dir) = std::env::var_os("CREDENTIALS_DIRECTORY") {
        let path = Path::new(&dir).join(CREDENTIAL);
        if path.exists() {
            return Ok((read_key(&path)?, format!("the credential {CREDENTIAL}")));
        }
    }
    let Some(store) = store else {
        let mut key = [0u8; 32];
        crate::runtime::sys::random(&mut key).map_err(|e| format!("no random bytes for a key: {e}"))?;
        return Ok((key, "a key made for this run (tokens are kept in memory only)".into()));
    };
    let path = store.with_file_name("oauth.key");
    if path.exists() {
        return Ok((read_key(&path)?, path.display().to_string()));
    }
    let mut key = [0u8; 32];
    crate::runtime::sys::random(&mut key).map_err(|e| format!("no random bytes for a key: {e}"))?;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .map_err(|e| format!("cannot make the key file {}: {e}", path.display()))?;
    file.write_all(format!("{}\n", crate::runtime::sha256::to_hex(&key)).as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|e| format!("cannot write the key file {}: {e}", path.display()))?;
    log::info!("OAuth: made the key {} (mode 0600) for the tokens kept in {}", path.display(), store.display());
    Ok((key, path.display().to_string()))
}

impl Store {
    /// The store at `path` (`None`: memory only), read now; what does not
    /// open with `key` is left out, and said once.
    pub(crate) fn open(path: Option<PathBuf>, key: [u8; 32], key_from: &str) -> Result<Store, String> {
        let key = LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &key).map_err(|_| "bad key".to_string())?);
        let store = Store { path, key, records: Mutex::new(BTreeMap::new()), writing: Mutex::new(()) };
        let Some(path) = &store.path else { return Ok(store) };
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(store),
            Err(e) => return Err(format!("cannot read the OAuth store {}: {e}", path.display())),
        };
        let doc: Value = serde_json::from_str(&text).map_err(|e| {
            format!("the OAuth store {} is not JSON ({e}): move it away to start afresh", path.display())
        })?;
        if doc["format"].as_u64() != Some(FORMAT) {
            return Err(format!(
                "the OAuth store {} is of format {}, which this mcpgate does not read",
                path.display(),
                doc["format"]
            ));
        }
        let mut kept = BTreeMap::new();
        let mut unopened = 0;
        for (name, sealed) in doc["records"].as_object().into_iter().flatten() {
            let Some(sealed) = sealed.as_str() else { continue };
            if store.unseal(name, sealed).is_some() {
                kept.insert(name.clone(), sealed.to_string());
            } else {
                unopened += 1;
            }
        }
        if unopened > 0 {
            log::error!(
                "OAuth: {unopened} record(s) of {} do not open with the key from {key_from} (another key, or \
                 altered): left out; their users sign in again",
                path.display()
            );
        }
        *store.records.lock() = kept;
        Ok(store)
    }

    fn seal(&self, name: &str, plain: &[u8]) -> Option<String> {
        let mut nonce = [0u8; NONCE_LEN];
        crate::runtime::sys::random(&mut nonce).ok()?;
        let mut sealed = plain.to_vec();
        self.key
            .seal_in_place_append_tag(Nonce::assume_unique_for_key(nonce), Aad::from(name.as_bytes()), &mut sealed)
            .ok()?;
        let mut out = nonce.to_vec();
        out.extend_from_slice(&sealed);
        Some(base64::engine::general_purpose::STANDARD.encode(out))
    }

    fn unseal(&self, name: &str, sealed: &str) -> Option<Vec<u8>> {
        let bytes = base64::engine::general_purpose::STANDARD.decode(sealed).ok()?;
        if bytes.len() < NONCE_LEN {
            return None;
        }
        let (nonce, rest) = bytes.split_at(NONCE_LEN);
        let mut rest = rest.to_vec();
        let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
        let plain = self.key.open_in_place(nonce, Aad::from(name.as_bytes()), &mut rest).ok()?;
        Some(plain.to_vec())
    }

    /// Every record whose name starts with `prefix`, opened.
    pub(crate) fn read_all(&self, prefix: &str) -> Vec<(String, Value)> {
        let sealed: Vec<(String, String)> = self
            .records
            .lock()
            .range(prefix.to_string()..)
            .take_while(|(name, _)| name.starts_with(prefix))
            .map(|(n, s)| (n.clone(), s.clone()))
            .collect();
        sealed
            .into_iter()
            .filter_map(|(name, s)| {
                let plain = self.unseal(&name, &s)?;
                Some((name, serde_json::from_slice(&plain).ok()?))
            })
            .collect()
    }

    /// One record, opened.
    pub(crate) fn read(&self, name: &str) -> Option<Value> {
        let sealed = self.records.lock().get(name).cloned()?;
        serde_json::from_slice(&self.unseal(name, &sealed)?).ok()
    }

    /// Sets (`Some`) or removes (`None`) a record, and writes the file
    /// before it returns: what the caller does next (use a rotated refresh
    /// token) happens only once the record is safe.
    pub(crate) fn put(&self, name: &str, value: Option<&Value>) -> Result<(), String> {
        let sealed = match value {
            Some(value) => {
                Some(self.seal(name, value.to_string().as_bytes()).ok_or("cannot seal a record (no random bytes)")?)
            }
            None => None,
        };
        let _writing = self.writing.lock();
        {
            let mut records = self.records.lock();
            match sealed {
                Some(sealed) => records.insert(name.to_string(), sealed),
                None => records.remove(name),
            };
        }
        self.write()
    }

    /// Writes the file from what the records hold now (the caller holds `writing`).
    fn write(&self) -> Result<(), String> {
        let Some(path) = &self.path else { return Ok(()) };
        let records = self.records.lock().clone();
        let doc = json!({ "format": FORMAT, "records": records });
        let tmp = PathBuf::from(format!("{}.tmp", path.display()));
        let result = (|| -> std::io::Result<()> {
            let _ = std::fs::remove_file(&tmp);
            let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp)?;
            file.write_all(doc.to_string().as_bytes())?;
            file.sync_all()?;
            std::fs::rename(&tmp, path)?;
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::File::open(dir)?.sync_all()?;
            }
            Ok(())
        })();
        result.map_err(|e| format!("cannot write the OAuth store {}: {e}", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("mcpgate-store-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn records_come_back_after_a_reopen_and_are_not_in_clear_in_the_file() {
        let dir = dir("reopen");
        let path = dir.join("store.oauth");
        let store = Store::open(Some(path.clone()), [7; 32], "test").unwrap();
        store.put("token/a/files", Some(&json!({"access_token": "secret-access-123"}))).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.contains("secret-access-123"), "{text}");
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        let again = Store::open(Some(path.clone()), [7; 32], "test").unwrap();
        assert_eq!(again.read("token/a/files").unwrap()["access_token"], "secret-access-123");
        assert_eq!(again.read_all("token/").len(), 1);
        again.put("token/a/files", None).unwrap();
        assert!(Store::open(Some(path), [7; 32], "test").unwrap().read("token/a/files").is_none());
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_record_moved_to_another_name_or_opened_with_another_key_does_not_open() {
        let dir = dir("moved");
        let path = dir.join("store.oauth");
        let store = Store::open(Some(path.clone()), [1; 32], "test").unwrap();
        store.put("token/alice/files", Some(&json!({"t": 1}))).unwrap();
        let sealed = store.records.lock().get("token/alice/files").cloned().unwrap();
        assert!(store.unseal("token/mallory/files", &sealed).is_none());
        let other = Store::open(Some(path), [2; 32], "test").unwrap();
        assert!(other.read("token/alice/files").is_none());
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_key_file_others_may_read_is_refused_and_one_is_made_when_missing() {
        let dir = dir("key");
        let key = dir.join("k");
        std::fs::write(&key, "ab".repeat(32)).unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
        let mut config =
            crate::config::Config::parse(r#"{"mcpServers": {"a": {"url": "http://127.0.0.1:1/mcp"}}}"#, &|_| None)
                .unwrap()
                .oauth_client;
        config.key_file = Some(key.clone());
        assert!(load_key(&config, None).unwrap_err().contains("chmod 600"));
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(load_key(&config, None).unwrap().0, [0xab; 32]);
        config.key_file = None;
        let store = dir.join("s.oauth");
        let (made, _) = load_key(&config, Some(&store)).unwrap();
        let file = dir.join("oauth.key");
        assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(load_key(&config, Some(&store)).unwrap().0, made, "the same key at the next start");
        let _ = std::fs::remove_dir_all(dir);
    }
}
