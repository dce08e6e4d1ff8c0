"""Optional encryption of every Temporal payload (AES-256-GCM).

Turned on by ``AGENT_ENCRYPTION_KEY`` (read by ``durable_agents.converter.data_converter``), either
one base64 key of 32 bytes (key id ``default``) or ``id1:base64key,id2:base64key``: the first key
encrypts, every listed key decrypts, so keys rotate by putting the new one first and keeping the old
ones until their histories are gone. ``durable_agents/cli/codec.py`` makes keys and serves the codec
to the Web UI and the ``temporal`` CLI.
"""

from __future__ import annotations

import base64
import binascii
import os
import secrets
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from temporalio.api.common.v1 import Payload
from temporalio.converter import PayloadCodec

if TYPE_CHECKING:
    pass

ENCODING = b"binary/encrypted"
KEY_ID_METADATA = "encryption-key-id"
DEFAULT_KEY_ID = "default"
KEY_BYTES = 32
NONCE_BYTES = 12
ENV_VAR = "AGENT_ENCRYPTION_KEY"

DEFAULT_ORIGINS = ("http://localhost:8233",)
ALLOW_HEADERS = "Content-Type,X-Namespace,Authorization"
MAX_BODY_BYTES = 64 * 1024 * 1024


class EncryptionKeyError(Exception):
    """An encrypted payload cannot be decrypted: its key is not configured, or it does not match."""


def _decode_key(key_id: str, text: str) -> bytes:
    text = text.strip()
    if not text:
        raise ValueError(f"{ENV_VAR}: key {key_id!r} is empty")
    try:  # standard or URL-safe alphabet
        key = base64.b64decode(text.replace("-", "+").replace("_", "/"), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"{ENV_VAR}: key {key_id!r} is not valid base64") from None
    if len(key) != KEY_BYTES:
        raise ValueError(
            f"{ENV_VAR}: key {key_id!r} is {len(key)} bytes, AES-256 needs {KEY_BYTES} "
            "(make one with: python codec.py new-key)"
        )
    return key


def parse_keys(value: str) -> dict[str, bytes]:
    """``AGENT_ENCRYPTION_KEY``'s value as ``{key id: key}``, the encrypting key first.

    Raises ``ValueError`` naming the entry and what is wrong with it (never the key itself).
    """
    value = value.strip()
    if not value:
        raise ValueError(f"{ENV_VAR} is empty")
    if ":" not in value and "," not in value:
        return {DEFAULT_KEY_ID: _decode_key(DEFAULT_KEY_ID, value)}
    keys: dict[str, bytes] = {}
    for position, entry in enumerate(value.split(","), 1):
        entry = entry.strip()
        key_id, colon, key_text = entry.partition(":")
        key_id = key_id.strip()
        if not entry:
            raise ValueError(f"{ENV_VAR}: entry {position} is empty (expected id1:base64key,id2:base64key)")
        if not colon:
            raise ValueError(
                f"{ENV_VAR}: entry {position} has no key id; with several keys each entry is id:base64key"
            )
        if not key_id:
            raise ValueError(f"{ENV_VAR}: entry {position} has an empty key id (expected id:base64key)")
        if key_id in keys:
            raise ValueError(f"{ENV_VAR}: key id {key_id!r} is listed twice")
        keys[key_id] = _decode_key(key_id, key_text)
    return keys


class EncryptionCodec(PayloadCodec):
    """AES-256-GCM over the whole serialized payload, a random 12-byte nonce per payload.

    The encrypted payload carries ``encoding: binary/encrypted`` and ``encryption-key-id`` metadata; its
    data is the nonce followed by the ciphertext. Payloads without that encoding (history written before
    encryption was turned on) decode unchanged.
    """

    def __init__(self, keys: Mapping[str, bytes] | Iterable[tuple[str, bytes]]) -> None:
        pairs = list(keys.items() if isinstance(keys, Mapping) else keys)
        if not pairs:
            raise ValueError("EncryptionCodec needs at least one key")
        self._ciphers: dict[str, AESGCM] = {}
        for key_id, key in pairs:
            if not key_id:
                raise ValueError("key ids must not be empty")
            if key_id in self._ciphers:
                raise ValueError(f"key id {key_id!r} is given twice")
            if len(key) != KEY_BYTES:
                raise ValueError(f"key {key_id!r} is {len(key)} bytes, AES-256 needs {KEY_BYTES}")
            self._ciphers[key_id] = AESGCM(key)
        self.key_id = pairs[0][0]
        """The id of the key that encrypts."""

    @classmethod
    def from_env_value(cls, value: str) -> EncryptionCodec:
        return cls(parse_keys(value))

    @property
    def key_ids(self) -> list[str]:
        return list(self._ciphers)

    def encrypt(self, payload: Payload) -> Payload:
        nonce = os.urandom(NONCE_BYTES)
        sealed = self._ciphers[self.key_id].encrypt(nonce, payload.SerializeToString(), None)
        return Payload(
            metadata={"encoding": ENCODING, KEY_ID_METADATA: self.key_id.encode()},
            data=nonce + sealed,
        )

    def decrypt(self, payload: Payload) -> Payload:
        if payload.metadata.get("encoding") != ENCODING:
            return payload
        raw_id = payload.metadata.get(KEY_ID_METADATA)
        if raw_id is None:
            raise EncryptionKeyError(f"encrypted payload has no {KEY_ID_METADATA} metadata")
        key_id = raw_id.decode(errors="replace")
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            raise EncryptionKeyError(
                f"payload is encrypted with key id {key_id!r}, which {ENV_VAR} does not have "
                f"(it has: {', '.join(self._ciphers)})"
            )
        if len(payload.data) < NONCE_BYTES + 16:
            raise EncryptionKeyError(f"payload encrypted with key id {key_id!r} is truncated")
        try:
            plain = cipher.decrypt(payload.data[:NONCE_BYTES], payload.data[NONCE_BYTES:], None)
        except InvalidTag:
            raise EncryptionKeyError(
                f"payload encrypted with key id {key_id!r} does not decrypt with that key "
                "(a different key under the same id, or the data was altered)"
            ) from None
        decoded = Payload()
        decoded.ParseFromString(plain)
        return decoded

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.encrypt(p) for p in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.decrypt(p) for p in payloads]


def codec_for(keys: str) -> EncryptionCodec | None:
    """The codec the ``AGENT_ENCRYPTION_KEY`` value ``keys`` asks for, or None when it is empty.

    Raises ``ValueError`` when the value is malformed.
    """
    return EncryptionCodec.from_env_value(keys) if keys.strip() else None


def new_key() -> str:
    return base64.b64encode(secrets.token_bytes(KEY_BYTES)).decode()
