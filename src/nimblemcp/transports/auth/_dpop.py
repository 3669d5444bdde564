"""DPoP proofs at the resource server (RFC 9449 §4.3, §7, §8, §9).

`DPoPVerifier` checks the `DPoP` header of a request that presents a DPoP-bound
access token (`Authorization: DPoP <token>`):
- the proof is one compact JWS with `typ: dpop+jwt`, an asymmetric `alg` we accept
  (never `none`, never an HMAC), and a public `jwk` (no private members) whose
  signature verifies;
- its claims name this request: `htm` the method, `htu` the URL without query and
  fragment (the configured resource URL, or the one the request was sent to), `iat`
  within the window (`max_age` back, `leeway` ahead), `ath` the access token's
  SHA-256;
- its `jti` is used once: remembered (set-if-absent with TTL) in a `KeyValueStore`
  for the window, so several instances sharing a Redis store refuse a replay to any
  of them;
- with `require_nonce`, its `nonce` is one we issued: nonces are stateless
  (an HMAC of a time slot under a secret, the current or the previous slot), so any
  instance with the same secret accepts another's nonce; a proof without a valid one
  is refused with `use_dpop_nonce` and the current nonce (§9).
It returns the JWK thumbprint (RFC 7638) that the token's `cnf.jkt` must equal (the
middleware compares). Signature checks use `cryptography`, imported at first use.
Imports `errors` and `backends`; not the server or the client.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from nimblemcp.backends._store import KeyValueStore
from nimblemcp.errors import InvalidDPoPProof

__all__ = ["DEFAULT_ALGS", "DPoPVerifier", "jwk_thumbprint", "normalize_htu"]

DEFAULT_ALGS = ("ES256", "ES384", "ES512", "EdDSA", "PS256", "RS256")
_EC = {"ES256": ("P-256", 32), "ES384": ("P-384", 48), "ES512": ("P-521", 66)}
_PRIVATE_MEMBERS = frozenset({"d", "p", "q", "dp", "dq", "qi", "oth", "k"})
_MAX_PROOF = 8192  # bytes: a proof is a few hundred; refuse to parse more


def _b64d(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _b64e(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def jwk_thumbprint(jwk: dict[str, Any]) -> str:
    """RFC 7638 SHA-256 thumbprint of a public JWK (what `cnf.jkt` names)."""
    required = {"EC": ("crv", "kty", "x", "y"), "RSA": ("e", "kty", "n"), "OKP": ("crv", "kty", "x")}
    names = required.get(str(jwk.get("kty")))
    if names is None or not all(isinstance(jwk.get(n), str) for n in names):
        raise InvalidDPoPProof("the proof's jwk is not a usable public key")
    members = {n: jwk[n] for n in names}
    return _b64e(hashlib.sha256(json.dumps(members, separators=(",", ":")).encode()).digest())


def normalize_htu(url: str) -> str:
    """A URL as `htu` compares: scheme and host lower-cased, no query or fragment."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme.lower(), parts.netloc.lower(), parts.path or "/", "", ""))


def _public_key(jwk: dict[str, Any], alg: str) -> Any:
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

    kty = jwk.get("kty")
    try:
        if alg in _EC and kty == "EC":
            crv, size = _EC[alg]
            if jwk.get("crv") != crv:
                raise InvalidDPoPProof("the proof's jwk curve does not match its alg")
            curve = {"P-256": ec.SECP256R1(), "P-384": ec.SECP384R1(), "P-521": ec.SECP521R1()}[crv]
            x, y = _b64d(jwk["x"]), _b64d(jwk["y"])
            if len(x) != size or len(y) != size:
                raise InvalidDPoPProof("the proof's jwk coordinates have the wrong size")
            return ec.EllipticCurvePublicNumbers(int.from_bytes(x, "big"), int.from_bytes(y, "big"),
                                                 curve).public_key()
        if alg[:2] in ("RS", "PS") and kty == "RSA":
            n, e = int.from_bytes(_b64d(jwk["n"]), "big"), int.from_bytes(_b64d(jwk["e"]), "big")
            if n.bit_length() < 2048:
                raise InvalidDPoPProof("the proof's RSA key is too short")
            return rsa.RSAPublicNumbers(e, n).public_key()
        if alg == "EdDSA" and kty == "OKP" and jwk.get("crv") == "Ed25519":
            return ed25519.Ed25519PublicKey.from_public_bytes(_b64d(jwk["x"]))
    except InvalidDPoPProof:
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidDPoPProof("the proof's jwk is not a usable public key") from exc
    raise InvalidDPoPProof("the proof's jwk does not match its alg")


def _verify_signature(key: Any, alg: str, signature: bytes, data: bytes) -> None:
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec, padding
    from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

    digests = {"256": hashes.SHA256(), "384": hashes.SHA384(), "512": hashes.SHA512()}
    try:
        if alg in _EC:
            size = _EC[alg][1]
            if len(signature) != 2 * size:
                raise InvalidDPoPProof("the proof's signature is malformed")
            der = encode_dss_signature(int.from_bytes(signature[:size], "big"),
                                       int.from_bytes(signature[size:], "big"))
            key.verify(der, data, ec.ECDSA(digests[alg[2:]]))
        elif alg.startswith("RS"):
            key.verify(signature, data, padding.PKCS1v15(), digests[alg[2:]])
        elif alg.startswith("PS"):
            digest = digests[alg[2:]]
            key.verify(signature, data, padding.PSS(padding.MGF1(digest), digest.digest_size), digest)
        else:
            key.verify(signature, data)
    except InvalidSignature as exc:
        raise InvalidDPoPProof("the proof's signature does not verify") from exc


