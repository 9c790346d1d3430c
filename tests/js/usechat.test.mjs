// The AI SDK's own client against a live `baton serve` (started, with workers and the fake provider, by
// tests/integration/test_usechat.py, which passes BATON_URL and BATON_TOKEN). Every chunk is parsed and every
// message assembled by the `ai` package (DefaultChatTransport, readUIMessageStream, AbstractChat: the core
// `useChat` wraps); nothing here reads the wire but the stream ids a Last-Event-ID resume needs.
//
// Each case's chat id is also the text of its first message: the fake provider scripts replies by it.

import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  AbstractChat,
  DefaultChatTransport,
  lastAssistantMessageIsCompleteWithApprovalResponses,
  readUIMessageStream,
} from 'ai';

const BASE = process.env.BATON_URL;
const TOKEN = process.env.BATON_TOKEN;
const RUN = process.env.BATON_RUN || 'r'; // keeps chat ids fresh across runs against one store
const auth = { Authorization: `Bearer ${TOKEN}` };

function transport(extra = {}) {
  return new DefaultChatTransport({ api: `${BASE}/api/chat`, headers: auth, ...extra });
}

function userMessage(text) {
  return { id: `u-${Math.random().toString(36).slice(2)}`, role: 'user', parts: [{ type: 'text', text }] };
}

async function send(t, chatId, messages, signal) {
  return t.sendMessages({
    chatId, messages, trigger: 'submit-message', messageId: undefined, abortSignal: signal,
  });
}

// Reads a chunk stream with the package's reader; also keeps the chunks (a tee of the same parsed stream).
async function assemble(stream, { message, onMessage } = {}) {
  const [forReader, forLog] = stream.tee();
  const chunks = [];
  const logged = (async () => { for await (const c of forLog) chunks.push(c); })();
  const errors = [];
  let last = message;
  for await (const m of readUIMessageStream({ stream: forReader, message, onError: e => errors.push(e) })) {
    last = m;
    onMessage?.(m);
  }
  await logged;
  return { message: last, chunks, errors };
}

async function transcript(chatId) {
  const r = await fetch(`${BASE}/api/chats/${chatId}/transcript`, { headers: auth });
  assert.equal(r.status, 200);
  return (await r.json()).messages;
}

// The last turn's assistant content as the transcript keeps it, in the UI message's terms.
function expectedParts(messages) {
  const lastUser = messages.findLastIndex(m => m.role === 'user' && m.content.some(b => b.type === 'text'));
  const turn = messages[lastUser].turn_id;
  const results = new Map();
  for (const m of messages) for (const b of m.content) if (b.type === 'tool_result') results.set(b.tool_use_id, b);
  const out = [];
  for (const m of messages.filter(m => m.turn_id === turn && m.role === 'assistant')) {
    for (const b of m.content) {
      if (b.type === 'thinking' && b.thinking) out.push({ reasoning: b.thinking });
      if (b.type === 'text') out.push({ text: b.text });
      if (b.type === 'tool_use') {
        const r = results.get(b.id);
        out.push({ tool: b.name, id: b.id, input: b.input, ...(r.is_error ? { error: r.content } : { output: r.content }) });
      }
    }
  }
  return out;
}

function partsOf(message) {
  const out = [];
  for (const p of message.parts) {
    if (p.type === 'reasoning') out.push({ reasoning: p.text });
    if (p.type === 'text') out.push({ text: p.text });
    else if (p.type.startsWith('tool-')) {
      out.push({
        tool: p.type.slice('tool-'.length), id: p.toolCallId, input: p.input,
        ...(p.state === 'output-error' ? { error: p.errorText } : { output: p.output }),
      });
    }
  }
  return out;
}

function textOf(message) {
  return message.parts.filter(p => p.type === 'text').map(p => p.text).join('');
}

function reasoningOf(message) {
  return message.parts.filter(p => p.type === 'reasoning').map(p => p.text).join('');
}

// A minimal ChatState (what @ai-sdk/react's Chat keeps in React state), calling `changed` on every update.
class State {
  constructor(changed) { this.status = 'ready'; this.error = undefined; this.messages = []; this.changed = changed; }
  set(k, v) { this[k] = v; this.changed(); }
  pushMessage = m => { this.messages = [...this.messages, m]; this.changed(); };
  popMessage = () => { this.messages = this.messages.slice(0, -1); this.changed(); };
  replaceMessage = (i, m) => { this.messages = this.messages.map((x, j) => (j === i ? m : x)); this.changed(); };
  snapshot = x => structuredClone(x);
}

