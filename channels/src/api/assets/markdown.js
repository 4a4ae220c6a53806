// Markdown as the models write it, rendered by building DOM nodes whose text is set with
// textContent: no string from the model is ever parsed as HTML, so it cannot inject markup
// or script. Links keep only http(s) and mailto targets.
"use strict";

(function () {
  const SAFE_LINK = /^(https?:|mailto:)/i;

  function el(tag, text) {
    const node = document.createElement(tag);
    if (text !== undefined) node.textContent = text;
    return node;
  }

  // Inline spans: `code`, **bold**, *italic* / _italic_, [text](url), bare http(s) URLs.
  const INLINE = /(`[^`\n]+`)|(\*\*[^*\n]+\*\*)|(\*[^*\n]+\*|_[^_\n]+_)|(\[[^\]\n]+\]\([^)\s]+\))|(https?:\/\/[^\s<>()]+[^\s<>().,;:!?'"])/;

  function inline(parent, text) {
    let rest = text;
    while (rest.length > 0) {
      const match = INLINE.exec(rest);
      if (!match) { parent.append(rest); return; }
      if (match.index > 0) parent.append(rest.slice(0, match.index));
      const token = match[0];
      if (match[1]) {
        parent.append(el("code", token.slice(1, -1)));
      } else if (match[2]) {
        const strong = el("strong"); inline(strong, token.slice(2, -2)); parent.append(strong);
      } else if (match[3]) {
        const em = el("em"); inline(em, token.slice(1, -1)); parent.append(em);
      } else if (match[4]) {
        const close = token.indexOf("](");
        parent.append(link(token.slice(1, close), token.slice(close + 2, -1)));
      } else {
        parent.append(link(token, token));
      }
      rest = rest.slice(match.index + token.length);
    }
  }

  function link(text, href) {
    if (!SAFE_LINK.test(href)) return document.createTextNode(text);
    const a = el("a", text);
    a.href = href;
    a.rel = "noopener noreferrer nofollow";
    a.target = "_blank";
    return a;
  }

  function paragraph(parent, lines) {
    if (lines.length === 0) return;
    const p = el("p");
    lines.forEach((line, i) => {
      if (i > 0) p.append(el("br"));
      inline(p, line);
    });
    parent.append(p);
  }

  // Blocks: ``` fences, # headings, > quotes, - / * / 1. lists, paragraphs.
  function render(text) {
    const root = document.createDocumentFragment();
    const lines = String(text).replace(/\r\n?/g, "\n").split("\n");
    let para = [];
    let list = null;
    const flush = () => { paragraph(root, para); para = []; list = null; };
    for (let i = 0; i < lines.length; i++) {
      const line = lines[i];
      const fence = /^\s*```/.exec(line);
      if (fence) {
        flush();
        const code = [];
        for (i++; i < lines.length && !/^\s*```/.test(lines[i]); i++) code.push(lines[i]);
        const pre = el("pre");
        pre.append(el("code", code.join("\n")));
        root.append(pre);
        continue;
      }
      const heading = /^(#{1,6})\s+(.*)$/.exec(line);
      const item = /^\s*([-*+]|\d+[.)])\s+(.*)$/.exec(line);
      const quote = /^>\s?(.*)$/.exec(line);
      if (line.trim() === "") {
        flush();
      } else if (heading) {
        flush();
        const h = el("h" + Math.min(heading[1].length + 2, 6));
        inline(h, heading[2]);
        root.append(h);
      } else if (item) {
        paragraph(root, para); para = [];
        const ordered = /\d/.test(item[1]);
        if (!list || (list.tagName === "OL") !== ordered) {
          list = el(ordered ? "ol" : "ul");
          root.append(list);
        }
        const li = el("li"); inline(li, item[2]); list.append(li);
      } else if (quote) {
        flush();
        const q = el("blockquote"); inline(q, quote[1]); root.append(q);
      } else {
        list = null;
        para.push(line);
      }
    }
    flush();
    return root;
  }

  window.renderMarkdown = render;
})();
