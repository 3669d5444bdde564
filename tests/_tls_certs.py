"""Certificates made in the test: a CA of our own, and server or client certificates it
signs (PEM files in a folder), for TLS on loopback without touching any system store."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass
class Issued:
    cert: Path
    key: Path


@dataclass
class LocalCA:
    """A CA (`ca_pem` is its certificate, what a client trusts) that signs leaves."""

    folder: Path
    ca_pem: Path
    _key: ec.EllipticCurvePrivateKey
    _cert: x509.Certificate

    @classmethod
    def make(cls, folder: Path, name: str = "nimblemcp test CA") -> LocalCA:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        cert = (_builder(subject, subject, key.public_key())
                .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                             content_commitment=False, key_encipherment=False,
                                             data_encipherment=False, key_agreement=False,
                                             encipher_only=False, decipher_only=False), critical=True)
                .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
                .sign(key, hashes.SHA256()))
        folder.mkdir(parents=True, exist_ok=True)
        ca_pem = folder / "ca.pem"
        ca_pem.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return cls(folder, ca_pem, key, cert)

    def issue(self, name: str, *, client: bool = False, password: bytes | None = None) -> Issued:
        """A leaf for `localhost` and 127.0.0.1 (a server's), or a client certificate."""
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        usage = ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH
        builder = (_builder(subject, self._cert.subject, key.public_key())
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
                   .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()),
                                  critical=False))
        if not client:
            builder = builder.add_extension(x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        cert_path, key_path = self.folder / f"{name}.pem", self.folder / f"{name}.key"
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        encryption = (serialization.BestAvailableEncryption(password) if password
                      else serialization.NoEncryption())
        key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               encryption))
        return Issued(cert_path, key_path)


def _builder(subject: x509.Name, issuer: x509.Name, public: ec.EllipticCurvePublicKey) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=2)))
