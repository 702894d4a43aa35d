"""JSON may carry lone surrogates that cannot be written to a file or a pipe: a 422, not a 500."""

import pytest
from fastapi.testclient import TestClient

from sandbox.api import create_app
from sandbox.config import Settings


@pytest.fixture(scope="module")
def client():
    # No `with`: the start-up sweep does not run; these requests are refused before the engine.
    return TestClient(create_app(Settings(audit_log="off")), raise_server_exceptions=False)


@pytest.mark.parametrize("body, what", [
    ('{"code": "print(1)\\ud800", "language": "python"}', "code"),
    ('{"code": "print(1)", "stdin": "\\udfff", "language": "python"}', "stdin"),
    ('{"code": "print(1)", "files": {"a\\ud800": "YQ=="}, "language": "python"}', "files path"),
    ('{"code": "print(1)", "fetch_files": ["\\ud800"], "language": "cpp"}', "fetch_files path"),
])
def test_lone_surrogate_is_a_422_naming_the_field(client, body, what):
    response = client.post("/run_code", content=body.encode(),
                           headers={"content-type": "application/json"})
    assert response.status_code == 422, response.text
    assert response.json()["detail"].startswith(f"{what} is not valid Unicode")