class DPoPVerifier:
    """Checks DPoP proofs for one resource server (see the module docstring).

    `store` remembers spent `jti`s (default: a per-process memory store; give the
    server's Redis store to refuse replays across instances). `require_nonce` turns
    on server nonces; `nonce_secret` (bytes) must be shared by instances that should
    accept each other's nonces (default: random per process); a nonce lives one to
    two `nonce_period`s."""

    def __init__(
        self,
        *,
        algorithms: Iterable[str] = DEFAULT_ALGS,
        max_age: float = 300.0,
        leeway: float = 5.0,
        store: KeyValueStore | None = None,
        require_nonce: bool = False,
        nonce_secret: bytes | None = None,
        nonce_period: float = 300.0,
    ) -> None:
        self.algorithms = tuple(a for a in algorithms if a != "none" and not a.startswith("HS"))
        if not self.algorithms:
            raise ValueError("DPoP needs at least one asymmetric algorithm")
        self.max_age = max_age
        self.leeway = leeway
        if store is None:
            from nimblemcp.backends.memory import MemoryStore

            store = MemoryStore()
        self.store = store
        self.require_nonce = require_nonce
        self._secret = nonce_secret if nonce_secret is not None else secrets.token_bytes(32)
        self.nonce_period = nonce_period

    # -- nonces (§8/§9) ------------------------------------------------------------------

    def _nonce_for(self, slot: int) -> str:
        return _b64e(hmac.new(self._secret, b"dpop-nonce:%d" % slot, hashlib.sha256).digest()[:18])

    def current_nonce(self) -> str:
        """The nonce to hand out now (`DPoP-Nonce`)."""
        return self._nonce_for(int(time.time() // self.nonce_period))

    def nonce_is_current(self, nonce: str | None) -> bool:
        return nonce is not None and hmac.compare_digest(nonce, self.current_nonce())

    def _nonce_ok(self, nonce: Any) -> bool:
        if not isinstance(nonce, str):
            return False
        slot = int(time.time() // self.nonce_period)
        return any(hmac.compare_digest(nonce, self._nonce_for(s)) for s in (slot, slot - 1))

    # -- the proof ---------------------------------------------------------------------

    async def verify(self, proof: str, *, method: str, urls: Iterable[str], access_token: str) -> tuple[str, str | None]:
        """Check `proof` for a request with `method` to one of `urls` presenting
        `access_token`; returns the proof key's thumbprint and the proof's nonce.
        Raises `InvalidDPoPProof` (`error` says which challenge to answer with)."""
        if len(proof) > _MAX_PROOF:
            raise InvalidDPoPProof("the proof is too large")
        pieces = proof.split(".")
        if len(pieces) != 3:
            raise InvalidDPoPProof("the proof is not a compact JWS")
        try:
            header = json.loads(_b64d(pieces[0]))
            claims = json.loads(_b64d(pieces[1]))
            signature = _b64d(pieces[2])
        except ValueError as exc:
            raise InvalidDPoPProof("the proof is not a compact JWS") from exc
        if not isinstance(header, dict) or not isinstance(claims, dict):
            raise InvalidDPoPProof("the proof is not a compact JWS")
        if header.get("typ") != "dpop+jwt":
            raise InvalidDPoPProof("the proof's typ is not dpop+jwt")
        alg = header.get("alg")
        if alg not in self.algorithms:
            raise InvalidDPoPProof(f"the proof's alg {alg!r} is not accepted")
        jwk = header.get("jwk")
        if not isinstance(jwk, dict) or _PRIVATE_MEMBERS & jwk.keys():
            raise InvalidDPoPProof("the proof's jwk must be a public key")
        key = _public_key(jwk, alg)
        _verify_signature(key, alg, signature, f"{pieces[0]}.{pieces[1]}".encode("ascii"))
        jti = claims.get("jti")
        if not isinstance(jti, str) or not 8 <= len(jti) <= 256:
            raise InvalidDPoPProof("the proof needs a jti")
        if claims.get("htm") != method.upper():
            raise InvalidDPoPProof("the proof's htm does not match the request method")
        htu = claims.get("htu")
        if not isinstance(htu, str) or normalize_htu(htu) not in {normalize_htu(u) for u in urls}:
            raise InvalidDPoPProof("the proof's htu does not match the request URL")
        iat = claims.get("iat")
        now = time.time()
        if not isinstance(iat, int | float) or isinstance(iat, bool) \
                or iat > now + self.leeway or iat < now - self.max_age:
            raise InvalidDPoPProof("the proof's iat is outside the accepted window")
        expected_ath = _b64e(hashlib.sha256(access_token.encode("ascii", "replace")).digest())
        ath = claims.get("ath")
        if not isinstance(ath, str) or not hmac.compare_digest(ath, expected_ath):
            raise InvalidDPoPProof("the proof's ath does not match the access token")
        nonce = claims.get("nonce")
        if self.require_nonce and not self._nonce_ok(nonce):
            raise InvalidDPoPProof("a fresh DPoP nonce is required", "use_dpop_nonce")
        thumbprint = jwk_thumbprint(jwk)
        # One use per jti (per key): remembered as long as the proof could be accepted.
        if not await self.store.set_if_absent(f"dpop-jti:{thumbprint}:{jti}", b"1",
                                              self.max_age + self.leeway):
            raise InvalidDPoPProof("the proof was already used (jti replay)")
        return thumbprint, nonce if isinstance(nonce, str) else None
