'use client';
// app/chat/[id]/chat.tsx: the chat in the browser. `resume: true` picks a running answer up again after a reload
// (Baton replays it from its start, under the message id the history already holds, so it is not doubled).
import { useChat } from '@ai-sdk/react';
import {
  DefaultChatTransport,
  getToolName,
  isToolUIPart,
  lastAssistantMessageIsCompleteWithApprovalResponses,
  type UIMessage,
} from 'ai';
import { useState } from 'react';

export function Chat({ id, initial }: { id: string; initial: UIMessage[] }) {
  const { messages, sendMessage, addToolApprovalResponse, status, error } = useChat({
    id,
    messages: initial,
    resume: true,
    transport: new DefaultChatTransport({ api: '/api/chat' }),
    // After Approve or Deny, send the decision (Baton runs or refuses the call and the answer streams on).
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
  });
  const [input, setInput] = useState('');
  return (
    <main>
      {messages.map(message => (
        <section
          key={message.id}
          data-role={message.role}
          style={{ textAlign: message.role === 'user' ? 'right' : 'left' }}
        >
          {message.parts.map((part, i) => {
            if (part.type === 'text') return <p key={i}>{part.text}</p>;
            if (!isToolUIPart(part)) return null; // step-start; reasoning and files: render them here too
            return (
              <div key={i} data-tool={getToolName(part)} data-state={part.state}>
                <code>{getToolName(part)}({JSON.stringify(part.input)})</code>
                {part.state === 'output-available' && <pre>{String(part.output)}</pre>}
                {part.state === 'output-error' && <pre>{part.errorText}</pre>}
                {part.state === 'approval-requested' && (
                  <>
                    <button onClick={() => addToolApprovalResponse({ id: part.approval.id, approved: true })}>
                      Approve
                    </button>
                    <button onClick={() => addToolApprovalResponse({ id: part.approval.id, approved: false })}>
                      Deny
                    </button>
                  </>
                )}
              </div>
            );
          })}
        </section>
      ))}
      {error && <p role="alert">{error.message}</p>}
      <form
        onSubmit={e => {
          e.preventDefault();
          sendMessage({ text: input });
          setInput('');
        }}
      >
        <input value={input} onChange={e => setInput(e.target.value)} placeholder="Message" />
        <output>{status}</output>
      </form>
    </main>
  );
}
