// Drives helix-dbos's chat routes with the npm "ai" package's own client:
// AbstractChat (what useChat wraps) over DefaultChatTransport, and
// readUIMessageStream. It prints one JSON summary on stdout for the Go test
// (integration/aisdk) to assert on; diagnostics go to stderr.
//
//   HELIX_CHAT_URL    the chat endpoint, e.g. http://127.0.0.1:4000/chat
//   HELIX_GOLDEN_DIR  server/aisdk/testdata: the translator's golden streams
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import {
  AbstractChat,
  DefaultChatTransport,
  lastAssistantMessageIsCompleteWithApprovalResponses,
  lastAssistantMessageIsCompleteWithToolCalls,
  readUIMessageStream,
} from 'ai';

const api = process.env.HELIX_CHAT_URL;
if (!api) throw new Error('HELIX_CHAT_URL is not set');
const auth = { 'X-User': 'alice' };

// Every HTTP request the client makes, for the summary.
const requests = [];
const loggingFetch = async (url, init = {}) => {
  const res = await fetch(url, init);
  let lastRole;
  if (typeof init.body === 'string') {
    const body = JSON.parse(init.body);
    lastRole = body.messages?.at(-1)?.role;
  }
  requests.push({ method: init.method ?? 'GET', path: new URL(url).pathname, status: res.status, lastRole });
  return res;
};

// A Chat with plain-array state: what @ai-sdk/react's useChat builds on.
class ArrayState {
  constructor() {
    this.status = 'ready';
    this.error = undefined;
    this.messages = [];
  }
  pushMessage(m) { this.messages = [...this.messages, m]; }
  popMessage() { this.messages = this.messages.slice(0, -1); }
  replaceMessage(i, m) { this.messages = [...this.messages.slice(0, i), m, ...this.messages.slice(i + 1)]; }
  snapshot(v) { return structuredClone(v); }
}

class Chat extends AbstractChat {
  constructor(init) { super({ ...init, state: new ArrayState() }); }
}

const transport = (agent, extra = {}) =>
  new DefaultChatTransport({ api, headers: auth, body: { agent }, fetch: loggingFetch, ...extra });

const sendAutomaticallyWhen = ({ messages }) =>
  lastAssistantMessageIsCompleteWithToolCalls({ messages }) ||
  lastAssistantMessageIsCompleteWithApprovalResponses({ messages });

// A message reduced to what the Go test checks.
const brief = (m) => ({
  id: m.id,
  role: m.role,
  parts: m.parts.map((p) => {
    const out = { type: p.type };
    for (const k of ['text', 'state', 'toolCallId', 'input', 'output', 'errorText', 'approval', 'providerExecuted', 'data', 'id']) {
      if (p[k] !== undefined) out[k] = p[k];
    }
    return out;
  }),
  metadata: m.metadata,
});

const textOf = (m) => m.parts.filter((p) => p.type === 'text').map((p) => p.text).join('');

