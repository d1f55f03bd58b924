"""Starts `dsinfer serve` on 127.0.0.1 on a free port and stops it: the e2e
tests, the load test and the soak test all drive a real server process."""

import json
import os
import resource
import signal
import socket
import subprocess
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DSINFER = os.environ.get("DSINFER", os.path.join(ROOT, "build", "dsinfer"))
STORIES = os.path.join(ROOT, "..", "shared", "fixtures", "models", "stories260K.gguf")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    def __init__(self, *args, model=STORIES, log_path=None, nofile=None):
        """nofile: the server's open-file limit (ulimit -n), else inherited."""
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path or f"/tmp/dsinfer-serve-{self.port}.log"
        self.log = open(self.log_path, "w")
        limit = (lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))) if nofile else None
        self.process = subprocess.Popen([DSINFER, "serve", "-m", model, "--port", str(self.port), *args],
                                        stdout=self.log, stderr=subprocess.STDOUT, preexec_fn=limit)
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"dsinfer serve exited with {self.process.returncode}: {self.output()}")
            try:
                with urllib.request.urlopen(self.base + "/ready", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("dsinfer serve did not become ready: " + self.output())

    def output(self):
        self.log.flush()
        with open(self.log_path) as f:
            return f.read()

    def metric(self, name, key="sk-alpha"):
        """The value of an unlabelled series from /metrics (with --api-keys it needs a key;
        the tests' keys file always holds sk-alpha)."""
        request = urllib.request.Request(self.base + "/metrics", headers={"Authorization": f"Bearer {key}"})
        with urllib.request.urlopen(request, timeout=5) as r:
            for line in r.read().decode().splitlines():
                if line.startswith(name + " "):
                    return float(line.split()[1])
        raise KeyError(name)

    def debug(self, body, key):
        """serve's test hook (POST /admin/debug, a server started with --admin-keys holding `key`)."""
        request = urllib.request.Request(self.base + "/admin/debug", method="POST", data=json.dumps(body).encode(),
                                         headers={"Authorization": f"Bearer {key}"})
        with urllib.request.urlopen(request, timeout=10) as r:
            assert r.status == 200

    def wait_for_in_flight(self, n, seconds=10):
        """Waits until the server holds n generation requests open."""
        deadline = time.time() + seconds
        while self.metric("dsinfer:num_requests_in_flight") < n:
            assert time.time() < deadline, f"fewer than {n} requests in flight after {seconds} s"
            time.sleep(0.01)

    def status_field(self, name):
        """A number from /proc/PID/status, e.g. VmRSS (KiB) or Threads."""
        with open(f"/proc/{self.process.pid}/status") as f:
            for line in f:
                if line.startswith(name + ":"):
                    return int(line.split()[1])
        return 0

    def rss_kib(self):
        return self.status_field("VmRSS")

    def cpu_seconds(self):
        """User plus system CPU time the server has used."""
        with open(f"/proc/{self.process.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def access_log(self):
        """The access-log lines so far, parsed."""
        return [json.loads(line.split("access ", 1)[1]) for line in self.output().splitlines() if line.startswith("[info] access ")]

    def terminate(self):
        self.process.send_signal(signal.SIGTERM)

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()
