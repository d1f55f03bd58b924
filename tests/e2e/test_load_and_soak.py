"""The overload and soak scripts, bounded, as CI tests (their tables go to
the log with -s)."""

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def run_script(name, *args):
    result = subprocess.run([sys.executable, os.path.join(HERE, name), *args], capture_output=True, text=True, timeout=600)
    print(result.stdout)
    assert result.returncode == 0, result.stdout + result.stderr


def test_overload_four_times_capacity():
    run_script("load_test.py", "--factor", "4", "--max-in-flight", "16")


def test_a_thousand_streams_on_a_few_threads():
    run_script("many_streams.py", "--streams", "1000")


def test_soak_memory_stays_flat():
    run_script("soak.py", "--requests", "3000")
