// The AI SDK's own `sendMessage({text, files})` against a live `baton serve` (started, with a worker and the fake
// provider, by tests/integration/test_files.py, which passes BATON_URL, BATON_TOKEN, BATON_RUN and BATON_FILES: a
// directory holding shot.png and spec.pdf). The SDK posts the files as file parts with data URLs; the stored
// history gives them back as file parts whose urls serve the same bytes.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { AbstractChat, DefaultChatTransport } from 'ai';

const BASE = process.env.BATON_URL;
const auth = { Authorization: `Bearer ${process.env.BATON_TOKEN}` };
const RUN = process.env.BATON_RUN || 'r';
const DIR = process.env.BATON_FILES;

// A minimal ChatState (what @ai-sdk/react's Chat keeps in React state).
class State {
  constructor() { this.status = 'ready'; this.error = undefined; this.messages = []; }
  pushMessage = m => { this.messages = [...this.messages, m]; };
  popMessage = () => { this.messages = this.messages.slice(0, -1); };
  replaceMessage = (i, m) => { this.messages = this.messages.map((x, j) => (j === i ? m : x)); };
  snapshot = x => structuredClone(x);
}

function part(name, mediaType) {
  const data = readFileSync(join(DIR, name));
  return { type: 'file', mediaType, filename: name, url: `data:${mediaType};base64,${data.toString('base64')}` };
}

test('sendMessage({text, files}) sends an image and a PDF; the history serves them back', async () => {
  const id = `${RUN}-usechat-files`;
  const state = new State();
  const chat = new AbstractChat({
    id, state, transport: new DefaultChatTransport({ api: `${BASE}/api/chat`, headers: auth }),
  });
  await chat.sendMessage({ text: 'usechat look', files: [part('shot.png', 'image/png'), part('spec.pdf', 'application/pdf')] });
  assert.equal(state.error, undefined);
  assert.equal(state.messages.at(-1).parts.filter(p => p.type === 'text').map(p => p.text).join(''), 'Seen.');

  const r = await fetch(`${BASE}/api/chat/${id}/messages`, { headers: auth });
  assert.equal(r.status, 200);
  const [user] = await r.json();
  const files = user.parts.filter(p => p.type === 'file');
  assert.deepEqual(files.map(f => [f.mediaType, f.filename]), [['image/png', 'shot.png'], ['application/pdf', 'spec.pdf']]);
  for (const f of files) {
    const served = await fetch(`${BASE}${f.url}`, { headers: auth });
    assert.equal(served.headers.get('content-type'), f.mediaType);
    assert.deepEqual(Buffer.from(await served.arrayBuffer()), readFileSync(join(DIR, f.filename)));
  }
});

test('a file part whose bytes are not its type is refused (422) and nothing is sent', async () => {
  const id = `${RUN}-usechat-refused`;
  const bad = { ...part('spec.pdf', 'application/pdf'), mediaType: 'image/png' };
  const r = await fetch(`${BASE}/api/chat`, {
    method: 'POST', headers: { ...auth, 'content-type': 'application/json' },
    body: JSON.stringify({ id, trigger: 'submit-message', messages: [
      { id: 'u1', role: 'user', parts: [{ type: 'text', text: 'look' }, bad] },
    ] }),
  });
  assert.equal(r.status, 422);
  assert.match(JSON.stringify(await r.json()), /declared image\/png but its bytes are application\/pdf/);
});
