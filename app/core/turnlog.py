"""The turn's part of the conversation: the only writer of the session's history and
chat. A committed turn publishes its question and reply; a continuation withdraws the turn
it goes on from; a barge-in cuts the reply to what the user heard. `ConversationLog` is a
part of `Turn` (app/core/turn.py) and works on its fields.
"""

from __future__ import annotations

import logging

from app.language import has_cjk

log = logging.getLogger("app.core.turn")


class ConversationLog:
    """`Turn`'s methods that write the session's history and chat."""

    def _publish_if_ready(self) -> None:
        """Under the session lock: show the turn once it is committed and its words known."""
        s = self.session
        if self._published or not self._committed or self.user_text is None \
                or self.cancel.is_set():
            return
        self._published = True
        log.info("turn %s (%s): the user said %r", self.turn_id, self.metrics.source,
                 self.user_text[:200])
        if self.continues is not None:
            self.continues.withdraw(self.turn_id)
            self.continues = None  # a chain of continuations holds no earlier turns
        self._user_msg = {"role": "user", "content": self.user_text}
        self._reply_msg = {"role": "assistant", "content": self.reply}
        self._chat_user = {"role": "user", "content": self.user_text}
        self._chat_reply = {"role": "assistant", "content": self.reply}
        s.history += [self._user_msg, self._reply_msg]
        s.chat += [self._chat_user, self._chat_reply]
        s.metrics.append(self.metrics)
        self._release()  # unless it waits for the voice to go (or become a turn)
        if s.outbox is not None and "first_sent" not in self.stamps:
            s.outbox.hold_renders()  # the words show with the voice, not before it
        s.touch()

    def owns(self, message: dict) -> bool:
        """Whether `message` (an entry of the session's history) is this turn's."""
        return message is self._user_msg or message is self._reply_msg

    def withdraw(self, by: int) -> None:
        """Turn `by` answers this turn's words again, with what the user said after them:
        this turn's question and (cut) reply leave the history and the page's chat."""
        s = self.session
        with s.lock:
            self.metrics.continued_in = by
            if not self._published:
                return
            at = next((i for i, m in enumerate(s.history) if m is self._user_msg), None)
            if at is not None and at < s.history_start:
                s.history_start = max(0, s.history_start - 2)
            remove_entries(s.history, self._user_msg, self._reply_msg)
            remove_entries(s.chat, self._chat_user, self._chat_reply)
        log.info("turn %s: withdrawn, its words go on in turn %s", self.turn_id, by)

    def _cut_to_heard(self, heard: tuple[float, ...]) -> None:
        """Barge-in: history and chat keep only what the user heard."""
        text = heard_text(self.pieces, heard)
        with self.session.lock:
            self._interrupted = True
            self.metrics.cancelled = True
            self.metrics.heard_chars = len(text)
            if self._reply_msg is not None:
                self._reply_msg["content"] = text or "..."
                self._reply_msg["interrupted"] = True
                self._chat_reply["content"] = (text + " …" if text else "…") + " [interrupted]"



def heard_text(pieces: dict[int, str], heard: tuple[float, ...]) -> str:
    """The words of each piece in proportion to the share of it that played."""
    out: list[str] = []
    for index, share in enumerate(heard):
        text = pieces.get(index, "")
        if share >= 0.999:
            out.append(text)
        elif share > 0:
            if has_cjk(text):
                out.append(text[:int(len(text) * share)])
            else:
                words = text.split()
                out.append(" ".join(words[:int(len(words) * share)]))
            break
        else:
            break
    return " ".join(p for p in out if p).strip()


def remove_entries(items: list[dict], *entries: dict | None) -> None:
    for entry in entries:
        for i, item in enumerate(items):
            if item is entry:
                del items[i]
                break
