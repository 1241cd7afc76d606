#!/usr/bin/env node
// Interop check: drive a running A2A 1.0 JSON-RPC server with the official
// JavaScript SDK client (@a2a-js/sdk, pinned in package.json beside this file).
//
// Usage: node a2a_js_client.mjs --base-url http://127.0.0.1:PORT --token TOKEN
// Prints one JSON summary on stdout; exits 0 only if every expectation held,
// otherwise prints a one-line reason on stderr and exits 1.
import { randomUUID } from "node:crypto";
import { parseArgs } from "node:util";
import { Role, TaskState, taskStateToJSON } from "@a2a-js/sdk";
import {
  ClientFactory, DefaultAgentCardResolver, JsonRpcTransportFactory, createAuthenticatingFetchWithRetry,
} from "@a2a-js/sdk/client";
import { A2AError, A2A_ERROR_CODE, TaskNotFoundError } from "@a2a-js/sdk/errors";

const UNKNOWN_ID = "00000000-0000-4000-8000-000000000000";

class Failed extends Error {}
function expect(cond, reason) {
  if (!cond) throw new Failed(reason);
}

const textOf = (msg) =>
  (msg?.parts ?? []).map((p) => (p.content?.$case === "text" ? p.content.value : "")).join("");

// Send one user text message; return the Task the server answered with.
async function send(client, text, contextId) {
  const message = {
    messageId: randomUUID(), contextId: contextId ?? "", taskId: "", role: Role.ROLE_USER,
    parts: [{ content: { $case: "text", value: text }, filename: "", mediaType: "text/plain" }],
    extensions: [], referenceTaskIds: [],
  };
  const result = await client.sendMessage({ tenant: "", message });
  // The SDK returns the payload's value: a Task (has status) or a Message (has messageId).
  expect(result && "status" in result && !("messageId" in result),
    `send ${JSON.stringify(text)}: response is not a Task: ${JSON.stringify(result)}`);
  return result;
}

function checkCompleted(task, text, what) {
  const state = taskStateToJSON(task.status?.state);
  expect(task.status?.state === TaskState.TASK_STATE_COMPLETED, `${what}: state ${state}, want TASK_STATE_COMPLETED`);
  expect(task.id, `${what}: task has no id`);
  expect(task.contextId, `${what}: task has no contextId`);
  const reply = task.status.message;
  expect(reply?.role === Role.ROLE_AGENT, `${what}: status.message role is ${reply?.role}`);
  expect(textOf(reply).includes(text), `${what}: reply ${JSON.stringify(textOf(reply))} lacks ${JSON.stringify(text)}`);
}

async function run(baseUrl, token) {
  const out = {};
  // The card is public: fetch it without credentials. Every JSON-RPC call goes
  // through a fetch that adds the bearer token (the SDK's auth-handler hook).
  const card = await new DefaultAgentCardResolver().resolve(baseUrl);
  out.card_name = card.name;
  const iface = card.supportedInterfaces?.[0];
  expect(iface, "card has no supportedInterfaces");
  out.interface = { url: iface.url, protocolBinding: iface.protocolBinding, protocolVersion: iface.protocolVersion };
  expect(iface.protocolBinding === "JSONRPC", `interface binding ${JSON.stringify(iface.protocolBinding)}`);
  expect(iface.protocolVersion === "1.0", `interface version ${JSON.stringify(iface.protocolVersion)}`);
  out.streaming = card.capabilities?.streaming ?? false;

  const authFetch = createAuthenticatingFetchWithRetry(fetch, {
    headers: async () => ({ Authorization: `Bearer ${token}` }),
    shouldRetryWithHeaders: async () => undefined,
  });
  const factory = new ClientFactory({ transports: [new JsonRpcTransportFactory({ fetchImpl: authFetch })] });
  const client = await factory.createFromAgentCard(card);
  out.client_protocol_version = client.protocolVersion;

  // 1. First message, no contextId: the server opens a new context.
  const first = await send(client, "hello from js");
  checkCompleted(first, "hello from js", "first send");
  Object.assign(out, { first_task: first.id, context_id: first.contextId,
    first_state: taskStateToJSON(first.status.state), first_reply: textOf(first.status.message) });

  // 2. GetTask on the task we just got.
  const got = await client.getTask({ tenant: "", id: first.id });
  expect(got.id === first.id, `getTask: id ${JSON.stringify(got.id)}, want ${JSON.stringify(first.id)}`);
  expect(got.status?.state === first.status.state,
    `getTask: state ${taskStateToJSON(got.status?.state)}, want ${out.first_state}`);
  out.get_task_state = taskStateToJSON(got.status.state);

  // 3. Follow-up in the same context: new task, same contextId.
  const follow = await send(client, "second", first.contextId);
  checkCompleted(follow, "second", "follow-up send");
  expect(follow.contextId === first.contextId,
    `follow-up contextId ${JSON.stringify(follow.contextId)}, want ${JSON.stringify(first.contextId)}`);
  expect(follow.id !== first.id, "follow-up reused the first task id");
  Object.assign(out, { followup_task: follow.id, followup_same_context: true, followup_reply: textOf(follow.status.message) });

  // 4. Unknown task id must surface as the SDK's TaskNotFoundError (-32001).
  const err = await client.getTask({ tenant: "", id: UNKNOWN_ID }).then(() => undefined, (e) => e);
  expect(err, "getTask on unknown id did not throw");
  expect(err instanceof A2AError, `unknown task threw a non-A2A error: ${err.name}: ${err.message}`);
  Object.assign(out, { unknown_task_error_class: err.constructor.name, unknown_task_error_name: err.name,
    unknown_task_error_code: err.envelopeCode, unknown_task_error_message: err.message });
  expect(err instanceof TaskNotFoundError && err.envelopeCode === A2A_ERROR_CODE.TASK_NOT_FOUND,
    `unknown task raised ${err.name} (${err.envelopeCode}): ${err.message}`);
  return out;
}

let args;
try {
  ({ values: args } = parseArgs({ options: { "base-url": { type: "string" }, token: { type: "string" } } }));
  if (!args["base-url"] || !args.token) throw new Error("--base-url and --token are required");
} catch (e) {
  console.error(`usage: a2a_js_client.mjs --base-url URL --token TOKEN (${e.message})`);
  process.exit(2);
}
try {
  const summary = await run(args["base-url"].replace(/\/+$/, ""), args.token);
  console.log(JSON.stringify(Object.fromEntries(Object.entries(summary).sort(([a], [b]) => (a < b ? -1 : 1)))));
  process.exit(0);
} catch (e) {
  const cause = e.cause ? ` (cause: ${e.cause.message ?? e.cause})` : ""; // fetch hides ECONNREFUSED there
  const reason = e instanceof Failed ? e.message : `${e.name}: ${e.message}${cause}`;
  console.error(`FAIL: ${reason.split(/\s+/).join(" ")}`);
  process.exit(1);
}
