// The chats this page may see (GET /api/chats: behind `create_app(user=...)` only the signed-in user's, and with
// `authorize` only those it allows), newest activity first, each a link that opens it. Read once when the page
// loads and again after each message sent; a failure leaves the list as it was (the chat itself still works).

import { byId } from "./dom.js";

/** Fill the list from the API (`root`: where the page is mounted); `current` is marked, and `token` carried into
 * each link as the page carries it. */
export async function loadChats(api, root, current, token) {
  const list = byId("chat-list");
  let page;
  try {
    page = await api("GET", `${root}api/chats?limit=50`);
  } catch {
    return;
  }
  list.replaceChildren(
    ...page.chats.map((chat) => {
      const item = document.createElement("li");
      const link = document.createElement("a");
      const q = new URLSearchParams({ chat: chat.id });
      if (token) q.set("token", token);
      link.href = `?${q}`;
      link.dataset.testid = "chat-link";
      link.textContent = chat.title || chat.id; // text, never markup: a title is what a user typed
      link.title = `${chat.id} · ${chat.status} · ${chat.turns} turn${chat.turns === 1 ? "" : "s"}`;
      if (chat.id === current) link.setAttribute("aria-current", "page");
      item.append(link);
      return item;
    }),
  );
  byId("chat-list-section").hidden = page.chats.length === 0;
}
