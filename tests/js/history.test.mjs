// GET /api/chat/ID/messages against a live `baton serve` (started, with a worker and the fake provider, by
// tests/integration/test_usechat_history.py): every answer passes the `ai` package's own validateUIMessages,
// and its assistant messages are the ones the package assembled from the turns' streams (same id, same parts).
// A history handed to a Chat that then resumes the running turn (what a reload does with useChat({messages,
// resume: true})) ends with that turn's message once, not twice.
//
// Each case's chat id is also the text of its first message: the fake provider scripts replies by it.

import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  AbstractChat,
  DefaultChatTransport,
  lastAssistantMessageIsCompleteWithApprovalResponses,
  readUIMessageStream,
  validateUIMessages,
} from 'ai';

const BASE = process.env.BATON_URL;
const TOKEN = process.env.BATON_TOKEN;
const RUN = process.env.BATON_RUN || 'r';
const auth = { Authorization: `Bearer ${TOKEN}` };
const transport = () => new DefaultChatTransport({ api: `${BASE}/api/chat`, headers: auth });

async function history(chatId, headers = auth) {
  const r = await fetch(`${BASE}/api/chat/${chatId}/messages`, { headers });
  assert.equal(r.status, 200, await r.clone().text());
  const messages = await r.json();
  // Throws on anything useChat({messages}) would refuse (it refuses an empty list too, which useChat takes).
  if (messages.length > 0) await validateUIMessages({ messages });
  return messages;
}

async function streamed(chatId, text) {
  const stream = await transport().sendMessages({
    chatId, trigger: 'submit-message', messageId: undefined,
    messages: [{ id: `u-${Math.random()}`, role: 'user', parts: [{ type: 'text', text }] }],
  });
  let last;
  for await (const m of readUIMessageStream({ stream })) last = m;
  return last;
}

// A message as JSON carries it (the package's parts hold `undefined` fields JSON drops).
const plain = m => JSON.parse(JSON.stringify(m));
const textOf = m => m.parts.filter(p => p.type === 'text').map(p => p.text).join('');
const roles = ms => ms.map(m => m.role).join(' ');

// A minimal ChatState, as in usechat.test.mjs: what @ai-sdk/react's Chat keeps in React state.
class State {
  constructor(changed, messages) { this.status = 'ready'; this.messages = messages; this.changed = changed; }
  pushMessage = m => { this.messages = [...this.messages, m]; this.changed(); };
  popMessage = () => { this.messages = this.messages.slice(0, -1); this.changed(); };
  replaceMessage = (i, m) => { this.messages = this.messages.map((x, j) => (j === i ? m : x)); this.changed(); };
  snapshot = x => structuredClone(x);
}

