"""The encrypted store: AES-256-GCM on the client, with keys the user holds (docs/sync.md)."""

from .backend import EncryptedBackend, Encryption, IntegrityError, protect
from .keys import WrongKeyError

__all__ = ["EncryptedBackend", "Encryption", "IntegrityError", "WrongKeyError", "protect"]
