"""Kafka principals: ``User:alice``; connections nobody authenticated are ``User:ANONYMOUS``."""
from typing import NamedTuple


class KafkaPrincipal(NamedTuple):
    type: str
    name: str

    def __str__(self) -> str:
        return f"{self.type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> "KafkaPrincipal":
        """``User:alice`` -> KafkaPrincipal("User", "alice"); a name may itself contain ':'."""
        kind, sep, name = text.strip().partition(":")
        if not sep or not kind or not name:
            raise ValueError(f"bad principal {text!r}: expected Type:name, e.g. User:alice")
        return cls(kind, name)


ANONYMOUS = KafkaPrincipal("User", "ANONYMOUS")
