"""API bearer tokens as the CLI makes them and the gateway checks them: a fresh random token,
and the SHA-256 digest that the config stores in its place."""

from __future__ import annotations

import hashlib
import secrets

__all__ = ["hash_token", "new_token"]


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def new_token() -> str:
    """A fresh random token (256 bits)."""
    return "rsg_" + secrets.token_urlsafe(32)