class TestChat extends AbstractChat {
  constructor({ messages = [], ...init }) {
    const waiters = [];
    const state = new State(() => { for (const w of [...waiters]) w(); }, messages);
    const proxy = new Proxy(state, {
      set(target, k, v) { target[k] = v; if (k === 'status' || k === 'error') target.changed(); return true; },
    });
    super({ ...init, transport: transport(), state: proxy });
    this.waiters = waiters;
    this.s = state;
  }
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

describe('the history of a chat, as useChat({messages}) takes it', { concurrency: true }, () => {
  test('two settled turns, a tool round and a discarded attempt: the streams\' own messages', async () => {
    const id = `${RUN}-two-turns`;
    const first = await streamed(id, id);
    const second = await streamed(id, 'and again');
    const got = await history(id);
    assert.equal(roles(got), 'user assistant user assistant');
    assert.deepEqual(got[0].parts, [{ type: 'text', text: id }]);
    assert.deepEqual(got[2].parts, [{ type: 'text', text: 'and again' }]);
    assert.ok(first.parts.some(p => p.type === 'tool-lookup'), 'the first turn had a tool round');
    assert.ok(!textOf(second).includes('SENTINEL'), 'the second turn\'s first attempt was discarded');
    assert.deepEqual(got[1], plain(first)); // id, steps, text and tool parts in their states
    assert.deepEqual(got[3], plain(second));
  });

  test('a thinking turn: its reasoning parts, as its stream had them', async () => {
    const id = `${RUN}-thinking`;
    const first = await streamed(id, id);
    const got = await history(id);
    assert.equal(roles(got), 'user assistant');
    assert.deepEqual(got[1].parts.filter(p => p.type === 'reasoning').map(p => p.text), ['Look k3 up.', 'Answer.']);
    assert.deepEqual(got[1], plain(first));
  });

  test('a reload mid-answer: the running turn\'s message so far, then the resume replaces it', async () => {
    const id = `${RUN}-running`;
    const live = new TestChat({ id });
    live.sendMessage({ text: id });
    await live.until(c => c.s.messages.length === 2 && textOf(c.s.messages[1]).length > 0, 'the first words');
    await live.stop(); // the page goes away; the turn goes on
    const got = await history(id);
    assert.equal(roles(got), 'user assistant');
    assert.equal(got[1].id, live.s.messages[1].id, 'the id its stream\'s start carried');
    assert.ok(textOf(got[1]).length > 0, 'the words so far');
    const reloaded = new TestChat({ id, messages: got }); // useChat({id, messages: history, resume: true})
    await reloaded.resumeStream();
    await reloaded.until(c => c.s.status === 'ready', 'the resumed stream to end');
    assert.equal(roles(reloaded.s.messages), 'user assistant', 'the resumed answer replaced its start, once');
    assert.equal(textOf(reloaded.s.messages[1]), 'An answer that streams slowly enough to reload in the middle.');
    assert.deepEqual(await history(id), plain(reloaded.s.messages));
  });

  test('an approval: the waiting call, then a reload, Approve, and the whole turn', async () => {
    const id = `${RUN}-approval`;
    const asked = await streamed(id, id);
    const got = await history(id);
    assert.deepEqual(got[1], plain(asked));
    const call = got[1].parts.find(p => p.type === 'tool-deploy');
    assert.equal(call.state, 'approval-requested');
    assert.equal(call.approval.id, call.toolCallId);
    const chat = new TestChat({
      id, messages: got, sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
    });
    await chat.resumeStream(); // the waiting turn replays up to its request, over the same message
    assert.equal(roles(chat.s.messages), 'user assistant');
    await chat.addToolApprovalResponse({ id: call.approval.id, approved: true });
    await chat.until(c => c.s.status === 'ready' && textOf(c.s.messages[1]).includes('Deployed'), 'the answer');
    const after = await history(id);
    assert.equal(roles(after), 'user assistant');
    const ran = after[1].parts.find(p => p.type === 'tool-deploy');
    assert.equal(ran.state, 'output-available');
    assert.equal(after[1].id, got[1].id);
    assert.equal(textOf(after[1]), textOf(chat.s.messages[1]));
  });

  test('a stop: its notice is a text part, as the stream had it', async () => {
    const id = `${RUN}-stopped`;
    const chat = new TestChat({ id });
    chat.sendMessage({ text: id });
    await chat.until(c => c.s.messages.length === 2 && textOf(c.s.messages[1]).length > 0, 'the first words');
    const stopped = await fetch(`${BASE}/api/chats/${id}/stop`, { method: 'POST', headers: auth });
    assert.equal(stopped.status, 200);
    await chat.until(c => c.s.status === 'ready', 'the stream to end');
    const got = await history(id);
    assert.equal(roles(got), 'user assistant');
    assert.ok(textOf(got[1]).endsWith('Stopped by user.'), textOf(got[1]));
    // The stream's step whose only attempt the stop voided leaves its step-start; the transcript has no such step.
    const stepless = m => ({ ...m, parts: m.parts.filter(p => p.type !== 'step-start') });
    assert.deepEqual(stepless(got[1]), stepless(plain(chat.s.messages[1])));
  });

  test('a failure: its notice is a text part (the stream said it as an error chunk)', async () => {
    const id = `${RUN}-failure`;
    await streamed(id, id);
    const got = await history(id);
    assert.equal(roles(got), 'user assistant');
    assert.match(textOf(got[1]), /^Failed \(provider_bad_request\): /);
  });

  test('an unknown chat is [], and the token is asked for', async () => {
    assert.deepEqual(await history(`${RUN}-never-used`), []);
    const bare = await fetch(`${BASE}/api/chat/${RUN}-never-used/messages`);
    assert.equal(bare.status, 401);
  });
});
