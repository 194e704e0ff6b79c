"""Ed25519 keys for checkpoints (the ``signing`` extra: ``pip install '.[signing]'``).

A key pair is two files: the private key (PEM, PKCS#8, mode 0600) for the processes that
write the ledger, and the public key (PEM) for whoever verifies it. A key's id is the
first 16 hex digits of the SHA-256 of its raw public key, recorded with each signature so
a verifier knows which key to use.
"""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path
from typing import Any

from .._exceptions import ConfigurationError
from .._extras import install_line


def _crypto() -> Any:
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError as exc:
        raise ConfigurationError(
            f"signed checkpoints need the cryptography package: {install_line('signing')}"
        ) from exc
    return serialization, ed25519


def key_id(public_key: Any) -> str:
    serialization, _ = _crypto()
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


def new_key_pair(folder: str | Path) -> tuple[Path, Path]:
    """Write a new Ed25519 key pair into ``folder`` (made if missing); return the paths of
    the private key (mode 0600, for ``oncelog.open(signing_key=...)``) and the public key
    (for ``Ledger.verify(public_keys=...)``). Needs ``pip install '.[signing]'``."""
    serialization, ed25519 = _crypto()
    folder = Path(folder)
    private = ed25519.Ed25519PrivateKey.generate()
    ident = key_id(private.public_key())
    folder.mkdir(parents=True, exist_ok=True)
    private_path, public_path = folder / f"oncelog-{ident}.key", folder / f"oncelog-{ident}.pub"
    pem = private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )  # fmt: skip
    # Created 0600 from the first byte: never readable by others, not even for an instant.
    fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(pem)
    public_path.write_bytes(
        private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return private_path, public_path


class Signer:
    """Signs with a private key file; refuses a file that others can read."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        serialization, ed25519 = _crypto()
        path = Path(path)
        try:
            if path.stat().st_mode & 0o077:
                raise ConfigurationError(f"signing key {path} is readable by others: chmod 600 it")
            key = serialization.load_pem_private_key(path.read_bytes(), password=None)
        except (OSError, ValueError) as exc:
            raise ConfigurationError(f"cannot read signing key {path}: {exc}") from exc
        if not isinstance(key, ed25519.Ed25519PrivateKey):
            raise ConfigurationError(f"{path} is not an Ed25519 private key")
        self._key = key
        self.key_id = key_id(key.public_key())

    def sign(self, payload: str) -> str:
        return base64.b64encode(self._key.sign(payload.encode())).decode()


class Verifier:
    """Checks signatures against public key files, by key id."""

    def __init__(self, paths: list[str | Path]) -> None:
        serialization, ed25519 = _crypto()
        self._keys: dict[str, Any] = {}
        for path in paths:
            try:
                key = serialization.load_pem_public_key(Path(path).read_bytes())
            except (OSError, ValueError) as exc:
                raise ConfigurationError(f"cannot read public key {path}: {exc}") from exc
            if not isinstance(key, ed25519.Ed25519PublicKey):
                raise ConfigurationError(f"{path} is not an Ed25519 public key")
            self._keys[key_id(key)] = key

    def check(self, key: str, payload: str, signature: str) -> str | None:
        """None if the signature is good; otherwise what is wrong with it."""
        from cryptography.exceptions import InvalidSignature

        public = self._keys.get(key)
        if public is None:
            return f"signed by key {key}, which is not among the public keys given"
        try:
            public.verify(base64.b64decode(signature, validate=True), payload.encode())
        except (InvalidSignature, ValueError):
            return f"the signature does not verify with key {key}"
        return None
