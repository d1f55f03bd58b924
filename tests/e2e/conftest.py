import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from server_process import ServerProcess  # noqa: E402

KEYS = {"sk-alpha": "alpha", "sk-beta": "beta"}


@pytest.fixture(scope="session")
def keys_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("keys") / "keys.txt"
    path.write_text("".join(f"{k} {t}\n" for k, t in KEYS.items()))
    return str(path)


@pytest.fixture(scope="session")
def server(keys_file):
    # stories260K with the DeepSeek-R1 chat format: a real (tiny) model, every endpoint.
    # 128 in flight: each tenant may hold 64 (half, admission.h), room for the 50-disconnect test.
    s = ServerProcess("--api-keys", keys_file, "--chat-template", "deepseek-r1", "--ctx-size", "512",
                      "--max-body-bytes", "65536", "--max-in-flight", "128")
    yield s
    s.stop()