async function waitFor(what, pred, ms = 20000) {
  const until = Date.now() + ms;
  while (!pred()) {
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

function newChat(id, agent, extra = {}) {
  const errors = [];
  const chat = new Chat({
    id,
    transport: transport(agent),
    sendAutomaticallyWhen,
    onError: (e) => errors.push(String(e?.message ?? e)),
    ...extra,
  });
  return { chat, errors };
}

const summary = {};

// (a) A message, answered with text and a server tool; then a follow-up.
{
  const { chat, errors } = newChat('node-a', 'weather');
  await chat.sendMessage({ text: 'Weather in Paris?' });
  const first = brief(chat.lastMessage);
  await chat.sendMessage({ text: 'Thanks!' });
  summary.a = { status: chat.status, errors, first, messages: chat.messages.map(brief) };
}

// (b) A client-executed tool: onToolCall runs it, addToolOutput answers,
// sendAutomaticallyWhen posts the continuation through POST /chat.
{
  const toolCalls = [];
  let chat;
  const made = newChat('node-b', 'asker', {
    onToolCall: ({ toolCall }) => {
      toolCalls.push({ toolName: toolCall.toolName, toolCallId: toolCall.toolCallId, input: toolCall.input });
      if (toolCall.toolName === 'ask_user') {
        // Not awaited, as the AI SDK documents: the chat is mid-stream.
        chat.addToolOutput({ tool: 'ask_user', toolCallId: toolCall.toolCallId, output: { answer: 'blue' } });
      }
    },
  });
  chat = made.chat;
  const before = requests.length;
  await chat.sendMessage({ text: 'Ask me something' });
  await waitFor('the continuation', () => chat.status === 'ready' && textOf(chat.lastMessage).includes('You said'));
  summary.b = {
    status: chat.status,
    errors: made.errors,
    toolCalls,
    requests: requests.slice(before),
    messages: chat.messages.map(brief),
  };
}

// (c) An approval-gated tool: the approval request arrives, the user
// approves (addToolApprovalResponse), the continuation carries the tool's
// output and the final text.
{
  const { chat, errors } = newChat('node-c', 'banker');
  const before = requests.length;
  await chat.sendMessage({ text: 'Pay bob 5' });
  const requested = brief(chat.lastMessage);
  const part = chat.lastMessage.parts.find((p) => p.type === 'tool-transfer');
  await chat.addToolApprovalResponse({ id: part.approval.id, approved: true, reason: 'ok' });
  await waitFor('the approved continuation', () => chat.status === 'ready' && textOf(chat.lastMessage).includes('Result'));
  summary.c = { status: chat.status, errors, requested, requests: requests.slice(before), messages: chat.messages.map(brief) };
}

// (c2) The same, denied through the explicit route: the client records the
// decision on its message (addToolApprovalResponse, no automatic send),
// submits it to POST /chat/{id}/submit-tool-result, then reconnects from the
// sequence its message's metadata carries (resumeStreamIsReplay: false), so
// it gets the rest even if the run ended in between. (The AI SDK Chat keeps
// the message it continues only while a tool part is approval-responded,
// provider-executed input-available or input-streaming.)
{
  const errors = [];
  let chat;
  const reconnecting = transport('banker', {
    resumeStreamIsReplay: false,
    prepareReconnectToStreamRequest: () => {
      const m = chat.lastMessage;
      return {
        headers: { ...auth, 'X-Resume-From-Sequence': String(m.metadata.helix.sequence), 'X-Existing-Message-Id': m.id },
      };
    },
  });
  chat = new Chat({ id: 'node-c2', transport: reconnecting, onError: (e) => errors.push(String(e?.message ?? e)) });
  await chat.sendMessage({ text: 'Pay bob 5' });
  const part = chat.lastMessage.parts.find((p) => p.type === 'tool-transfer');
  await chat.addToolApprovalResponse({ id: part.approval.id, approved: false, reason: 'not today' });
  const res = await loggingFetch(`${api}/node-c2/submit-tool-result`, {
    method: 'POST',
    headers: { ...auth, 'content-type': 'application/json' },
    body: JSON.stringify({ toolCallId: part.toolCallId, approved: false, reason: 'not today' }),
  });
  const submitted = await res.json();
  const before = requests.length;
  await chat.resumeStream();
  summary.c2 = { status: chat.status, errors, submitted, requests: requests.slice(before), messages: chat.messages.map(brief) };
}

// (d1) Resume mid-run, as useChat's resume does: the client drops its
// response (stop), reconnects with GET /chat/{id}/stream, and the replay
// rebuilds the same message.
{
  const { chat, errors } = newChat('node-d1', 'slow');
  const sending = chat.sendMessage({ text: 'Count slowly' });
  await waitFor('the first words', () => chat.lastMessage?.role === 'assistant' && textOf(chat.lastMessage).length >= 8);
  await chat.stop();
  await sending;
  const partial = textOf(chat.lastMessage);
  const before = requests.length;
  await chat.resumeStream();
  summary.d1 = { status: chat.status, errors, partial, requests: requests.slice(before), messages: chat.messages.map(brief) };
}

// (d2) Resume from a sequence: read the raw event stream up to the third
// text delta, remember the last SSE id, drop the connection; reconnect with
// X-Resume-From-Sequence and fold the rest into the partial message with
// readUIMessageStream.
{
  const abort = new AbortController();
  const res = await fetch(api, {
    method: 'POST',
    headers: { ...auth, 'content-type': 'application/json' },
    body: JSON.stringify({
      id: 'node-d2',
      agent: 'slow',
      trigger: 'submit-message',
      messages: [{ id: 'u1', role: 'user', parts: [{ type: 'text', text: 'Count slowly' }] }],
    }),
    signal: abort.signal,
  });
  const seen = [];
  let lastId = 0;
  const decoder = new TextDecoder();
  let buf = '';
  const reader = res.body.getReader();
  outer: for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += decoder.decode(value, { stream: true });
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const event = buf.slice(0, i);
      buf = buf.slice(i + 2);
      for (const line of event.split('\n')) {
        if (line.startsWith('id: ')) lastId = Number(line.slice(4));
        if (line.startsWith('data: ') && line !== 'data: [DONE]') seen.push(JSON.parse(line.slice(6)));
      }
      if (seen.filter((c) => c.type === 'text-delta').length >= 3) break outer;
    }
  }
  abort.abort();
  let partial;
  for await (const m of readUIMessageStream({ stream: ReadableStream.from(seen) })) partial = m;
  const resuming = new DefaultChatTransport({
    api,
    fetch: loggingFetch,
    resumeStreamIsReplay: false,
    headers: { ...auth, 'X-Resume-From-Sequence': String(lastId), 'X-Existing-Message-Id': partial.id },
  });
  const stream = await resuming.reconnectToStream({ chatId: 'node-d2' });
  const errors = [];
  let final;
  for await (const m of readUIMessageStream({ message: structuredClone(partial), stream, onError: (e) => errors.push(String(e)) })) final = m;
  summary.d2 = { lastId, partial: brief(partial), final: brief(final), errors };
}

// (e) The translator's golden streams, framed as a response, through the
// client's own parser (uiMessageChunkSchema) and message builder.
{
  const dir = process.env.HELIX_GOLDEN_DIR;
  const goldens = {};
  for (const name of dir ? readdirSync(dir).filter((f) => f.endsWith('.jsonl')).sort() : []) {
    const lines = readFileSync(join(dir, name), 'utf8').split('\n').filter(Boolean);
    const sse = [
      `data: ${JSON.stringify({ type: 'start', messageId: 'golden' })}\n\n`,
      ...lines.map((l) => `data: ${l}\n\n`),
      `data: ${JSON.stringify({ type: 'finish', finishReason: 'stop' })}\n\n`,
      'data: [DONE]\n\n',
    ].join('');
    const bytes = new Response(sse).body;
    const errors = [];
    const streamErrors = [];
    let message;
    try {
      // The transport's own response pipeline: parseJsonEventStream with
      // uiMessageChunkSchema (the method is protected in TypeScript only).
      const chunks = new DefaultChatTransport({ api }).processResponseStream(bytes);
      for await (const m of readUIMessageStream({ stream: chunks, onError: (e) => errors.push(String(e?.message ?? e)) })) message = m;
    } catch (e) {
      streamErrors.push(String(e?.message ?? e));
    }
    goldens[name] = { chunks: lines.length, errors, streamErrors, message: message && brief(message) };
  }
  summary.golden = goldens;
}

summary.requests = requests;
process.stdout.write(JSON.stringify(summary) + '\n');
