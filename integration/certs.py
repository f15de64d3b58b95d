"""Test certificates made on the spot: a CA, a server certificate for 127.0.0.1 and a
client certificate it signed, as PEM files in a directory of the test's own."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Pki:
    """The PEM files of one CA and the two certificates it signed (paths as strings)."""

    ca: str
    ca_key: str
    server: str
    server_key: str
    client: str
    client_key: str


def make_pki(d: Path, name: str = "test", ip: str = "127.0.0.1") -> Pki:
    """A new CA named ``name`` in ``d``, and a server and a client certificate for ``ip``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    d.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    files: dict[str, str] = {}

    def write(who: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> None:
        path, key_path = d / f"{name}-{who}.pem", d / f"{name}-{who}-key.pem"
        path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        files[who], files[f"{who}_key"] = str(path), str(key_path)

    def subject(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(subject(f"{name} ca"))
        .issuer_name(subject(f"{name} ca"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    write("ca", ca, ca_key)
    # etcd's gateway dials its own gRPC server with the server certificate: it needs both.
    for who, usages in (
        ("server", [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
        ("client", [ExtendedKeyUsageOID.CLIENT_AUTH]),
    ):
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (
            x509.CertificateBuilder()
            .subject_name(subject(f"{name} {who}"))
            .issuer_name(ca.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(
                x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(ip))]),
                critical=False,
            )
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .sign(ca_key, hashes.SHA256())
        )
        write(who, cert, key)
    return Pki(**files)
