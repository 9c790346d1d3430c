// The README's page: a chat built with `useChat` (@ai-sdk/react) and nothing of ours, talking to /api/chat on
// its own origin (the app's route passes it to `baton serve`, see serve.mjs). The chat id is in the URL, so a
// reload opens the same chat, and `resume: true` picks its running answer up again.
import { useChat } from '@ai-sdk/react';
import { useState } from 'react';
import { createRoot } from 'react-dom/client';

const chatId = new URLSearchParams(location.search).get('chat');

function Chat() {
  const { messages, sendMessage, status } = useChat({ id: chatId, resume: true });
  const [input, setInput] = useState('');
  return (
    <main>
      <ol data-testid="messages">
        {messages.map(m => (
          <li key={m.id} data-testid="message" data-role={m.role}>
            {m.parts.map((p, i) => (p.type === 'text' ? <span key={i}>{p.text}</span> : null))}
          </li>
        ))}
      </ol>
      <form
        onSubmit={e => {
          e.preventDefault();
          sendMessage({ text: input });
          setInput('');
        }}
      >
        <input data-testid="input" value={input} onChange={e => setInput(e.target.value)} />
      </form>
      <p data-testid="status">{status}</p>
    </main>
  );
}

createRoot(document.getElementById('root')).render(<Chat />);
