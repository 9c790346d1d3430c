// Small DOM helpers. Text always goes in as text (textContent), never as HTML.

/** `h("div", {class: "x", text: "hi", onclick: fn}, child, ...)`: an element. */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v == null || v === false) continue;
    if (k === "class") el.className = v;
    else if (k === "text") el.textContent = v;
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c == null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

/** The element with `data-testid="id"` (the page's stable hooks, for people and tests alike). */
export const byId = (id) => document.querySelector(`[data-testid="${id}"]`);

export function fmtTime(at) {
  if (!at) return "";
  const d = new Date(at * 1000);
  const p = (n, w = 2) => String(n).padStart(w, "0");
  return `${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}.${p(d.getMilliseconds(), 3)}`;
}

export function compactJson(value) {
  if (value == null) return "";
  const s = typeof value === "string" ? value : JSON.stringify(value);
  return s.length > 140 ? s.slice(0, 137) + "…" : s;
}

/**
 * A live answer's new text (and reasoning) into the element already shown: its folded reasoning stays open if
 * someone opened it. A part the new render lacks (a discarded attempt's) goes; a new answer joins after it.
 */
function growInPlace(have, want) {
  for (const [sel, top] of [[".thinking-text", ".thinking"], [".answer", ".answer"]]) {
    const w = want.querySelector(sel);
    const hv = have.querySelector(sel);
    if (w && hv) {
      if (hv.textContent !== w.textContent) hv.textContent = w.textContent;
    } else if (hv) {
      hv.closest(top).remove();
    } else if (w && top === ".answer") {
      have.querySelector(".msg-body").append(w);
    } else if (w) {
      have.replaceWith(want); // reasoning after an answer already shown: drawn again, in its order
      return;
    }
  }
}

/**
 * Bring `root`'s children in line with `nodes`. A growing answer (same `data-key`, `data-kind="text"`)
 * keeps its element and only its text changes, so a screen reader hears the addition rather than the whole
 * answer again; other nodes are replaced only when they differ, so a focused button survives a delta.
 */
export function syncChildren(root, nodes) {
  for (let i = 0; i < nodes.length; i++) {
    const have = root.children[i];
    const want = nodes[i];
    if (!have) {
      root.append(want);
    } else if (have.dataset.key && have.dataset.key === want.dataset.key && want.dataset.kind === "text") {
      growInPlace(have, want);
    } else if (!have.isEqualNode(want)) {
      have.replaceWith(want);
    }
  }
  while (root.children.length > nodes.length) root.lastElementChild.remove();
}
