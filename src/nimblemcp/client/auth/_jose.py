"""The small JOSE kit the OAuth client needs: signing keys, JWKs, compact JWS.

`SigningKey` wraps an asymmetric private key (EC P-256/384/521, RSA, Ed25519) with the
JWS algorithm it signs with (RFC 7518 / RFC 8037); it exports its public JWK, the
RFC 7638 thumbprint of that JWK, and signs compact JWTs (`sign_jwt`). Client
assertions (RFC 7523) and DPoP proofs (RFC 9449) are built on it. Only signing lives
here: the client never verifies tokens. Imports `nimblemcp.errors` and, at the first
use of a key rather than at import (~30 ms), `cryptography`.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nimblemcp.errors import AuthError

if TYPE_CHECKING:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

    _PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey | ed25519.Ed25519PrivateKey

__all__ = ["SigningKey", "b64url", "jwk_thumbprint"]

#: JWS alg -> (curve name, coordinate size in bytes)
_CURVES: dict[str, tuple[str, int]] = {"ES256": ("P-256", 32), "ES384": ("P-384", 48), "ES512": ("P-521", 66)}
_RSA = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512")
ALGORITHMS = (*_CURVES, *_RSA, "EdDSA")


def _curve(alg: str) -> ec.EllipticCurve:
    from cryptography.hazmat.primitives.asymmetric import ec

    curves: dict[str, ec.EllipticCurve] = {
        "ES256": ec.SECP256R1(), "ES384": ec.SECP384R1(), "ES512": ec.SECP521R1()}
    return curves[alg]


def _hash(alg: str) -> hashes.HashAlgorithm:
    from cryptography.hazmat.primitives import hashes

    digests: dict[str, hashes.HashAlgorithm] = {
        "256": hashes.SHA256(), "384": hashes.SHA384(), "512": hashes.SHA512()}
    return digests[alg[-3:]]


def b64url(data: bytes) -> str:
    """base64url without padding (RFC 7515 §2)."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _uint(value: int, size: int | None = None) -> str:
    length = size if size is not None else max(1, (value.bit_length() + 7) // 8)
    return b64url(value.to_bytes(length, "big"))


def _compact_json(value: dict[str, Any]) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def jwk_thumbprint(jwk: dict[str, Any]) -> str:
    """RFC 7638: SHA-256 over the required members, sorted, without whitespace."""
    required = {"EC": ("crv", "kty", "x", "y"), "RSA": ("e", "kty", "n"),
                "OKP": ("crv", "kty", "x")}.get(str(jwk.get("kty")))
    if required is None:
        raise AuthError(f"cannot take the thumbprint of a {jwk.get('kty')!r} key")
    members = {name: jwk[name] for name in required}
    return b64url(hashlib.sha256(_compact_json(members)).digest())


def _default_alg(key: _PrivateKey) -> str:
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    if isinstance(key, ec.EllipticCurvePrivateKey):
        for alg in _CURVES:
            if key.curve.name == _curve(alg).name:
                return alg
        raise AuthError(f"unsupported EC curve {key.curve.name}")
    if isinstance(key, rsa.RSAPrivateKey):
        return "RS256"
    return "EdDSA"


@dataclass(frozen=True, slots=True, eq=False)
class SigningKey:
    """An asymmetric private key and the JWS `alg` it signs with.

    `SigningKey.generate("ES256")` makes a fresh key (DPoP proofs);
    `SigningKey.from_pem(pem)` loads a PKCS#8 / traditional PEM (a registered
    `private_key_jwt` client key). `kid` goes into the JWS header when set.
    """

    key: _PrivateKey
    alg: str
    kid: str | None = None

    def __post_init__(self) -> None:
        from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

        if self.alg not in ALGORITHMS:
            raise AuthError(f"unsupported JWS algorithm {self.alg!r} (one of {', '.join(ALGORITHMS)})")
        ok = (isinstance(self.key, ec.EllipticCurvePrivateKey) and self.alg in _CURVES
              and self.key.curve.name == _curve(self.alg).name) \
            or (isinstance(self.key, rsa.RSAPrivateKey) and self.alg in _RSA) \
            or (isinstance(self.key, ed25519.Ed25519PrivateKey) and self.alg == "EdDSA")
        if not ok:
            raise AuthError(f"a {type(self.key).__name__} cannot sign with {self.alg}")

    @classmethod
    def generate(cls, alg: str = "ES256") -> SigningKey:
        from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

        if alg in _CURVES:
            return cls(ec.generate_private_key(_curve(alg)), alg)
        if alg in _RSA:
            return cls(rsa.generate_private_key(public_exponent=65537, key_size=2048), alg)
        if alg == "EdDSA":
            return cls(ed25519.Ed25519PrivateKey.generate(), alg)
        raise AuthError(f"unsupported JWS algorithm {alg!r}")

    @classmethod
    def from_pem(
        cls, pem: str | bytes, alg: str | None = None, *, password: bytes | None = None,
        kid: str | None = None,
    ) -> SigningKey:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

        data = pem.encode("ascii") if isinstance(pem, str) else pem
        try:
            key = serialization.load_pem_private_key(data, password=password)
        except (ValueError, TypeError) as exc:
            raise AuthError(f"cannot load the private key: {exc}") from exc
        if not isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey
                          | ed25519.Ed25519PrivateKey):
            raise AuthError(f"unsupported private key type {type(key).__name__}")
        return cls(key, alg or _default_alg(key), kid)

    @property
    def public_jwk(self) -> dict[str, Any]:
        """The public half as a JWK (no private members, no `kid` unless set)."""
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ec, rsa

        jwk: dict[str, Any]
        if isinstance(self.key, ec.EllipticCurvePrivateKey):
            numbers = self.key.public_key().public_numbers()
            crv, size = _CURVES[self.alg]
            jwk = {"kty": "EC", "crv": crv, "x": _uint(numbers.x, size), "y": _uint(numbers.y, size)}
        elif isinstance(self.key, rsa.RSAPrivateKey):
            pub = self.key.public_key().public_numbers()
            jwk = {"kty": "RSA", "n": _uint(pub.n), "e": _uint(pub.e)}
        else:
            raw = self.key.public_key().public_bytes(serialization.Encoding.Raw,
                                                     serialization.PublicFormat.Raw)
            jwk = {"kty": "OKP", "crv": "Ed25519", "x": b64url(raw)}
        if self.kid is not None:
            jwk["kid"] = self.kid
        return jwk

    def thumbprint(self) -> str:
        """RFC 7638 SHA-256 thumbprint of the public JWK (DPoP's `jkt`)."""
        return jwk_thumbprint(self.public_jwk)

    def sign(self, data: bytes) -> bytes:
        """The JWS signature of `data` (ECDSA as raw r||s, RFC 7518 §3.4)."""
        from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
        from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

        key = self.key
        if isinstance(key, ec.EllipticCurvePrivateKey):
            r, s = decode_dss_signature(key.sign(data, ec.ECDSA(_hash(self.alg))))
            size = _CURVES[self.alg][1]
            return r.to_bytes(size, "big") + s.to_bytes(size, "big")
        if isinstance(key, rsa.RSAPrivateKey):
            digest = _hash(self.alg)
            pad: padding.AsymmetricPadding = padding.PKCS1v15() if self.alg.startswith("RS") \
                else padding.PSS(padding.MGF1(digest), digest.digest_size)
            return key.sign(data, pad, digest)
        return key.sign(data)

    def sign_jwt(self, claims: dict[str, Any], header: dict[str, Any] | None = None) -> str:
        """A compact JWS of `claims` with `alg` (and `kid`) plus `header` members."""
        head: dict[str, Any] = {"alg": self.alg}
        if self.kid is not None:
            head["kid"] = self.kid
        head.update(header or {})
        signing_input = f"{b64url(_compact_json(head))}.{b64url(_compact_json(claims))}"
        return f"{signing_input}.{b64url(self.sign(signing_input.encode('ascii')))}"
