// The app in front of the README's page, for tests/browser/test_usechat_page.py: it bundles chat.jsx once with
// esbuild (in memory; nothing is written), serves it, and passes /api/chat/* to `baton serve` with the README's
// route handler, run as a Next.js app would run it (a web Request in, its Response streamed out).
//
//   node serve.mjs --host H --port P     (env: BATON_URL, BATON_API_TOKEN)

import * as esbuild from 'esbuild';
import { createServer } from 'node:http';
import { Readable } from 'node:stream';
import { parseArgs } from 'node:util';

// Like the README's app/api/chat/[[...path]]/route.ts (which tests/browser/test_nextjs_app.py runs in Next.js):
const pass = (req) => fetch(process.env.BATON_URL + new URL(req.url).pathname, { method: req.method,
  headers: { 'content-type': 'application/json', authorization: `Bearer ${process.env.BATON_API_TOKEN}` },
  body: req.method === 'POST' ? req.body : undefined, duplex: 'half', cache: 'no-store' });

const { values } = parseArgs({ options: { host: { type: 'string' }, port: { type: 'string' } } });

const built = await esbuild.build({
  entryPoints: [new URL('./chat.jsx', import.meta.url).pathname],
  bundle: true,
  write: false,
  format: 'esm',
  jsx: 'automatic',
  define: { 'process.env.NODE_ENV': '"production"' },
  logLevel: 'warning',
});
const bundle = built.outputFiles[0].contents;
const html = '<!doctype html><meta charset="utf-8"><title>useChat on Baton</title>'
  + '<div id="root"></div><script type="module" src="/chat.js"></script>';

async function route(req, res) {
  const url = new URL(req.url, `http://${req.headers.host}`);
  if (url.pathname === '/api/chat' || url.pathname.startsWith('/api/chat/')) {
    // What Next.js hands the route: a web Request (aborted when the browser goes away).
    const gone = new AbortController();
    res.on('close', () => gone.abort());
    const request = new Request(url, {
      method: req.method, headers: req.headers, signal: gone.signal,
      body: req.method === 'POST' ? Readable.toWeb(req) : undefined, duplex: 'half',
    });
    const answer = await pass(request);
    res.writeHead(answer.status, Object.fromEntries(answer.headers));
    if (answer.body) {
      try {
        for await (const bytes of answer.body) {
          if (gone.signal.aborted) break; // the browser went away (a reload): let go of baton serve's stream
          res.write(bytes);
        }
      } catch { /* the upstream stream broke: the browser's ends with it */ }
    }
    res.end();
    return;
  }
  if (url.pathname === '/chat.js') {
    res.writeHead(200, { 'content-type': 'text/javascript' });
    res.end(bundle);
    return;
  }
  res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
  res.end(html);
}

createServer((req, res) => {
  route(req, res).catch(err => {
    console.error(err);
    if (!res.headersSent) res.writeHead(502);
    res.end();
  });
}).listen(Number(values.port), values.host, () => console.log(`listening on ${values.host}:${values.port}`));
