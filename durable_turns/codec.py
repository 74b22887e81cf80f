"""Encrypted payloads: an AES-256-GCM ``PayloadCodec`` with key ids, so keys can rotate.

Every payload the SDK sends to Temporal (workflow and activity inputs and results, signal,
update and query arguments, heartbeat details, memos, and, with the failure converter that
:func:`data_converter_from_env` installs, failure messages and stack traces) is replaced by::

    metadata: {"encoding": "binary/encrypted", "encryption-key-id": "<key id>"}
    data:     nonce (12 bytes) || AES-GCM(serialized original Payload) || tag (16 bytes)

The original payload is serialized whole, so its metadata (``json/plain``, message type …)
is encrypted too. The key id is bound to the ciphertext as associated data: relabelling a
payload with another key id makes it fail to decrypt. Search attributes are *not* payloads
of this kind: ConversationId, TurnStatus and TurnModel stay readable (and searchable).

Keys
----
``TURNS_ENCRYPTION_KEYS`` lists the keys, comma-separated, each ``<key id>:<base64 key>``;
the **first one is current** (it encrypts), all of them decrypt::

    TURNS_ENCRYPTION_KEYS="k2:<base64 of 32 random bytes>,k1:<base64 of 32 random bytes>"

``TURNS_ENCRYPTION_KEYS_FILE`` may name a file holding the same text instead (a Docker or
Kubernetes secret); setting both is an error. A key id is 1-64 characters of
``[A-Za-z0-9._-]``; a key is standard or URL-safe base64 of exactly 32 bytes (AES-256).
Make one with ``python -m durable_turns.codec k3`` (prints ``k3:<new key>``).

Rotation: put the new key first (``k2:…,k1:…``) on every worker, client and codec server;
new payloads use k2 and old ones still decrypt with k1. Drop k1 only once no history that
holds a k1 payload can be read any more (closed workflows past the namespace retention) —
a worker that meets a payload whose key it lacks fails the workflow task with
:class:`UnknownKeyError` and Temporal retries it, so adding the key back recovers.

Unset (or empty) variables mean no encryption: :func:`data_converter_from_env` returns the
plain pydantic converter. Payloads that are not ``binary/encrypted`` pass through decode
unchanged, so histories written before encryption was turned on stay readable.

Errors are typed (:class:`KeyConfigError` for bad configuration, :class:`UnknownKeyError`
and :class:`DecryptionError` for payloads) and name key ids only, never key material.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import functools
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel
from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import PydanticJSONPlainPayloadConverter, PydanticPayloadConverter
from temporalio.converter import (
    DataConverter,
    DefaultFailureConverterWithEncodedAttributes,
    PayloadCodec,
)

from durable_turns.contract import (
    UNDECRYPTABLE_ENCODING,
    ConversationInput,
    ConversationState,
    Internal,
    RequestRecord,
    TurnResult,
)
from durable_turns.errors import CodecError as CodecError
from durable_turns.errors import DecryptionError, KeyConfigError, UnknownKeyError
from durable_turns.redaction import register

ENV_KEYS = "TURNS_ENCRYPTION_KEYS"
SERVER_TOKEN_ENV = "TURNS_CODEC_SERVER_TOKEN"
"""The codec server's bearer token (``durable_turns.codec_server``): a secret to mask."""
ENV_KEYS_FILE = "TURNS_ENCRYPTION_KEYS_FILE"

ENCODING = b"binary/encrypted"
METADATA_ENCODING = "encoding"
METADATA_KEY_ID = "encryption-key-id"
KEY_BYTES = 32
NONCE_BYTES = 12
_AAD_PREFIX = b"durable-turns/payload/v1:"
_KEY_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


@dataclass(frozen=True)
class EncryptionKey:
    """One AES-256 key and its id. The key bytes never appear in ``repr``."""

    key_id: str
    secret: bytes = field(repr=False)

    def __post_init__(self) -> None:
        if not _KEY_ID.match(self.key_id):
            raise KeyConfigError(
                f"bad encryption key id {shown_id(self.key_id)}: use 1-64 characters of A-Z a-z 0-9 . _ -"
            )
        if len(self.secret) != KEY_BYTES:
            raise KeyConfigError(
                f"encryption key {shown_id(self.key_id)} is {len(self.secret)} bytes;"
                f" AES-256 needs exactly {KEY_BYTES}"
            )


MAX_SHOWN_KEY_ID = 32
"""A configuration error names a key id of at most this many characters; a longer one is
likely a key written where its id goes (``<key>:<id>``, 43-44 characters of base64), and
is not shown."""


