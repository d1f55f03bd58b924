"""`dsinfer router` started on a config the test writes, stopped with
SIGTERM (which must end it cleanly): the process and its admin API, shared by
the router's tests."""

import json
import signal
import socket
import subprocess
import time
import urllib.request

from server_process import DSINFER

ADMIN = {"Authorization": "Bearer admin-key-1"}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Router:
    def __init__(self, tmp_path, instances, routing="prefix_affinity", api_keys=None, extra=None):
        admin = tmp_path / "admin.txt"
        admin.write_text("admin-key-1 ops\n")
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        config = tmp_path / "router.json"
        body = {"listen": f"127.0.0.1:{self.port}", "admin_keys": str(admin), "routing": routing, "instances": instances}
        if api_keys:
            body["api_keys"] = api_keys
        body.update(extra or {})
        config.write_text(json.dumps(body))
        self.log_path = str(tmp_path / "router.log")
        self.log = open(self.log_path, "w")
        self.process = subprocess.Popen([DSINFER, "router", "--config", str(config)], stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 60
        while time.time() < deadline:
            assert self.process.poll() is None, self.output()
            try:
                if all(i["state"] == "healthy" for i in self.instances().values()):
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError("the router's instances did not become healthy: " + self.output())

    def instances(self):
        request = urllib.request.Request(self.base + "/admin/instances", headers=ADMIN)
        with urllib.request.urlopen(request, timeout=5) as r:
            return {i["id"]: i for i in json.loads(r.read())["instances"]}

    def output(self):
        self.log.flush()
        with open(self.log_path) as f:
            return f.read()

    def stop(self):
        self.process.send_signal(signal.SIGTERM)
        try:
            assert self.process.wait(timeout=60) == 0
        finally:
            if self.process.poll() is None:
                self.process.kill()
            self.log.close()
