"""Certificates for TLS tests, made with the ``cryptography`` package: a CA, a broker certificate for
127.0.0.1/localhost, client certificates, an expired one and one from another CA, as PEM files."""
import datetime
import ipaddress
import os

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

DAY = datetime.timedelta(days=1)


def _name(dn: dict) -> x509.Name:
    oids = {"C": NameOID.COUNTRY_NAME, "O": NameOID.ORGANIZATION_NAME, "OU": NameOID.ORGANIZATIONAL_UNIT_NAME,
            "CN": NameOID.COMMON_NAME}
    return x509.Name([x509.NameAttribute(oids[k], v) for k, v in dn.items()])


class Authority:
    """A CA that writes its certificate and the certificates it signs into ``directory``."""

    def __init__(self, directory: str, name: str = "test-ca"):
        self.directory = directory
        self.key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        subject = _name({"O": "pybroker-tests", "CN": name})
        self.cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
                     .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
                     .not_valid_before(now - DAY).not_valid_after(now + 30 * DAY)
                     .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                     .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False,
                                                  key_encipherment=False, data_encipherment=False,
                                                  key_agreement=False, key_cert_sign=True, crl_sign=True,
                                                  encipher_only=False, decipher_only=False), critical=True)
                     .add_extension(x509.SubjectKeyIdentifier.from_public_key(self.key.public_key()), critical=False)
                     .sign(self.key, hashes.SHA256()))
        self.cert_path = os.path.join(directory, f"{name}.crt")
        with open(self.cert_path, "wb") as f:
            f.write(self.cert.public_bytes(serialization.Encoding.PEM))

    def issue(self, stem: str, dn: dict, hosts=(), expired: bool = False, password: str | None = None) -> dict:
        """Key + certificate: paths of ``key`` and ``cert`` (separate) and ``pem`` (key then chain)."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        start, end = (now - 10 * DAY, now - DAY) if expired else (now - DAY, now + 30 * DAY)
        builder = (x509.CertificateBuilder().subject_name(_name(dn)).issuer_name(self.cert.subject)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(start).not_valid_after(end)
                   # Python 3.13 verifies strictly (VERIFY_X509_STRICT): a leaf names the key that signed it
                   .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()),
                                  critical=False))
        if hosts:
            alt = [x509.IPAddress(ipaddress.ip_address(h)) if h[0].isdigit() else x509.DNSName(h) for h in hosts]
            builder = builder.add_extension(x509.SubjectAlternativeName(alt), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        enc = serialization.BestAvailableEncryption(password.encode()) if password else serialization.NoEncryption()
        key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, enc)
        cert_pem = cert.public_bytes(serialization.Encoding.PEM) + self.cert.public_bytes(serialization.Encoding.PEM)
        paths = {name: os.path.join(self.directory, f"{stem}.{name}") for name in ("key", "cert", "pem")}
        for name, data in (("key", key_pem), ("cert", cert_pem), ("pem", key_pem + cert_pem)):
            with open(paths[name], "wb") as f:
                f.write(data)
        paths["key_pem"], paths["cert_pem"] = key_pem.decode(), cert_pem.decode()
        return paths
