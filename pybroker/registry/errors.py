"""Confluent Schema Registry's error codes: the body is {"error_code": N, "message": ...} and the HTTP
status is the code's first three digits (or the code itself when it has three)."""

SUBJECT_NOT_FOUND = 40401
VERSION_NOT_FOUND = 40402
SCHEMA_NOT_FOUND = 40403
SUBJECT_SOFT_DELETED = 40404
SUBJECT_NOT_SOFT_DELETED = 40405
VERSION_SOFT_DELETED = 40406
VERSION_NOT_SOFT_DELETED = 40407
SUBJECT_COMPATIBILITY_NOT_CONFIGURED = 40408
SUBJECT_MODE_NOT_CONFIGURED = 40409
NOT_FOUND = 404
METHOD_NOT_ALLOWED = 405
INCOMPATIBLE_SCHEMA = 409
PAYLOAD_TOO_LARGE = 413
UNSUPPORTED_MEDIA_TYPE = 415
UNAUTHORIZED = 401
UNPROCESSABLE = 422
INVALID_SCHEMA = 42201
INVALID_VERSION = 42202
INVALID_COMPATIBILITY_LEVEL = 42203
INVALID_MODE = 42204
OPERATION_NOT_PERMITTED = 42205
REFERENCE_EXISTS = 42206
BAD_REQUEST = 400
STORE_ERROR = 50001
OPERATION_TIMEOUT = 50002
FORWARDING_ERROR = 50003


class RegistryError(Exception):
    """An answer in Confluent's error format; raised anywhere below a handler, rendered by http.py."""

    def __init__(self, error_code: int, message: str):
        super().__init__(message)
        self.error_code = error_code
        self.message = message

    @property
    def status(self) -> int:
        return http_status(self.error_code)

    def body(self) -> dict:
        return {"error_code": self.error_code, "message": self.message}


def http_status(error_code: int) -> int:
    text = str(error_code)
    return int(text[:3]) if len(text) > 3 else error_code


def subject_not_found(subject: str) -> RegistryError:
    return RegistryError(SUBJECT_NOT_FOUND, f"Subject '{subject}' not found.")


def version_not_found(subject: str, version) -> RegistryError:
    return RegistryError(VERSION_NOT_FOUND, f"Version {version} not found.")


def schema_not_found(detail: str = "Schema not found") -> RegistryError:
    return RegistryError(SCHEMA_NOT_FOUND, detail)
