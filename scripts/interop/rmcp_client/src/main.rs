//! The client matrix's rmcp client: the official Rust SDK's client (rmcp 3.11.0), in its
//! `auto` lifecycle (server/discover, then `initialize` where the server is not of
//! 2026-07-28), driven over stdin and stdout by client_rmcp.py, which runs flow.py's flow.
//!
//! One JSON command per line on stdin (`{"op": "connect", "url": ...}`, `list`, `call`,
//! `prompt`, `read`, `set_level`, `subscribe`, `call_then_cancel`, `close`); one line per
//! answer on stdout (`{"reply": ...}` or `{"error": "..."}`), and between them the
//! notifications it got and the server requests it answered (`{"event": ...}`).

// Sampling, roots and logging are deprecated in 2026-07-28 (SEP-2577); the matrix uses them on purpose.
#![allow(deprecated)]

use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, ClientConfig, CreateMessageRequestParams, CreateMessageResult, ElicitRequestParams,
    ElicitResult, GetPromptRequestParams, ListRootsResult, LoggingMessageNotificationParam, PaginatedRequestParams,
    ProgressNotificationParam, ProtocolVersion, ReadResourceRequestParams, ResourceUpdatedNotificationParam,
    SetLevelRequestParams, SubscribeRequestParams, UnsubscribeRequestParams,
};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, NotificationContext, RequestContext, RoleClient};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ClientHandler, ErrorData};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

const SAMPLED: &str = "interop-sampled-text";
const ROOT_URI: &str = "file:///tmp/interop-root";

/// What the client answers and tells: lines for stdout.
#[derive(Clone)]
struct Matrix {
    out: mpsc::UnboundedSender<Value>,
}

impl Matrix {
    fn event(&self, event: Value) {
        let _ = self.out.send(json!({ "event": event }));
    }

    fn notification(&self, method: &str, params: Result<Value, serde_json::Error>) {
        self.event(json!({ "notification": method, "params": params.unwrap_or(Value::Null) }));
    }
}

/// A value for a field of an elicitation form, as flow.py's `value_for`.
fn value_for(prop: &Value) -> Value {
    if let Some(first) = prop["enum"].get(0) {
        return first.clone();
    }
    if let Some(first) = prop["oneOf"].get(0) {
        return first["const"].clone();
    }
    match prop["type"].as_str() {
        Some("integer") => json!(prop["minimum"].as_i64().unwrap_or(7)),
        Some("number") => json!(prop["minimum"].as_f64().unwrap_or(1.5)),
        Some("boolean") => json!(true),
        Some("array") => json!([value_for(&prop["items"])]),
        _ => json!(match prop["format"].as_str() {
            Some("email") => "interop@example.com",
            Some("uri") => "https://example.com",
            Some("date") => "2000-01-01",
            _ => "Interop",
        }),
    }
}

