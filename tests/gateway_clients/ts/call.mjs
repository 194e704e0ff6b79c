// A TypeScript agent's tool call through `oncelog gateway`, with the official MCP SDK
// (@modelcontextprotocol/client, protocol 2026-07-28, Streamable HTTP). Driven by
// tests/test_gateway_typescript.py; it reports what happens as JSON lines on stdout.
//
//   node call.mjs '{"urls": ["http://127.0.0.1:8765/mcp"], "token": "...", "run": "ticket-1",
//                   "callId": "call_1", "tool": "refund", "arguments": {"order_id": 42},
//                   "retryFor": 60, "approve": "stdin", "requestState": null}'
//
// - The call carries its run and its name in `_meta` (`io.oncelog/run-id`,
//   `io.oncelog/call-id`), so re-issued under a new request id, to a restarted gateway or
//   to another replica, it is the same step.
// - A broken exchange (the gateway died mid-call) is what the specification says to do
//   about: the same client re-issues the call as a new request, with a new id, here to the
//   next URL of `urls` (round robin, as a load balancer would) until `retryFor` seconds
//   have passed. A JSON-RPC error or an HTTP refusal from the gateway is an answer, never
//   retried.
// - An approval arrives as an `input_required` result carrying a URL-mode elicitation. The
//   SDK's multi-round-trip driver hands it to the `elicitation/create` handler below,
//   which prints the URL and, with `approve: "stdin"`, waits for a line on stdin (the test
//   has a person decide meanwhile) before accepting; the driver then retries the call
//   with the server's `requestState`. `"manual"` turns the driver off and prints the
//   input_required result itself (its `requestState` is what a replay test re-sends).
// - `requestState` (with `inputResponses`) sends the call once with that state, as a
//   client replaying an old one would.
import { createInterface } from "node:readline";
import {
  Client,
  ProtocolError,
  SdkHttpError,
  StreamableHTTPClientTransport,
  UnauthorizedError,
} from "@modelcontextprotocol/client";

const spec = JSON.parse(process.argv[2]);
const emit = (event) => process.stdout.write(JSON.stringify(event) + "\n");
const stdinLines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();

// The client's own load balancer: every HTTP request goes to the current URL of `urls`,
// and a broken exchange moves it on to the next. It reports each JSON-RPC request it
// sends (its id and method), so a test sees the re-issue's new id.
let target = 0;
function routed(_input, init) {
  const url = spec.urls[target % spec.urls.length];
  const body = typeof init?.body === "string" ? JSON.parse(init.body) : null;
  if (body?.method) emit({ event: "sent", id: body.id, method: body.method, url });
  return fetch(url, init);
}

function connected() {
  const headers = spec.token ? { Authorization: `Bearer ${spec.token}` } : {};
  const transport = new StreamableHTTPClientTransport(new URL(spec.urls[0]), {
    requestInit: { headers },
    fetch: routed,
  });
  const client = new Client(
    { name: "oncelog-ts-test", version: "1.0.0" },
    {
      capabilities: { elicitation: { url: {} } },
      versionNegotiation: { mode: { pin: "2026-07-28" } },
      inputRequired: { autoFulfill: spec.approve !== "manual" },
    },
  );
  client.setRequestHandler("elicitation/create", async (request) => {
    emit({ event: "elicitation", params: request.params });
    if (spec.approve !== "stdin") return { action: "decline" };
    const line = await stdinLines.next();
    return { action: line.done ? "cancel" : line.value.trim() || "accept" };
  });
  return { client, transport };
}

function params() {
  const meta = {};
  if (spec.run) meta["io.oncelog/run-id"] = spec.run;
  if (spec.callId) meta["io.oncelog/call-id"] = spec.callId;
  const call = { name: spec.tool, arguments: spec.arguments ?? {}, _meta: meta };
  if (spec.requestState !== undefined && spec.requestState !== null) {
    call.requestState = spec.requestState;
    call.inputResponses = spec.inputResponses ?? {};
  }
  return call;
}

// A JSON-RPC error or an HTTP refusal (the gateway answered) is final; anything else
// (refused connections, a stream cut mid-answer, a 5xx) is a broken exchange.
function answered(error) {
  if (error instanceof ProtocolError || error instanceof UnauthorizedError) return true;
  return error instanceof SdkHttpError && error.data?.status < 500;
}

function described(error) {
  const message = String(error?.message ?? error);
  return { event: "error", name: error?.name, code: error?.code, message, data: error?.data };
}

async function main() {
  const { client, transport } = connected();
  const deadline = Date.now() + (spec.retryFor ?? 0) * 1000;
  const manual = spec.approve === "manual" || spec.requestState != null;
  try {
    await client.connect(transport);
    for (let n = 0; ; n++) {
      emit({ event: "attempt", n, url: spec.urls[target % spec.urls.length] });
      try {
        emit({ event: "result", result: await client.callTool(params(), manual ? { allowInputRequired: true } : {}) });
        return 0;
      } catch (error) {
        emit(described(error));
        if (answered(error) || Date.now() > deadline) return 2;
        target += 1; // the next replica (or the same one, restarted)
        await new Promise((resolve) => setTimeout(resolve, 200));
      }
    }
  } catch (error) {
    emit(described(error));
    return 2;
  } finally {
    await client.close().catch(() => {});
  }
}

process.exitCode = await main();
process.stdin.destroy();
