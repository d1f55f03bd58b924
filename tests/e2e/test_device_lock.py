"""One owner per device: `dsinfer serve --device cpu:0` pins the process to
core 0 and locks it; a second instance asking for core 0 exits non-zero at
start, naming the first one's PID; once the first is gone, even by SIGKILL
(the kernel drops its flock), the core is free again. The timeouts only
bound the test against a hang."""

import os
import signal
import subprocess

from server_process import DSINFER, STORIES, ServerProcess


def second_instance(run_dir):
    return subprocess.run([DSINFER, "serve", "-m", STORIES, "--port", "0", "--device", "cpu:0", "--run-dir", run_dir],
                          capture_output=True, text=True, timeout=60)


def test_a_device_has_one_owner_until_it_dies(tmp_path):
    run_dir = str(tmp_path / "run")
    first = ServerProcess("--device", "cpu:0", "--run-dir", run_dir)
    try:
        tasks = os.listdir(f"/proc/{first.process.pid}/task")
        assert len(tasks) > 1
        for task in tasks:  # every thread: they all started after the pin
            with open(f"/proc/{first.process.pid}/task/{task}/status") as f:
                assert next(line.split()[1] for line in f if line.startswith("Cpus_allowed_list:")) == "0"
        refused = second_instance(run_dir)
        assert refused.returncode != 0
        assert f"core 0 is held by dsinfer PID {first.process.pid}" in refused.stderr, refused.stderr
        first.process.send_signal(signal.SIGKILL)
        first.process.wait(timeout=30)
    finally:
        first.stop()
    # Free again: a new instance takes core 0 and serves.
    again = ServerProcess("--device", "cpu:0", "--run-dir", run_dir)
    try:
        assert again.process.poll() is None
        with open(os.path.join(run_dir, "cpu-0.lock")) as f:
            assert f.read().strip() == str(again.process.pid)
    finally:
        again.stop()
