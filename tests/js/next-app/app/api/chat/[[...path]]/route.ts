// app/api/chat/[[...path]]/route.ts: POST /api/chat, GET /api/chat/ID/stream and GET /api/chat/ID/messages,
// passed to baton serve with the token, which stays on the server. The token opens every chat: check here that
// the signed-in user may use this one (the body's `id` for POST, the path's ID for GET).
export const dynamic = 'force-dynamic';

async function pass(req: Request): Promise<Response> {
  const answer = await fetch(process.env.BATON_URL + new URL(req.url).pathname, {
    method: req.method,
    headers: { 'content-type': 'application/json', authorization: `Bearer ${process.env.BATON_API_TOKEN}` },
    body: req.method === 'POST' ? req.body : undefined,
    duplex: 'half', // a streamed request body (Node's fetch asks for it)
    cache: 'no-store',
    signal: req.signal, // the browser went away (a reload): let go of baton serve's stream
  } as RequestInit);
  // `no-transform`: `next start` compresses responses, and a compressed event stream would wait for its end.
  const headers = new Headers(answer.headers);
  headers.set('cache-control', 'no-cache, no-transform');
  return new Response(answer.body, { status: answer.status, headers });
}

export { pass as GET, pass as POST };
