"""Kafka's Java client security properties, translated to this package's (confluent-kafka's) names.

What a ``client.properties`` for Kafka's tools or a Spark job's ``kafka.*`` options hold:
``security.protocol``; ``ssl.truststore.location`` (PEM: ``ssl.truststore.type=PEM``) becomes
``ssl.ca.location``; ``ssl.keystore.location`` (a PEM with the private key and the certificate
chain) becomes ``ssl.certificate.location`` and ``ssl.key.location``; ``ssl.key.password``;
``ssl.endpoint.identification.algorithm`` (empty means none, as in Java); ``sasl.mechanism``;
``sasl.jaas.config`` with PlainLoginModule or ScramLoginModule ``username``/``password``.
JKS and PKCS12 stores are refused with a hint to convert them to PEM; Java-only knobs with no
meaning here (store passwords of PEM stores, cipher lists, SSL providers) are dropped.
"""
from pybroker import jaas
from pybroker.client.errors import ConfigError

LOGIN_MODULES = {
    "org.apache.kafka.common.security.plain.PlainLoginModule": ("PLAIN",),
    "org.apache.kafka.common.security.scram.ScramLoginModule": ("SCRAM-SHA-256", "SCRAM-SHA-512"),
}
# Java settings accepted and dropped: they tune what Python's ssl module decides itself
DROPPED = frozenset({
    "ssl.truststore.type", "ssl.keystore.type", "ssl.truststore.password", "ssl.keystore.password",
    "ssl.protocol", "ssl.enabled.protocols", "ssl.cipher.suites", "ssl.provider",
    "ssl.keymanager.algorithm", "ssl.trustmanager.algorithm", "ssl.secure.random.implementation",
    "ssl.engine.factory.class", "sasl.login.class", "sasl.login.callback.handler.class",
    "sasl.client.callback.handler.class", "sasl.login.refresh.window.factor",
    "sasl.login.refresh.window.jitter", "sasl.login.refresh.min.period.seconds",
    "sasl.login.refresh.buffer.seconds", "sasl.kerberos.service.name",
})


def parse_jaas(text: str) -> tuple[str, dict]:
    """``LoginModule flag key="value" ...;`` -> (login module class, options)."""
    try:
        entry = jaas.parse_one(text)
    except ValueError as exc:
        raise ConfigError(f"sasl.jaas.config: {exc}") from None
    return entry.module, entry.options


def _pem_store(key: str, path: str, store_type: str | None) -> str:
    kind = (store_type or "").strip().upper()
    if not kind:  # Java's default is JKS: accept a file that is PEM all the same
        try:
            with open(path, "rb") as f:
                kind = "PEM" if b"-----BEGIN" in f.read(65536) else "JKS"
        except OSError as exc:
            raise ConfigError(f"{key}={path}: cannot read: {exc.strerror or exc}") from None
    if kind != "PEM":
        raise ConfigError(f"{key}={path}: {kind} stores are not supported; use a PEM file and "
                          f"{key.rsplit('.', 1)[0]}.type=PEM (convert with keytool/openssl)")
    return path


def is_security_key(name: str) -> bool:
    return name == "security.protocol" or name.startswith(("ssl.", "sasl."))


def translate(props) -> dict:
    """``props`` with the Java security properties replaced by this package's names; other
    properties are passed through untouched. Raises ConfigError for what cannot be honoured."""
    out = {k: v for k, v in props.items() if not is_security_key(k)}
    sec = {k: v for k, v in props.items() if is_security_key(k)}
    if "security.protocol" in sec:
        out["security.protocol"] = sec["security.protocol"].strip().upper()
    if sec.get("ssl.truststore.location"):
        out["ssl.ca.location"] = _pem_store("ssl.truststore.location", sec["ssl.truststore.location"],
                                            sec.get("ssl.truststore.type"))
    if sec.get("ssl.keystore.location"):
        path = _pem_store("ssl.keystore.location", sec["ssl.keystore.location"], sec.get("ssl.keystore.type"))
        out["ssl.certificate.location"] = out["ssl.key.location"] = path
    if sec.get("ssl.key.password"):
        out["ssl.key.password"] = sec["ssl.key.password"]
    if "ssl.endpoint.identification.algorithm" in sec:
        out["ssl.endpoint.identification.algorithm"] = (sec["ssl.endpoint.identification.algorithm"].strip()
                                                        or "none")
    mechanism = sec.get("sasl.mechanism")
    if mechanism:
        out["sasl.mechanism"] = mechanism.strip().upper()
    if sec.get("sasl.jaas.config"):
        module, options = parse_jaas(sec["sasl.jaas.config"])
        allowed = LOGIN_MODULES.get(module)
        if allowed is None:
            raise ConfigError(f"sasl.jaas.config: login module {module} is not supported (use "
                              f"{' or '.join(LOGIN_MODULES)})")
        chosen = out.setdefault("sasl.mechanism", allowed[0] if len(allowed) == 1 else "")
        if chosen not in allowed:
            raise ConfigError(f"sasl.jaas.config: {module.rsplit('.', 1)[-1]} does not do sasl.mechanism="
                              f"{chosen or '(unset)'}; set sasl.mechanism to {' or '.join(allowed)}")
        if "username" not in options or "password" not in options:
            raise ConfigError("sasl.jaas.config: username=\"...\" and password=\"...\" are required")
        out["sasl.username"], out["sasl.password"] = options["username"], options["password"]
    for key in ("sasl.username", "sasl.password", "sasl.mechanisms", "ssl.ca.location",
                "ssl.certificate.location", "ssl.key.location", "enable.ssl.certificate.verification"):
        if key in sec and key not in out:  # already in this package's names: kept
            out[key] = sec[key]
    unknown = sorted(k for k in sec if k not in out and k not in DROPPED and k not in (
        "security.protocol", "ssl.truststore.location", "ssl.keystore.location", "ssl.key.password",
        "ssl.endpoint.identification.algorithm", "sasl.mechanism", "sasl.jaas.config"))
    if unknown:
        raise ConfigError(f"{unknown[0]} is not supported (TLS takes PEM files: ssl.truststore.location, "
                          "ssl.keystore.location; SASL takes sasl.mechanism and sasl.jaas.config)")
    return out
