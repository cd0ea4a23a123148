"""The two clocks of a voice turn: the browser's (microphone, speaker) and the server's.

Voice-to-voice is measured on the browser's clock alone (last voiced frame -> first reply
sample audible), so it never mixes clocks. The per-stage breakdown places server events on
the same axis: each microphone frame carries its browser capture time, and the smallest
(arrival - capture) over the frames seen is the offset plus the shortest transit, which on
loopback is a millisecond or two. The estimate only improves as frames arrive.
"""

from __future__ import annotations

import threading


class BrowserClock:
    def __init__(self) -> None:
        self._offset_ms: float | None = None
        self._lock = threading.Lock()

    def observe(self, captured_ms: float, arrived: float) -> None:
        """A frame captured at browser time `captured_ms` arrived at server time `arrived`."""
        offset = arrived * 1000.0 - captured_ms
        with self._lock:
            if self._offset_ms is None or offset < self._offset_ms:
                self._offset_ms = offset

    @property
    def known(self) -> bool:
        return self._offset_ms is not None

    def to_server(self, browser_ms: float) -> float:
        """Server perf_counter() seconds for a browser time."""
        return (browser_ms + (self._offset_ms or 0.0)) / 1000.0
