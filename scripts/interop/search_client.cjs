// tool_search through mcpgate with the official TypeScript client: the same checks as
// search_checks.py. node search_client.cjs URL PINNED QUERY EXPECT (CLIENTS_DIR: the SDK's install).
// Prints `1<TAB>check<TAB>detail` (passed) or `0<TAB>...` per check.
const path = require("node:path");
const { createRequire } = require("node:module");

const sdk = createRequire(path.join(process.env.CLIENTS_DIR, "package.json"));
const { Client } = sdk("@modelcontextprotocol/sdk/client/index.js");
const { StreamableHTTPClientTransport } = sdk("@modelcontextprotocol/sdk/client/streamableHttp.js");

async function main() {
  const [url, pinned, query, expect] = process.argv.slice(2);
  const client = new Client({ name: "mcpgate-interop-search", version: "1.0" });
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  const rows = [];
  const names = (await client.listTools()).tools.map((t) => t.name);
  rows.push([JSON.stringify(names) === JSON.stringify(["find_tools", "call_tool", pinned]),
    "tools/list: find_tools, call_tool, the pinned", JSON.stringify(names)]);
  const found = await client.callTool({ name: "find_tools", arguments: { query } });
  const first = found.structuredContent?.tools?.[0]?.name ?? null;
  rows.push([first === expect, `find_tools "${query}" answers ${expect} first`, `first: ${first}`]);
  const called = await client.callTool({ name: "call_tool", arguments: { name: expect, arguments: { text: "found and called" } } });
  const text = (called.content || []).map((c) => c.text || "").join(" ");
  rows.push([text === "found and called" && !called.isError, "call_tool calls it", JSON.stringify(text)]);
  await client.close();
  for (const [ok, name, detail] of rows) console.log(`${ok ? 1 : 0}\t${name}\t${detail}`);
  process.exit(rows.every((r) => r[0]) ? 0 : 1);
}
main().catch((e) => {
  console.log(`0\tthe TypeScript client ran\t${String(e).split("\n")[0]}`);
  process.exit(1);
});