def shown_id(key_id: str) -> str:
    """A key id as a configuration error may show it: never what could be a key."""
    if len(key_id) <= MAX_SHOWN_KEY_ID:
        return repr(key_id)
    return f"of {len(key_id)} characters (not shown: a key written where its id goes?)"


def generate_key() -> str:
    """A new random key, base64-encoded (the part after ``id:`` in ``TURNS_ENCRYPTION_KEYS``)."""
    return base64.b64encode(os.urandom(KEY_BYTES)).decode("ascii")


def _decode_key(key_id: str, text: str) -> bytes:
    text = text.strip().replace("-", "+").replace("_", "/")  # accept URL-safe base64 too
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, ValueError, UnicodeEncodeError):
        # Never echo the value: it is (meant to be) a secret.
        raise KeyConfigError(f"encryption key {shown_id(key_id)} is not valid base64") from None


def parse_keys(spec: str) -> list[EncryptionKey]:
    """``"k2:BASE64,k1:BASE64"`` → keys, current first. Raises :class:`KeyConfigError`, which
    shows no key: not where it belongs, nor where an id belongs (``<key>:<id>``). Each key's
    text (both base64 alphabets) is masked in every log record from now on."""
    for entry in spec.split(","):
        material = entry.partition(":")[2].strip()
        urlsafe = material.replace("+", "-").replace("/", "_")
        register(material, urlsafe, urlsafe.replace("-", "+").replace("_", "/"))
    try:
        return _parse_keys(spec)
    except KeyConfigError as e:
        message = str(e)
        for entry in spec.split(","):
            material = entry.partition(":")[2].strip()
            if len(material) >= 8:
                message = message.replace(material, "***")
        raise KeyConfigError(message) from None


def _parse_keys(spec: str) -> list[EncryptionKey]:
    keys: list[EncryptionKey] = []
    for position, entry in enumerate(spec.split(","), start=1):
        entry = entry.strip()
        if not entry:
            continue
        key_id, sep, material = entry.partition(":")
        key_id = key_id.strip()
        if not sep or not key_id or not material.strip():
            raise KeyConfigError(
                f"{ENV_KEYS} entry {position} is not '<key id>:<base64 key>'"
                + (f" (key id {shown_id(key_id)})" if sep and key_id else "")
            )
        keys.append(EncryptionKey(key_id, _decode_key(key_id, material)))
    if not keys:
        raise KeyConfigError(f"{ENV_KEYS} holds no keys")
    seen: set[str] = set()
    for key in keys:
        if key.key_id in seen:
            raise KeyConfigError(f"encryption key id {shown_id(key.key_id)} appears twice")
        seen.add(key.key_id)
    return keys


def _aad(key_id: str) -> bytes:
    return _AAD_PREFIX + key_id.encode("utf-8")


