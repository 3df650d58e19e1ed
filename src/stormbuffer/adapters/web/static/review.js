// Keyboard review for the inbox: j/k move between candidates, a approves, r rejects, e edits,
// x selects for a bulk decision, / goes to search. Every action is also a plain button or link.
"use strict";
document.addEventListener("keydown", (event) => {
  const target = event.target;
  if (event.ctrlKey || event.metaKey || event.altKey) return;
  if (target instanceof HTMLInputElement || target instanceof HTMLTextAreaElement || target instanceof HTMLSelectElement) {
    if (!(target instanceof HTMLInputElement && target.type === "checkbox")) return;
  }
  const cards = Array.from(document.querySelectorAll("article.candidate"));
  const current = document.activeElement ? document.activeElement.closest("article.candidate") : null;
  const index = current ? cards.indexOf(current) : -1;
  const act = (selector) => {
    const card = current || cards[0];
    const control = card ? card.querySelector(selector) : null;
    if (control) { event.preventDefault(); control.click(); }
  };
  switch (event.key) {
    case "j": if (cards.length) { event.preventDefault(); cards[Math.min(index + 1, cards.length - 1)].focus(); } break;
    case "k": if (cards.length) { event.preventDefault(); cards[Math.max(index - 1, 0)].focus(); } break;
    case "a": act("button.approve"); break;
    case "r": act("button.reject"); break;
    case "e": act("a.edit"); break;
    case "x": act("input[type=checkbox]"); break;
    case "/": event.preventDefault(); window.location.assign("/search"); break;
  }
});
document.addEventListener("DOMContentLoaded", () => {
  const first = document.querySelector("article.candidate");
  if (first && document.activeElement === document.body) first.focus();
});
