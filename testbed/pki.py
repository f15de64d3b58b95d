"""Certificates and tokens for tests: a throwaway CA (made with ``cryptography``), the
certificates it issues for IP addresses, a CA with a server and a client certificate as
etcd's TLS tests use them, and a netmaster token file with one token per role."""

from __future__ import annotations

import datetime
import ipaddress
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

SERVER = ExtendedKeyUsageOID.SERVER_AUTH
CLIENT = ExtendedKeyUsageOID.CLIENT_AUTH


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


class TestCA:
    """A CA valid for a day; ``cert`` is its certificate (what clients pass as --tls-ca)."""

    __test__ = False  # not a pytest class

    def __init__(self, directory: Path, name: str = "netplugin test CA") -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.now = datetime.datetime.now(datetime.UTC)
        self._key = ec.generate_private_key(ec.SECP256R1())
        public = self._key.public_key()
        self._cert = (
            self._builder(_name(name), _name(name), public)
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
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
            .sign(self._key, hashes.SHA256())
        )
        self.cert = directory / "ca.pem"
        self.cert.write_bytes(self._cert.public_bytes(serialization.Encoding.PEM))

    def _builder(
        self, subject: x509.Name, issuer: x509.Name, public: ec.EllipticCurvePublicKey
    ) -> x509.CertificateBuilder:
        return (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(issuer)
            .public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(self.now - datetime.timedelta(minutes=5))
            .not_valid_after(self.now + datetime.timedelta(days=1))
        )

    def issue(
        self,
        name: str,
        ips: Iterable[str] = (),
        usages: Iterable[x509.ObjectIdentifier] = (SERVER,),
    ) -> tuple[Path, Path]:
        """A certificate for ``ips`` (IP SANs) signed by this CA: (cert file, key file)."""
        key = ec.generate_private_key(ec.SECP256R1())
        sans: list[x509.GeneralName] = [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
        builder = self._builder(_name(name), self._cert.subject, key.public_key())
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        ca_ski = self._cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
        cert = (
            builder.add_extension(x509.ExtendedKeyUsage(list(usages)), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski),
                critical=False,
            )
            .sign(self._key, hashes.SHA256())
        )
        cert_file, key_file = self.directory / f"{name}.pem", self.directory / f"{name}-key.pem"
        cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(key_file, key)
        return cert_file, key_file


@dataclass(frozen=True)
class MasterSecurity:
    """What a secured netmaster is started with, and what its clients present."""

    ca: Path  # clients' --tls-ca
    cert: Path
    key: Path
    tokens: Path  # netmaster's --auth-token-file
    admin: str
    agent: str
    reader: str
    # With client certificates required (--tls-client-ca): a client's certificate and key.
    client: tuple[Path, Path] | None = None

    @classmethod
    def create(
        cls, directory: Path, ips: Iterable[str] = ("127.0.0.1",), mutual: bool = False
    ) -> MasterSecurity:
        """A fresh CA, a server certificate for ``ips`` and a token per role; ``mutual``:
        masters require client certificates (theirs serve as one when they forward)."""
        ca = TestCA(directory)
        cert, key = ca.issue("netmaster", ips, [SERVER, CLIENT] if mutual else [SERVER])
        client = ca.issue("client", (), [CLIENT]) if mutual else None
        roles = {role: secrets.token_hex(24) for role in ("admin", "agent", "reader")}
        tokens = directory / "tokens"
        tokens.write_text(
            "# ROLE TOKEN NAME\n" + "".join(f"{r} {t} test-{r}\n" for r, t in roles.items())
        )
        tokens.chmod(0o600)
        return cls(
            ca.cert, cert, key, tokens, roles["admin"], roles["agent"], roles["reader"], client
        )

    def master_flags(self) -> list[str]:
        return [
            "--tls-cert", str(self.cert),
            "--tls-key", str(self.key),
            "--tls-ca", str(self.ca),
            "--auth-token-file", str(self.tokens),
            *(["--tls-client-ca", str(self.ca)] if self.client else []),
        ]  # fmt: skip

    def client_cert(self) -> tuple[str, str] | None:
        """What requests presents (``cert=``) to a master that requires client certificates."""
        return (str(self.client[0]), str(self.client[1])) if self.client else None

    def token_file(self, role: str) -> Path:
        """A client token file (netctl's or netplugin's --auth-token-file) for ``role``."""
        path = self.tokens.parent / f"{role}.token"
        if not path.exists():
            path.write_text(getattr(self, role) + "\n")
            path.chmod(0o600)
        return path

    def headers(self, role: str = "admin") -> dict[str, str]:
        return {"Authorization": f"Bearer {getattr(self, role)}"}


@dataclass(frozen=True)
class Pki:
    """The PEM files of one CA and the server and client certificates it signed."""

    ca: str
    server: str
    server_key: str
    client: str
    client_key: str


def make_pki(directory: Path, name: str = "test", ip: str = "127.0.0.1") -> Pki:
    """A new CA named ``name`` in ``directory``/``name``, with a server and a client
    certificate for ``ip``."""
    ca = TestCA(directory / name, f"{name} ca")
    # etcd's gateway dials its own gRPC server with the server certificate: it needs both.
    server, server_key = ca.issue("server", [ip], [SERVER, CLIENT])
    client, client_key = ca.issue("client", [ip], [CLIENT])
    return Pki(str(ca.cert), str(server), str(server_key), str(client), str(client_key))