class EncryptionCodec(PayloadCodec):
    """Encrypts with the first (current) key; decrypts with any of the keys by key id."""

    def __init__(self, keys: Sequence[EncryptionKey]) -> None:
        # imported here: a process without encryption keys never loads cryptography (7 ms
        # of a worker's start)
        try:
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        except ImportError:  # pragma: no cover - depends on the install
            raise KeyConfigError(
                "encrypted payloads need the 'cryptography' package:"
                " pip install 'durable-turns[encryption]'"
            ) from None
        if not keys:
            raise KeyConfigError("an EncryptionCodec needs at least one key")
        ids = [k.key_id for k in keys]
        if len(set(ids)) != len(ids):
            raise KeyConfigError("encryption key ids must be unique")
        self._current = keys[0]
        self._ciphers = {k.key_id: AESGCM(k.secret) for k in keys}

    @classmethod
    def from_spec(cls, spec: str) -> EncryptionCodec:
        return cls(parse_keys(spec))

    @property
    def current_key_id(self) -> str:
        return self._current.key_id

    @property
    def key_ids(self) -> tuple[str, ...]:
        return tuple(self._ciphers)

    def __repr__(self) -> str:
        return f"EncryptionCodec(current={self.current_key_id!r}, keys={list(self.key_ids)!r})"

    # --- one payload, synchronously (the codec server uses these directly) -----------------

    def encrypt(self, payload: Payload) -> Payload:
        key_id = self._current.key_id
        nonce = os.urandom(NONCE_BYTES)
        sealed = self._ciphers[key_id].encrypt(nonce, payload.SerializeToString(), _aad(key_id))
        return Payload(
            metadata={METADATA_ENCODING: ENCODING, METADATA_KEY_ID: key_id.encode("utf-8")},
            data=nonce + sealed,
        )

    def decrypt(self, payload: Payload) -> Payload:
        """The original payload; a payload that is not ``binary/encrypted`` is returned as is."""
        if payload.metadata.get(METADATA_ENCODING) != ENCODING:
            return payload
        raw_id = payload.metadata.get(METADATA_KEY_ID)
        if raw_id is None:
            raise DecryptionError(f"encrypted payload without '{METADATA_KEY_ID}' metadata")
        key_id = raw_id.decode("utf-8", errors="replace")
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            raise UnknownKeyError(key_id, self.key_ids)
        if len(payload.data) < NONCE_BYTES + 16:
            raise DecryptionError(f"encrypted payload (key id {key_id!r}) is truncated")
        nonce, sealed = payload.data[:NONCE_BYTES], payload.data[NONCE_BYTES:]
        from cryptography.exceptions import InvalidTag  # loaded with the cipher (__init__)

        try:
            plain = cipher.decrypt(nonce, sealed, _aad(key_id))
        except InvalidTag:
            raise DecryptionError(
                f"encrypted payload (key id {key_id!r}) failed authentication:"
                " tampered, or encrypted with a different key under that id"
            ) from None
        original = Payload()
        try:
            original.ParseFromString(plain)
        except Exception as e:  # protobuf's DecodeError
            raise DecryptionError(f"decrypted payload (key id {key_id!r}) is not a Payload") from e
        return original

    # --- the PayloadCodec interface ---------------------------------------------------------

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.encrypt(p) for p in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self._decrypt_or_mark(p) for p in payloads]

    def _decrypt_or_mark(self, payload: Payload) -> Payload:
        """A payload that cannot be decrypted (tampered, truncated, not a Payload) becomes an
        ``binary/undecryptable`` marker instead of failing the whole workflow task forever:
        a signal or update carrying it is rejected as ``InvalidPayload``; anywhere else it
        fails to convert, as before. A payload under a key id this process does not know
        still raises :class:`UnknownKeyError`, so adding the key back recovers it."""
        try:
            return self.decrypt(payload)
        except DecryptionError as e:
            return Payload(
                metadata={
                    METADATA_ENCODING: UNDECRYPTABLE_ENCODING,
                    "reason": str(e).encode("utf-8"),
                }
            )


def keys_spec(environ: Mapping[str, str]) -> str | None:
    """The keys' text: ``TURNS_ENCRYPTION_KEYS``, or the file ``TURNS_ENCRYPTION_KEYS_FILE``
    names (one of them)."""
    inline = (environ.get(ENV_KEYS) or "").strip()
    path = (environ.get(ENV_KEYS_FILE) or "").strip()
    if inline and path:
        raise KeyConfigError(f"set {ENV_KEYS} or {ENV_KEYS_FILE}, not both")
    if path:
        try:
            with open(path, encoding="utf-8") as f:
                text = " ".join(f.read().split())
        except OSError as e:
            raise KeyConfigError(f"cannot read {ENV_KEYS_FILE}={path!r}: {e.strerror}") from None
        if not text:
            raise KeyConfigError(f"{ENV_KEYS_FILE}={path!r} is empty")
        return text
    return inline or None


def codec_from_env(environ: Mapping[str, str] | None = None) -> EncryptionCodec | None:
    """The codec the environment configures, or None when no keys are set."""
    spec = keys_spec(os.environ if environ is None else environ)
    return EncryptionCodec.from_spec(spec) if spec else None


def with_codec(converter: DataConverter, codec: PayloadCodec) -> DataConverter:
    """``converter`` with ``codec``, and failure messages/stack traces encoded (so encrypted)."""
    return dataclasses.replace(
        converter,
        payload_codec=codec,
        failure_converter_class=DefaultFailureConverterWithEncodedAttributes,
    )


class SharedPydanticPayloadConverter(PydanticPayloadConverter):
    """temporalio's pydantic payload converter, built once per process and then shared.

    A worker builds a new data converter, and with it a new payload converter, three times
    for every workflow activation (once per serialization context), and a pydantic payload
    converter starts with a new JSON serializer and an empty type-adapter cache each time.
    This one is stateless between calls (its type-adapter cache is thread-safe), so every
    instantiation returns the same instance and its cache outlives the activation.
    """

    def __new__(cls) -> SharedPydanticPayloadConverter:
        return _SHARED_PAYLOAD_CONVERTER

    def __init__(self) -> None:
        """Built once, below; ``__new__`` hands out that instance."""