/// flow.py's `fill_form`: every default, and a value for each required field.
fn fill_form(schema: &Value) -> Value {
    let required: Vec<&str> = schema["required"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    let mut content = serde_json::Map::new();
    for (name, prop) in schema["properties"].as_object().into_iter().flatten() {
        if let Some(default) = prop.get("default") {
            content.insert(name.clone(), default.clone());
        } else if required.contains(&name.as_str()) {
            content.insert(name.clone(), value_for(prop));
        }
    }
    Value::Object(content)
}

fn internal(e: serde_json::Error) -> ErrorData {
    ErrorData::internal_error(e.to_string(), None)
}

impl ClientHandler for Matrix {
    async fn create_message(
        &self,
        _params: CreateMessageRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        self.event(json!({ "callback": "sampling" }));
        serde_json::from_value(
            json!({"role": "assistant", "content": {"type": "text", "text": SAMPLED}, "model": "interop",
            "stopReason": "endTurn"}),
        )
        .map_err(internal)
    }

    async fn list_roots(&self, _context: RequestContext<RoleClient>) -> Result<ListRootsResult, ErrorData> {
        self.event(json!({ "callback": "roots" }));
        serde_json::from_value(json!({"roots": [{"uri": ROOT_URI, "name": "interop-root"}]})).map_err(internal)
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        self.event(json!({ "callback": "elicitation" }));
        let request = serde_json::to_value(request).unwrap_or(Value::Null);
        match request.get("requestedSchema") {
            Some(schema) => serde_json::from_value(json!({"action": "accept", "content": fill_form(schema)})),
            None => serde_json::from_value(json!({"action": "decline"})),
        }
        .map_err(internal)
    }

    async fn on_progress(&self, params: ProgressNotificationParam, _context: NotificationContext<RoleClient>) {
        self.notification("notifications/progress", serde_json::to_value(params));
    }

    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.notification("notifications/message", serde_json::to_value(params));
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.notification("notifications/resources/updated", serde_json::to_value(params));
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.notification("notifications/tools/list_changed", Ok(json!({})));
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.notification("notifications/resources/list_changed", Ok(json!({})));
    }

    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.notification("notifications/prompts/list_changed", Ok(json!({})));
    }

    fn get_info(&self) -> ClientConfig {
        serde_json::from_value(json!({
            "protocolVersion": "2025-11-25",
            "capabilities": {"sampling": {}, "elicitation": {"form": {}}, "roots": {"listChanged": true}},
            "clientInfo": {"name": "interop-matrix-rmcp", "version": "1.0"},
        }))
        .unwrap_or_default()
    }
}

type Running = rmcp::service::RunningService<RoleClient, Matrix>;

fn text_of(result: &Value, field: &str) -> String {
    let items = result[field].as_array().cloned().unwrap_or_default();
    let texts = items.iter().filter_map(|c| c["text"].as_str().or(c["content"]["text"].as_str()));
    texts.collect::<Vec<_>>().join("\n")
}

fn failed(e: impl std::fmt::Display) -> String {
    e.to_string()
}