class TestChat extends AbstractChat {
  constructor(init) {
    const waiters = [];
    const state = new State(() => { for (const w of [...waiters]) w(); });
    // status/error are set through plain assignment by AbstractChat: route them through `set`.
    const proxy = new Proxy(state, {
      set(target, k, v) { if (k === 'status' || k === 'error') { target.set(k, v); return true; } target[k] = v; return true; },
    });
    super({ ...init, state: proxy });
    this.waiters = waiters;
    this.s = state;
  }
  // Resolves once `pred(this)` holds (checked at every state change).
  until(pred, what, ms = 30000) {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), ms);
      const check = () => {
        if (pred(this)) { clearTimeout(timer); this.waiters.splice(this.waiters.indexOf(check), 1); resolve(); }
      };
      this.waiters.push(check);
      check();
    });
  }
}

function chatOf(id, extra = {}) {
  return new TestChat({ id, transport: transport(), ...extra });
}

describe('useChat against baton serve', { concurrency: true }, () => {
  test('a tool round: the assembled message equals the transcript', async () => {
    const id = `${RUN}-tool-round`;
    const { message, chunks, errors } = await assemble(await send(transport(), id, [userMessage(id)]));
    assert.deepEqual(errors, []);
    assert.equal(chunks.at(-1).type, 'finish');
    assert.equal(chunks.at(-1).finishReason, 'stop');
    assert.equal(message.id, chunks[0].messageId);
    const expected = expectedParts(await transcript(id));
    assert.equal(expected.filter(p => p.tool).length, 1);
    assert.deepEqual(partsOf(message), expected);
    assert.equal(message.parts.filter(p => p.type === 'step-start').length, 2);
  });

  test('a provider stream dropped mid-answer: reset-step leaves no partial word', async () => {
    const id = `${RUN}-dropped`;
    const seen = [];
    const { message, chunks, errors } = await assemble(await send(transport(), id, [userMessage(id)]), {
      onMessage: m => seen.push(textOf(m)),
    });
    assert.deepEqual(errors, []);
    assert.ok(seen.some(t => t.includes('SENTINEL')), 'the cut attempt streamed before it was voided');
    assert.ok(!textOf(message).includes('SENTINEL'), `no word of the voided attempt: ${textOf(message)}`);
    assert.ok(chunks.some(c => c.type === 'reset-step'), 'a reset-step came');
    assert.deepEqual(partsOf(message), expectedParts(await transcript(id)));
  });

  test('a thinking tool round: reasoning parts, a broken attempt\'s reasoning reset with it', async () => {
    const id = `${RUN}-thinking`;
    const seen = [];
    const { message, chunks, errors } = await assemble(await send(transport(), id, [userMessage(id)]), {
      onMessage: m => seen.push(reasoningOf(m)),
    });
    assert.deepEqual(errors, []);
    assert.equal(chunks.at(-1).finishReason, 'stop');
    assert.ok(seen.some(t => t.includes('SENTINEL')), 'the broken attempt\'s reasoning streamed before it was voided');
    assert.ok(!reasoningOf(message).includes('SENTINEL'), `no reasoning of the voided attempt: ${reasoningOf(message)}`);
    assert.ok(chunks.some(c => c.type === 'reset-step'), 'a reset-step came');
    assert.ok(chunks.some(c => c.type === 'reasoning-end'), 'reasoning parts are closed');
    const expected = expectedParts(await transcript(id));
    assert.deepEqual(expected.filter(p => p.reasoning).map(p => p.reasoning), ['Look k2 up.', 'Answer now.']);
    assert.deepEqual(partsOf(message), expected);
    assert.ok(message.parts.filter(p => p.type === 'reasoning').every(p => p.state === 'done'));
  });

  test('a fetch aborted mid-answer, then reconnectToStream: the transcript, nothing doubled; 204 after', async () => {
    const id = `${RUN}-aborted`;
    const chat = chatOf(id);
    chat.sendMessage({ text: id });
    await chat.until(c => c.s.messages.length === 2 && textOf(c.s.messages[1]).length > 0, 'the first text');
    await chat.stop(); // closes the fetch, as useChat's stop() does; the turn goes on
    const partial = textOf(chat.s.messages[1]);
    await chat.resumeStream(); // what useChat({resume: true}) calls on mount
    await chat.until(c => c.s.status === 'ready', 'the resumed stream to end');
    const expected = expectedParts(await transcript(id));
    assert.equal(chat.s.messages.length, 2);
    assert.ok(expected[0].text.startsWith(partial) && partial.length < expected[0].text.length, 'aborted mid-answer');
    assert.deepEqual(partsOf(chat.s.messages[1]), expected);
    assert.equal(await transport().reconnectToStream({ chatId: id }), null);
  });

  test('a resume after Last-Event-ID continues the message: nothing repeated', async () => {
    const id = `${RUN}-last-event-id`;
    let lastId = null;
    const abort = new AbortController();
    // Only the SSE ids are read here (a custom fetch, the transport's own option); the chunks are the package's.
    const idTracking = async (url, init) => {
      const response = await fetch(url, init);
      const [mine, theirs] = response.body.tee();
      (async () => {
        const decoder = new TextDecoder();
        let buffered = '';
        try {
          for await (const bytes of mine) {
            buffered += decoder.decode(bytes, { stream: true });
            const lines = buffered.split('\n');
            buffered = lines.pop();
            for (const line of lines) if (line.startsWith('id: ')) lastId = line.slice(4).trim();
          }
        } catch { /* aborted */ }
      })();
      return new Response(theirs, { status: response.status, headers: response.headers });
    };
    let partial;
    let seenId;
    try {
      await assemble(await send(transport({ fetch: idTracking }), id, [userMessage(id)], abort.signal), {
        onMessage: m => {
          if (textOf(m).length > 0 && lastId && !partial) {
            partial = structuredClone(m);
            seenId = lastId;
            abort.abort();
          }
        },
      });
    } catch { /* the abort */ }
    assert.ok(partial, 'got some text before the abort');
    const resumed = transport({
      resumeStreamIsReplay: false,
      prepareReconnectToStreamRequest: () => ({ headers: { ...auth, 'Last-Event-ID': seenId } }),
    });
    const stream = await resumed.reconnectToStream({ chatId: id });
    assert.ok(stream, 'the turn was still running');
    const { message, chunks, errors } = await assemble(stream, { message: partial });
    assert.deepEqual(errors, []);
    assert.equal(chunks[0].messageId, partial.id);
    assert.deepEqual(partsOf(message), expectedParts(await transcript(id)));
  });

  test('an approval round trip through addToolApprovalResponse', async () => {
    const id = `${RUN}-approval`;
    const chat = chatOf(id, { sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses });
    await chat.sendMessage({ text: id });
    const asked = () => chat.s.messages[1]?.parts.find(p => p.type === 'tool-deploy');
    assert.equal(asked()?.state, 'approval-requested');
    assert.equal(chat.s.status, 'ready');
    await chat.addToolApprovalResponse({ id: asked().approval.id, approved: true });
    await chat.until(c => c.s.status === 'ready' && asked()?.state === 'output-available', 'the approved call to run');
    await chat.until(c => c.s.status === 'ready' && textOf(c.s.messages[1]).length > 0, 'the answer after it');
    assert.equal(chat.s.messages.length, 2);
    assert.deepEqual(partsOf(chat.s.messages[1]), expectedParts(await transcript(id)));
  });

  test('a failure: an error chunk naming its class, finishReason error; regenerate retries it', async () => {
    const id = `${RUN}-failure`;
    const { chunks, errors } = await assemble(await send(transport(), id, [userMessage(id)]));
    const error = chunks.find(c => c.type === 'error');
    assert.match(error.errorText, /^Failed \(provider_bad_request\): /);
    assert.equal(chunks.at(-1).finishReason, 'error');
    assert.equal(errors.length, 1);
    // regenerate() is `baton retry`: the failed turn runs again, and this time answers.
    const again = await assemble(await transport().sendMessages({
      chatId: id, messages: [userMessage(id)], trigger: 'regenerate-message', messageId: undefined,
    }));
    assert.deepEqual(again.errors, []);
    assert.equal(again.chunks.at(-1).finishReason, 'stop');
    assert.deepEqual(partsOf(again.message), expectedParts(await transcript(id)));
    assert.equal(textOf(again.message), 'Answered on the retry.');
  });

  test('401 without the token', async () => {
    const bare = new DefaultChatTransport({ api: `${BASE}/api/chat` });
    await assert.rejects(send(bare, `${RUN}-nobody`, [userMessage('hi')]), e => e.statusCode === 401);
    await assert.rejects(bare.reconnectToStream({ chatId: `${RUN}-nobody` }), e => e.statusCode === 401);
  });
});

// After every case above (describes run one after another): the worker SIGTERMed here is then busy only with
// this turn. test_usechat.py drains it once the turn's first words are in the stream, while this request is
// open; the other worker replays the step and answers.
describe('a drain while the client is connected', () => {
  test('a second worker takes over mid-answer: the transcript, the cut attempt reset, nothing doubled', async () => {
    const id = `${RUN}-drain`;
    const seen = [];
    const { message, chunks, errors } = await assemble(await send(transport(), id, [userMessage(id)]), {
      onMessage: m => seen.push(textOf(m)),
    });
    assert.deepEqual(errors, []);
    assert.equal(chunks.at(-1).finishReason, 'stop');
    assert.ok(seen.some(t => t.startsWith('SENTINEL')), 'the cut attempt streamed before the drain');
    assert.equal(textOf(message), 'The one reply, from the worker that took over.');
    assert.equal(chunks.filter(c => c.type === 'reset-step').length, 1, 'the cut attempt reset once');
    assert.deepEqual(partsOf(message), expectedParts(await transcript(id)));
    assert.equal(message.parts.filter(p => p.type === 'step-start').length, 1, 'one step: the replayed one');
  });
});
