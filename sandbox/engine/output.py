"""Capped output buffers and the decoding rule for program output."""

from __future__ import annotations


class CappedBuffer:
    """Keeps the first ``limit`` bytes of a stream and remembers whether more came."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._chunks: list[bytes] = []
        self._size = 0
        self.truncated = False

    def write(self, data: bytes) -> bool:
        """Append data; return False once the cap has been passed."""
        room = self.limit - self._size
        if len(data) > room:
            data = data[:max(room, 0)]
            self.truncated = True
        if data:
            self._chunks.append(data)
            self._size += len(data)
        return not self.truncated

    def getvalue(self) -> bytes:
        return b"".join(self._chunks)


def decode_output(data: bytes) -> str:
    """Bytes that are not UTF-8 become U+FFFD; everything else is kept exactly."""
    return data.decode("utf-8", errors="replace")