async fn run(client: &Option<Running>, handler: &Matrix, command: &Value) -> Result<Value, String> {
    let peer = || client.as_ref().map(|c| c.peer().clone()).ok_or_else(|| "not connected".to_string());
    let args = command["args"].as_object().cloned();
    match command["op"].as_str().unwrap_or_default() {
        "list" => {
            let params: Option<PaginatedRequestParams> = command["cursor"]
                .as_str()
                .map(|c| serde_json::from_value(json!({ "cursor": c })))
                .transpose()
                .map_err(failed)?;
            let peer = peer()?;
            let (page, field, key) = match command["kind"].as_str().unwrap_or_default() {
                "tools" => (serde_json::to_value(peer.list_tools(params).await.map_err(failed)?), "tools", "name"),
                "prompts" => {
                    (serde_json::to_value(peer.list_prompts(params).await.map_err(failed)?), "prompts", "name")
                }
                "resources" => {
                    (serde_json::to_value(peer.list_resources(params).await.map_err(failed)?), "resources", "uri")
                }
                _ => (
                    serde_json::to_value(peer.list_resource_templates(params).await.map_err(failed)?),
                    "resourceTemplates",
                    "uriTemplate",
                ),
            };
            let page = page.map_err(failed)?;
            let items: Vec<Value> = page[field].as_array().into_iter().flatten().map(|i| i[key].clone()).collect();
            Ok(json!({ "items": items, "next": page["nextCursor"] }))
        }
        "call" => {
            // rmcp puts a progressToken of its own in each request.
            let params = json!({ "name": command["name"], "arguments": args });
            let params: CallToolRequestParams = serde_json::from_value(params).map_err(failed)?;
            let result = serde_json::to_value(peer()?.call_tool(params).await.map_err(failed)?).map_err(failed)?;
            Ok(json!({ "text": text_of(&result, "content"), "is_error": result["isError"] == true }))
        }
        "call_then_cancel" => {
            let params: CallToolRequestParams =
                serde_json::from_value(json!({ "name": command["name"], "arguments": args })).map_err(failed)?;
            let after = Duration::from_millis(command["after_ms"].as_u64().unwrap_or(500));
            let peer = peer()?;
            // The call's future dropped: rmcp sends notifications/cancelled for it.
            let outcome = tokio::time::timeout(after, peer.call_tool(params)).await;
            Ok(json!({ "cancelled": outcome.is_err() }))
        }
        "prompt" => {
            let params: GetPromptRequestParams =
                serde_json::from_value(json!({ "name": command["name"], "arguments": args })).map_err(failed)?;
            let result = serde_json::to_value(peer()?.get_prompt(params).await.map_err(failed)?).map_err(failed)?;
            let texts: Vec<String> = result["messages"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|m| m["content"]["text"].as_str().map(str::to_string))
                .collect();
            Ok(json!({ "text": texts.join(" ") }))
        }
        "read" => {
            let params: ReadResourceRequestParams =
                serde_json::from_value(json!({ "uri": command["uri"] })).map_err(failed)?;
            let result = serde_json::to_value(peer()?.read_resource(params).await.map_err(failed)?).map_err(failed)?;
            Ok(json!({ "text": text_of(&result, "contents") }))
        }
        "set_level" => {
            let params: SetLevelRequestParams =
                serde_json::from_value(json!({ "level": command["level"] })).map_err(failed)?;
            peer()?.set_level(params).await.map_err(failed)?;
            Ok(json!({}))
        }
        "subscribe" => {
            let peer = peer()?;
            if command["on"] == true {
                let params: SubscribeRequestParams =
                    serde_json::from_value(json!({ "uri": command["uri"] })).map_err(failed)?;
                peer.subscribe(params).await.map_err(failed)?;
            } else {
                let params: UnsubscribeRequestParams =
                    serde_json::from_value(json!({ "uri": command["uri"] })).map_err(failed)?;
                peer.unsubscribe(params).await.map_err(failed)?;
            }
            Ok(json!({}))
        }
        other => {
            let _ = handler;
            Err(format!("unknown command `{other}`"))
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let (out, mut lines) = mpsc::unbounded_channel::<Value>();
    let writer = tokio::spawn(async move {
        let mut stdout = tokio::io::stdout();
        while let Some(line) = lines.recv().await {
            let mut text = line.to_string();
            text.push('\n');
            if stdout.write_all(text.as_bytes()).await.is_err() || stdout.flush().await.is_err() {
                break;
            }
        }
    });
    let handler = Matrix { out: out.clone() };
    let mut client: Option<Running> = None;
    let mut stdin = BufReader::new(tokio::io::stdin()).lines();
    while let Ok(Some(line)) = stdin.next_line().await {
        let Ok(command) = serde_json::from_str::<Value>(&line) else {
            let _ = out.send(json!({ "error": format!("not JSON: {line}") }));
            continue;
        };
        let answer = match command["op"].as_str().unwrap_or_default() {
            "connect" => {
                let url = command["url"].as_str().unwrap_or_default().to_string();
                let transport = StreamableHttpClientTransport::from_uri(url);
                // rmcp's auto mode as an application would ask for it: the newest era first, the
                // newest session-era version to fall back to.
                let lifecycle = ClientLifecycleMode::Auto {
                    preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                    legacy_version: Some(ProtocolVersion::V_2025_11_25),
                };
                match handler.clone().serve_with_lifecycle(transport, lifecycle).await {
                    Ok(running) => {
                        let info = serde_json::to_value(running.peer().peer_info()).unwrap_or(Value::Null);
                        let text = format!(
                            "protocol {}, server {}",
                            info["protocolVersion"].as_str().unwrap_or("?"),
                            info["serverInfo"]["name"].as_str().unwrap_or("?")
                        );
                        client = Some(running);
                        json!({ "reply": { "info": text } })
                    }
                    Err(e) => json!({ "error": format!("{e}") }),
                }
            }
            "close" => {
                if let Some(mut running) = client.take() {
                    let _ = running.close_with_timeout(Duration::from_secs(5)).await;
                }
                let _ = out.send(json!({ "reply": {} }));
                break;
            }
            _ => match run(&client, &handler, &command).await {
                Ok(reply) => json!({ "reply": reply }),
                Err(e) => json!({ "error": e }),
            },
        };
        let _ = out.send(answer);
    }
    drop(handler);
    drop(out);
    drop(client);
    let _ = tokio::time::timeout(Duration::from_secs(2), writer).await;
}