class LeanJSONPayloadConverter(PydanticJSONPlainPayloadConverter):
    """JSON, leaving out every field at its default in what the engine hands itself.

    The engine's own payloads (``contract.Internal``: activity inputs and results, a turn's
    input; and the conversation's continue-as-new input) go without the fields whose value
    is their default: a reader of any version fills those in. So a field added in a release
    is on the wire only when a turn uses it, and the release before it, whose readers are
    strict, can serve beside this one (docs/deployment.md, "Rolling deploys"). What clients
    read (a turn's result, ``state``) goes whole. The price is one rule: the default of an
    internal field never changes, since an older reader would read its own.
    """

    def to_payload(self, value: object) -> Payload | None:
        if isinstance(value, Internal | ConversationInput) and not isinstance(
            value, _READ_BY_CLIENTS
        ):
            return Payload(
                metadata={"encoding": self.encoding.encode()},
                data=value.model_dump_json(exclude=_at_defaults(value)).encode(),
            )
        return super().to_payload(value)


_READ_BY_CLIENTS = (TurnResult, ConversationState, RequestRecord)


_REQUIRED = object()


@dataclass(frozen=True)
class _Factory:
    make: Callable[[], Any]

    def __call__(self) -> Any:
        return self.make()


@functools.cache
def _defaults(cls: type[BaseModel]) -> tuple[tuple[str, Any], ...]:
    """Each field of ``cls`` with its default (a ``_Factory`` for a default factory, the
    ``_REQUIRED`` marker for none), read once per class: pydantic inspects a factory's
    signature on every ``get_default``."""
    out = []
    for name, info in cls.model_fields.items():
        if info.is_required():
            out.append((name, _REQUIRED))
        elif info.default_factory is not None:
            out.append((name, _Factory(info.default_factory)))  # type: ignore[arg-type]
        else:
            out.append((name, info.default))
    return tuple(out)


def _at_defaults(model: BaseModel) -> dict[Any, Any]:
    """``model_dump``'s ``exclude`` for the fields of ``model``, and of the internal models
    in it (alone or in lists), whose value is their default. Only the engine's own models:
    inside a message nothing is left out (a part's ``type`` is its discriminator)."""
    out: dict[Any, Any] = {}
    for name, default in _defaults(type(model)):
        value = getattr(model, name)
        if default is not _REQUIRED and value == (
            default() if isinstance(default, _Factory) else default
        ):
            out[name] = True
        elif isinstance(value, Internal):
            if sub := _at_defaults(value):
                out[name] = sub
        elif isinstance(value, list) and value and isinstance(value[0], Internal):
            items = {
                i: sub
                for i, item in enumerate(value)
                if isinstance(item, Internal) and (sub := _at_defaults(item))
            }
            if items:
                out[name] = items
    return out


_SHARED_PAYLOAD_CONVERTER = object.__new__(SharedPydanticPayloadConverter)
PydanticPayloadConverter.__init__(_SHARED_PAYLOAD_CONVERTER)
_SHARED_PAYLOAD_CONVERTER.converters = {
    encoding: LeanJSONPayloadConverter() if encoding == b"json/plain" else converter
    for encoding, converter in _SHARED_PAYLOAD_CONVERTER.converters.items()
}

PYDANTIC_DATA_CONVERTER = DataConverter(payload_converter_class=SharedPydanticPayloadConverter)
"""temporalio's ``pydantic_data_converter``, with its payload converter shared."""


def data_converter_from_env(environ: Mapping[str, str] | None = None) -> DataConverter:
    """The data converter for clients and workers: pydantic, encrypted when keys are set.

    Raises :class:`KeyConfigError` when the keys are set but malformed.
    """
    codec = codec_from_env(environ)
    return PYDANTIC_DATA_CONVERTER if codec is None else with_codec(PYDANTIC_DATA_CONVERTER, codec)


def main(argv: list[str] | None = None) -> None:
    """``python -m durable_turns.codec [KEY_ID]``: print ``KEY_ID:<new random key>``."""
    args = sys.argv[1:] if argv is None else argv
    key_id = args[0] if args else "k1"
    if not _KEY_ID.match(key_id):
        sys.exit(f"bad key id {key_id!r}: use 1-64 characters of A-Z a-z 0-9 . _ -")
    print(f"{key_id}:{generate_key()}")


if __name__ == "__main__":
    main()
