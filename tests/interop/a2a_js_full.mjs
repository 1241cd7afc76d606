#!/usr/bin/env node
// Interop check against policies/full.toml: the official JavaScript SDK client
// (@a2a-js/sdk, pinned in package.json beside this file) streams a message,
// lists tasks, meets the errors for cancelling and subscribing to a finished
// task, and creates, reads, lists and deletes a push-notification config on its
// own task.
//
// Usage: node a2a_js_full.mjs --base-url http://127.0.0.1:PORT --token TOKEN
// Prints one JSON summary on stdout; exits 0 only if every expectation held,
// otherwise prints a one-line reason on stderr and exits 1.
import { randomUUID } from "node:crypto";
import { parseArgs } from "node:util";
import { Role, TaskState, taskStateToJSON } from "@a2a-js/sdk";
import {
  ClientFactory, DefaultAgentCardResolver, JsonRpcTransportFactory, createAuthenticatingFetchWithRetry,
} from "@a2a-js/sdk/client";
import { A2AError } from "@a2a-js/sdk/errors";

class Failed extends Error {}
function expect(cond, reason) {
  if (!cond) throw new Failed(reason);
}

const textOf = (msg) =>
  (msg?.parts ?? []).map((p) => (p.content?.$case === "text" ? p.content.value : "")).join("");

async function run(baseUrl, token) {
  const out = {};
  const card = await new DefaultAgentCardResolver().resolve(baseUrl);
  expect(card.capabilities?.streaming, "the card does not say streaming");
  const authFetch = createAuthenticatingFetchWithRetry(fetch, {
    headers: async () => ({ Authorization: `Bearer ${token}` }),
    shouldRetryWithHeaders: async () => undefined,
  });
  const factory = new ClientFactory({ transports: [new JsonRpcTransportFactory({ fetchImpl: authFetch })] });
  const client = await factory.createFromAgentCard(card);

  // 1. A streamed message: the task, the text as it arrives, the final status.
  const message = {
    messageId: randomUUID(), contextId: "", taskId: "", role: Role.ROLE_USER,
    parts: [{ content: { $case: "text", value: "stream from js" }, filename: "", mediaType: "text/plain" }],
    extensions: [], referenceTaskIds: [],
  };
  const events = [];
  for await (const event of client.sendMessageStream({ tenant: "", message })) events.push(event);
  expect(events[0]?.payload?.$case === "task", `the stream did not open with the task: ${JSON.stringify(events[0])}`);
  const taskId = events[0].payload.value.id;
  const updates = events.filter((e) => e.payload?.$case === "statusUpdate").map((e) => e.payload.value.status);
  const pieces = updates.filter((s) => s.state === TaskState.TASK_STATE_WORKING).map((s) => textOf(s.message));
  const finals = updates.filter((s) => s.state !== TaskState.TASK_STATE_WORKING);
  expect(finals.length === 1, `expected one final status, got ${finals.length}`);
  Object.assign(out, { stream_final_state: taskStateToJSON(finals[0].state), stream_pieces: pieces.length,
    stream_text_matches: pieces.join("") === textOf(finals[0].message) });

  // 2. ListTasks finds it (the SDK sends every field, defaults included).
  const listed = await client.listTasks({ tenant: "", contextId: "", status: TaskState.TASK_STATE_UNSPECIFIED,
    pageSize: 10, pageToken: "", statusTimestampAfter: undefined });
  Object.assign(out, { listed_contains_streamed: listed.tasks.some((t) => t.id === taskId),
    next_page_token: listed.nextPageToken, total_size: listed.totalSize });

  // 3. Cancelling and subscribing to a finished task are the specification's errors.
  const canceled = await client.cancelTask({ tenant: "", id: taskId, metadata: undefined }).then(() => undefined, (e) => e);
  expect(canceled instanceof A2AError, `cancelTask on a finished task: ${canceled}`);
  out.cancel_finished_code = canceled.envelopeCode;
  const subscribed = await (async () => {
    try {
      for await (const _ of client.resubscribeTask({ tenant: "", id: taskId })) { /* drain */ }
      return undefined;
    } catch (e) {
      return e;
    }
  })();
  expect(subscribed instanceof A2AError, `subscribe on a finished task: ${subscribed}`);
  out.subscribe_finished_code = subscribed.envelopeCode;

  // 4. A push-notification config on its own task (a public address written in the URL: the
  //    gateway checks where a callback resolves before storing it).
  expect(card.capabilities?.pushNotifications, "the card does not say pushNotifications");
  const made = await client.createTaskPushNotificationConfig({ tenant: "", id: "sdk-hook", taskId,
    url: "https://93.184.215.14/a2a-hook", token: "sdk-token",
    authentication: { scheme: "Bearer", credentials: "sdk-credential" } });
  out.push_created_id = made.id;
  const read = await client.getTaskPushNotificationConfig({ tenant: "", taskId, id: "sdk-hook" });
  out.push_read = [read.url, read.token, read.authentication?.scheme ?? "", read.authentication?.credentials ?? ""];
  const configs = await client.listTaskPushNotificationConfig({ tenant: "", taskId, pageSize: 10, pageToken: "" });
  out.push_listed = configs.configs.map((c) => c.id);
  await client.deleteTaskPushNotificationConfig({ tenant: "", taskId, id: "sdk-hook" });
  const gone = await client.getTaskPushNotificationConfig({ tenant: "", taskId, id: "sdk-hook" }).then(() => undefined, (e) => e);
  expect(gone instanceof A2AError, `a deleted push config was still read: ${gone}`);
  out.push_deleted_code = gone.envelopeCode;
  return out;
}

let args;
try {
  ({ values: args } = parseArgs({ options: { "base-url": { type: "string" }, token: { type: "string" } } }));
  if (!args["base-url"] || !args.token) throw new Error("--base-url and --token are required");
} catch (e) {
  console.error(`usage: a2a_js_full.mjs --base-url URL --token TOKEN (${e.message})`);
  process.exit(2);
}
try {
  const summary = await run(args["base-url"].replace(/\/+$/, ""), args.token);
  console.log(JSON.stringify(Object.fromEntries(Object.entries(summary).sort(([a], [b]) => (a < b ? -1 : 1)))));
  process.exit(0);
} catch (e) {
  const cause = e.cause ? ` (cause: ${e.cause.message ?? e.cause})` : "";
  const reason = e instanceof Failed ? e.message : `${e.name}: ${e.message}${cause}`;
  console.error(`FAIL: ${reason.split(/\s+/).join(" ")}`);
  process.exit(1);
}
