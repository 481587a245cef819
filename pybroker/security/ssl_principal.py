"""From a client certificate to a Kafka principal name, as Kafka's SSL listeners do it.

The subject DN is written as RFC 2253 (most specific RDN first, ``CN=alice,OU=eng,O=acme``), the way
Java's ``X500Principal.getName()`` writes it: keywords for CN, C, L, ST, O, OU, STREET, DC and UID;
emailAddress as its OID with the hex DER value; ``,+"\\<>;`` escaped with a backslash.

``ssl.principal.mapping.rules`` maps that string: a comma- (or newline-) separated list of
``RULE:pattern/replacement/`` (optionally ``/L`` or ``/U`` to lower/upper-case the result) and
``DEFAULT`` (the DN unchanged). The first rule whose pattern matches the whole DN wins; a DN no
rule matches is refused (the connection is closed).
"""
import re

_KEYWORDS = {"commonName": "CN", "countryName": "C", "localityName": "L", "stateOrProvinceName": "ST",
             "organizationName": "O", "organizationalUnitName": "OU", "streetAddress": "STREET",
             "domainComponent": "DC", "userId": "UID"}
_EMAIL_OID = "1.2.840.113549.1.9.1"
_SPECIAL = set(',+"\\<>;')


class NoMatchingRule(ValueError):
    """No ssl.principal.mapping.rules entry applies to a DN."""


def _escape(value: str) -> str:
    out = []
    for i, c in enumerate(value):
        if c in _SPECIAL or (i == 0 and c in "# ") or (i == len(value) - 1 and c == " "):
            out.append("\\" + c)
        else:
            out.append(c)
    return "".join(out)


def _der_ia5(value: str) -> str:
    data = value.encode("ascii", "replace")
    if len(data) < 128:
        length = bytes([len(data)])
    else:
        size = len(data).to_bytes((len(data).bit_length() + 7) // 8, "big")
        length = bytes([0x80 | len(size)]) + size
    return "#" + (b"\x16" + length + data).hex()


def _attribute(name: str, value: str) -> str:
    if name in _KEYWORDS:
        return f"{_KEYWORDS[name]}={_escape(value)}"
    if name == "emailAddress":
        return f"{_EMAIL_OID}={_der_ia5(value)}"
    return f"{name}={_escape(value)}"


def subject_dn(cert: dict) -> str:
    """RFC 2253 subject of ``SSLSocket.getpeercert()``'s dict (its RDNs are in certificate order)."""
    rdns = cert.get("subject", ())
    return ",".join("+".join(_attribute(n, v) for n, v in rdn) for rdn in reversed(rdns))


class _Rule:
    __slots__ = ("pattern", "replacement", "case")

    def __init__(self, pattern: str | None, replacement: str = "", case: str = ""):
        self.pattern = None if pattern is None else re.compile(pattern)
        self.replacement = replacement
        self.case = case

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn  # DEFAULT
        if self.pattern.fullmatch(dn) is None:
            return None
        result = self.pattern.sub(_java_replacement(self.replacement), dn)
        return result.lower() if self.case == "L" else result.upper() if self.case == "U" else result


def _java_replacement(text: str):
    """A re.sub callable for a Java replacement string: ``$n`` is group n, ``\\x`` is x."""
    def expand(m: re.Match) -> str:
        out, i = [], 0
        while i < len(text):
            c = text[i]
            if c == "\\" and i + 1 < len(text):
                out.append(text[i + 1])
                i += 2
            elif c == "$" and i + 1 < len(text) and text[i + 1].isdigit():
                j = i + 2  # as Java: the first digit always, more while the number names a group
                while j < len(text) and text[j].isdigit() and int(text[i + 1:j + 1]) <= m.re.groups:
                    j += 1
                out.append(m.group(int(text[i + 1:j])) or "")
                i = j
            else:
                out.append(c)
                i += 1
        return "".join(out)
    return expand


_RULE = re.compile(r"\s*(?:(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?)[^,\n]*?)\s*(?:[,\n]|$)")


class PrincipalMapper:
    """``ssl.principal.mapping.rules`` compiled; ``name(dn)`` is the principal name for a DN."""

    def __init__(self, rules: str = "DEFAULT"):
        self.rules = []
        text = rules.strip() or "DEFAULT"
        pos = 0
        while pos < len(text):
            m = _RULE.match(text, pos)
            if m is None or m.end() == pos:
                raise ValueError(f"bad rule at {text[pos:]!r}: expected DEFAULT or RULE:pattern/replacement/[LU]")
            try:
                self.rules.append(_Rule(None) if m.group(1) else _Rule(m.group(2), m.group(3), m.group(4)))
            except re.error as exc:
                raise ValueError(f"bad pattern {m.group(2)!r}: {exc}") from None
            pos = m.end()

    def name(self, dn: str) -> str:
        for rule in self.rules:
            result = rule.apply(dn)
            if result is not None:
                return result
        raise NoMatchingRule(f"no ssl.principal.mapping.rules entry applies to {dn!r}")
