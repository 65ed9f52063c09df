"""A mixin for objects that own threads: `with X(...) as x:` and garbage collection shut them down."""

from __future__ import annotations

from typing import Any


class ShutsDownOnExit:
    def shutdown(self) -> None:  # pragma: no cover - every user defines it
        raise NotImplementedError

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def __del__(self) -> None:
        try:
            self.shutdown()
        except Exception:  # interpreter shutdown: modules may already be gone
            pass
