"""A throw-away certificate authority and a server certificate for 127.0.0.1 and localhost, so
the store servers can speak HTTPS in tests without any certificate a real machine trusts."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.loopback import TLSFiles

# Long enough for any test session, short enough that a leaked file is worthless soon.
VALIDITY = datetime.timedelta(days=2)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def make_loopback_certificates(folder: Path) -> TLSFiles:
    """Write ca.pem (the CA a client trusts), cert.pem and key.pem (the server's) into `folder`.

    The server certificate names DNS `localhost` and IP `127.0.0.1` in its subjectAltName
    (clients check the SAN, not the common name) and is for server authentication only; the CA
    may sign nothing but end certificates (path length 0)."""
    folder.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    start, end = now - datetime.timedelta(minutes=5), now + VALIDITY  # some slack for clock skew

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("jupyter_gpu_ws test CA")
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )

    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("127.0.0.1"))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )

    return _written(folder, cert, key, ca)


def make_ca_used_as_server_certificate(folder: Path) -> TLSFiles:
    """What `openssl req -x509 -newkey … -subj /CN=127.0.0.1` makes: one self-signed certificate
    that is a CA (basicConstraints CA:TRUE) and is also the server's own. A client told to trust
    it still refuses it (rustls: CaUsedAsEndEntity)."""
    folder.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    key = ec.generate_private_key(ec.SECP256R1())
    name = _name("127.0.0.1")
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return _written(folder, cert, key, cert)


def _written(
    folder: Path, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey, ca: x509.Certificate
) -> TLSFiles:
    """cert.pem, key.pem (owner only) and ca.pem in `folder`."""
    files = TLSFiles(
        cert_file=folder / "cert.pem", key_file=folder / "key.pem", ca_file=folder / "ca.pem"
    )
    files.ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    files.cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    files.key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    files.key_file.chmod(0o600)
    return files
