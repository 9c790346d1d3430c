// app/chat/[id]/page.tsx: the chat whose Baton id is in the address, so a reload opens the same chat. Its
// history is loaded here, on the server (the token never reaches the browser), and handed to useChat.
import type { UIMessage } from 'ai';
import { Chat } from './chat';

export const dynamic = 'force-dynamic';

export default async function Page({ params }: { params: Promise<{ id: string }> }) {
  const { id } = await params; // check here too that the signed-in user may see this chat
  const answer = await fetch(`${process.env.BATON_URL}/api/chat/${encodeURIComponent(id)}/messages`, {
    headers: { authorization: `Bearer ${process.env.BATON_API_TOKEN}` },
    cache: 'no-store',
  });
  if (!answer.ok) throw new Error(`baton serve answered ${answer.status}`);
  const initial: UIMessage[] = await answer.json();
  return <Chat id={id} initial={initial} />;
}
