// A tool call through `oncelog gateway` with the Vercel AI SDK's MCP client
// (@ai-sdk/mcp), as `generateText` would make it: the run in a header, the call named by
// its tool and arguments (the client sends no `_meta`). Driven by
// tests/test_gateway_typescript.py; it prints one JSON line: the result or the error.
//
//   node ai_sdk_call.mjs '{"url": "...", "token": "...", "run": "ticket-1",
//                          "tool": "delete_account", "arguments": {"customer": "cus_1"}}'
import { createMCPClient } from "@ai-sdk/mcp";

const spec = JSON.parse(process.argv[2]);
const emit = (event) => process.stdout.write(JSON.stringify(event) + "\n");

const mcp = await createMCPClient({
  transport: {
    type: "http",
    url: spec.url,
    headers: { Authorization: `Bearer ${spec.token}`, "Oncelog-Run-Id": spec.run },
  },
});
try {
  const tools = await mcp.tools();
  const result = await tools[spec.tool].execute(spec.arguments, { toolCallId: "call_1", messages: [] });
  emit({ event: "result", result });
} catch (error) {
  emit({ event: "error", name: error?.name, message: String(error?.message ?? error) });
} finally {
  await mcp.close();
}
