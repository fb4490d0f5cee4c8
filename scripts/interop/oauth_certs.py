"""The private CA of scripts/interop/oauth.sh, made at each run with `cryptography` (pinned in
requirements.txt): the CA (ca.pem), and certificates it signs for `localhost` and 127.0.0.1:
mcpgate's front door (gate.pem, gate.key) and HAProxy's in front of the fixture (haproxy.pem,
certificate then key, as HAProxy's `crt` takes them). Nothing here is trusted by the system.

    python oauth_certs.py DIR
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import sys

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_USAGE = x509.KeyUsage(
    digital_signature=True,
    key_cert_sign=True,
    crl_sign=True,
    content_commitment=False,
    key_encipherment=False,
    data_encipherment=False,
    key_agreement=False,
    encipher_only=False,
    decipher_only=False,
)
LOCAL = x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])


def name(text: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, text)])


def pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def main(directory: str) -> int:
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(name("mcpgate interop CA"))
        .issuer_name(name("mcpgate interop CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(CA_USAGE, critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    with open(os.path.join(directory, "ca.pem"), "wb") as f:
        f.write(ca.public_bytes(serialization.Encoding.PEM))
    for stem in ("gate", "haproxy"):
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (
            x509.CertificateBuilder()
            .subject_name(name("localhost"))
            .issuer_name(ca.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(LOCAL, critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256())
        )
        cert_pem = cert.public_bytes(serialization.Encoding.PEM)
        if stem == "haproxy":
            with open(os.path.join(directory, "haproxy.pem"), "wb") as f:
                f.write(cert_pem + pem_key(key))
        else:
            with open(os.path.join(directory, f"{stem}.pem"), "wb") as f:
                f.write(cert_pem)
            with open(os.path.join(directory, f"{stem}.key"), "wb") as f:
                f.write(pem_key(key))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
