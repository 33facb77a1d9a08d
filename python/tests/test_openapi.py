"""The server's OpenAPI document is a valid OpenAPI 3.1 description.

The Rust tests (tests/server_openapi.rs) check it against the real server;
this one checks it against the specification, with openapi-spec-validator.
"""

import json
import pathlib

from openapi_spec_validator import validate
from openapi_spec_validator.validation.exceptions import OpenAPIValidationError
import pytest

DOCUMENT = (
    pathlib.Path(__file__).resolve().parents[2]
    / "src" / "bin" / "simhashdb" / "serve" / "openapi.json"
)


def test_the_document_is_valid_openapi_3_1():
    doc = json.loads(DOCUMENT.read_text())
    assert doc["openapi"] == "3.1.0"
    validate(doc)


def test_the_validator_refuses_a_broken_document():
    doc = json.loads(DOCUMENT.read_text())
    doc["paths"]["/v1/check"]["post"]["responses"]["200"] = {"content": 5}
    with pytest.raises(OpenAPIValidationError):
        validate(doc)
