// Files a message will carry: chosen by the Attach button, pasted, or dropped on the composer; shown as
// thumbnails (an image) or a name (a PDF) until the message is sent. The server checks them (type read from the
// bytes, size, at most 20) and says why it refuses one; the page only keeps what the input already accepts.

import { h } from "./dom.js";

export const ACCEPTED = ["image/png", "image/jpeg", "image/gif", "image/webp", "application/pdf"];

export class Attachments {
  /** `tray`: the element the thumbnails go in. */
  constructor(tray) {
    this.tray = tray;
    this.items = []; // {file, url}: url is an object URL for an image's thumbnail
  }

  /** Add files (a FileList or an array); other types are left for the server to refuse with its reason. */
  add(files) {
    for (const file of Array.from(files || [])) {
      const url = file.type.startsWith("image/") ? URL.createObjectURL(file) : null;
      this.items.push({ file, url });
    }
    this.render();
  }

  remove(index) {
    const [gone] = this.items.splice(index, 1);
    if (gone && gone.url) URL.revokeObjectURL(gone.url);
    this.render();
  }

  clear() {
    for (const item of this.items) if (item.url) URL.revokeObjectURL(item.url);
    this.items = [];
    this.render();
  }

  /** The HTTP body's `files`: [{media_type, data (base64), name}]. */
  async payload() {
    return Promise.all(this.items.map(async ({ file }) => ({
      media_type: file.type || "application/octet-stream",
      data: await base64Of(file),
      name: file.name || null,
    })));
  }

  render() {
    this.tray.hidden = this.items.length === 0;
    this.tray.replaceChildren(...this.items.map((item, i) => thumbnail(item, () => this.remove(i))));
  }
}

function thumbnail({ file, url }, onRemove) {
  const label = file.name || file.type;
  return h(
    "div",
    { class: "attachment", "data-testid": "attachment", "data-key": `${label}:${file.size}` },
    url ? h("img", { src: url, alt: label, class: "attachment-image" }) : h("span", { class: "attachment-name", text: label }),
    h("button", { type: "button", class: "attachment-remove", "aria-label": `Remove ${label}`, text: "×", onclick: onRemove }),
  );
}

function base64Of(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(String(reader.result).split(",", 2)[1] || "");
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(file);
  });
}
