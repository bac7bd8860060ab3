"""The suite's processes trust one certificate that verifies nothing (ADR 0054, "quick3" and
"certs").

No test talks TLS, yet every client a provider SDK builds loads the CA file of its TLS
context: a system bundle of ~150 certificates costs ~25 ms a client. ``replay_tests/conftest.py``
points ``SSL_CERT_FILE`` at ``trusts-nothing.pem`` even where the environment already names a
bundle, as this project's machines do for every process.
"""

from __future__ import annotations

import os
import ssl
from pathlib import Path


def test_every_tls_context_the_suite_builds_trusts_one_certificate() -> None:
    cafile = os.environ["SSL_CERT_FILE"]
    assert cafile == str(Path(__file__).with_name("trusts-nothing.pem"))
    # What an SDK's client builds from it (httpx and httpx2 alike): one CA, not a bundle.
    assert ssl.create_default_context(cafile=cafile).cert_store_stats()["x509_ca"] == 1
