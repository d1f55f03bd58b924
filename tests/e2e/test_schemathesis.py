"""Contract fuzzing: schemathesis generates requests from /openapi.json (a
bounded number per operation) and checks every response: no 5xx, status
codes, content types and bodies as documented."""

import subprocess
import sys

from server_process import ServerProcess


def test_openapi_contract(tmp_path):
    # A short context keeps each generated completion cheap.
    s = ServerProcess("--ctx-size", "64", "--chat-template", "deepseek-r1", "--tenant-rate", "1000", "--rate", "1000", "--burst", "1000", "--tenant-burst", "1000",
                      "--store-dir", str(tmp_path / "store"))
    try:
        result = subprocess.run(
            [sys.executable, "-m", "schemathesis.cli", "run", s.base + "/openapi.json", "--max-examples", "40",
             "--checks", "all", "--exclude-checks", "positive_data_acceptance", "--request-timeout", "30",
             "--suppress-health-check", "all", "--seed", "1"],
            capture_output=True, text=True, timeout=900, cwd=tmp_path)  # its cache stays out of the tree
        print(result.stdout[-6000:])
        assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    finally:
        s.stop()
