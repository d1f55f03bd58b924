"""The deployment files (deploy/: Dockerfile, systemd unit, Kubernetes
manifests) against the binary they run: every `dsinfer serve` command line in
them is one the binary accepts (run with the model swapped for a missing file,
it fails on the model, never on an option), the router's config passes
`dsinfer router --check`, and the numbers agree across each file: ports,
probe paths, the stop grace against --drain-timeout, whole-core CPU requests,
and the packages the image builds with against the ones the test machines
install. The README's router configs pass `dsinfer router --check` too."""

import json
import os
import re
import shlex
import subprocess

import yaml

from server_process import DSINFER, ROOT

DEPLOY = os.path.join(ROOT, "deploy")


def accepts(args):
    """`dsinfer serve ARGS` parses: with -m pointing nowhere, the failure names the model, not an option."""
    assert args[0] == "serve", args
    args = list(args)
    args[args.index("-m") + 1] = "/nonexistent/model.gguf"
    checked = list(args)
    # The device is this machine's to have or not: its spelling is checked here, its claim not run.
    for machine_specific in ("--device", "--run-dir"):
        if machine_specific in checked:
            at = checked.index(machine_specific)
            if machine_specific == "--device":
                one = r"cpu:(numa\d+|\d+(-\d+)?(,\d+(-\d+)?)*)"
                assert re.fullmatch(rf"{one}(,{one})*", checked[at + 1]), checked[at + 1]  # one device, or one per rank
            del checked[at:at + 2]
    result = subprocess.run([DSINFER, *checked], capture_output=True, text=True, timeout=30)
    assert result.returncode != 0
    assert "unknown option" not in result.stderr and "needs a value" not in result.stderr, (args, result.stderr)
    assert "/nonexistent/model.gguf" in result.stderr, result.stderr
    return args


def flag(args, name, default=None):
    return args[args.index(name) + 1] if name in args else default


def test_kubernetes_manifests(tmp_path):
    documents = []
    for name in sorted(os.listdir(os.path.join(DEPLOY, "kubernetes"))):
        with open(os.path.join(DEPLOY, "kubernetes", name)) as f:
            documents += [d for d in yaml.safe_load_all(f) if d]
    deployments = [d for d in documents if d["kind"] == "Deployment"]
    mpi_jobs = [d for d in documents if d["kind"] == "MPIJob"]
    services = [d for d in documents if d["kind"] == "Service"]
    configs = {d["metadata"]["name"]: d for d in documents if d["kind"] == "ConfigMap"}
    assert deployments and mpi_jobs and services
    for deployment in deployments:
        assert deployment["spec"]["selector"]["matchLabels"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    # The pods that serve: each Deployment's, and each MPIJob's launcher (rank 0's pod).
    serving = [d["spec"]["template"] for d in deployments] + [j["spec"]["mpiReplicaSpecs"]["Launcher"]["template"] for j in mpi_jobs]
    for pod in serving:
        (container,) = pod["spec"]["containers"]
        args = container["args"]
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        if args[0] == "serve":
            accepts(args)
            assert int(flag(args, "--port", 8000)) in ports.values()
            assert pod["spec"]["terminationGracePeriodSeconds"] > float(flag(args, "--drain-timeout", 30))
            annotations = pod["metadata"].get("annotations", {})
            if annotations.get("prometheus.io/scrape") == "true":
                assert int(annotations["prometheus.io/port"]) in ports.values()
                assert "--metrics-public" in args  # a scraper would need a tenant's key otherwise
        else:
            assert args[:2] == ["router", "--config"]
            mount = next(m for m in container["volumeMounts"] if args[2].startswith(m["mountPath"]))
            volume = next(v for v in pod["spec"]["volumes"] if v["name"] == mount["name"])
            text = configs[volume["configMap"]["name"]]["data"][os.path.basename(args[2])]
            config = tmp_path / "router.json"
            config.write_text(text)
            checked = subprocess.run([DSINFER, "router", "--config", str(config), "--check"], capture_output=True, text=True, timeout=30)
            assert checked.returncode == 0, checked.stderr
            assert int(json.loads(text)["listen"].rsplit(":", 1)[1]) in ports.values()
        for probe in ("livenessProbe", "readinessProbe"):
            get = container[probe]["httpGet"]
            assert get["path"] == ("/health" if probe == "livenessProbe" else "/ready") and get["port"] in ports
        cpu = container["resources"]["requests"]["cpu"]
        assert cpu == container["resources"]["limits"]["cpu"] and float(cpu).is_integer()  # whole cores: the static CPU manager pins them
    for service in services:
        matches = [pod for pod in serving if service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()]
        assert matches, service["metadata"]["name"]
        names = {p["name"] for pod in matches for p in pod["spec"]["containers"][0]["ports"]}
        assert all(p["targetPort"] in names for p in service["spec"]["ports"])


def test_the_slurm_batch_script_runs_the_ranks_it_asks_for():
    """deploy/slurm/dsinfer-tensor-parallel.sbatch: srun's tasks are the ranks serve asks for, --device names one
    device per rank, and the command line is one serve accepts (run once per rank under srun: the launcher's)."""
    with open(os.path.join(DEPLOY, "slurm", "dsinfer-tensor-parallel.sbatch")) as f:
        text = f.read()
    batch = dict(re.findall(r"^#SBATCH --([\w-]+)(?:=(\S+))?$", text, re.M))
    command = shlex.split(re.search(r"^srun .*?(?<!\\)$", text.replace("\\\n", " "), re.M | re.S).group(0))
    dsinfer = command.index("/usr/local/bin/dsinfer")
    assert "--mpi=pmix" in command[:dsinfer]
    args = command[dsinfer + 1:]
    ranks = int(flag(args, "--tensor-parallel"))
    assert ranks == int(batch["ntasks"]) == int(batch["nodes"]) * int(batch["ntasks-per-node"])
    assert len(re.findall(r"cpu:", flag(args, "--device"))) == ranks
    accepts(args)


def test_the_mpi_operators_job_runs_the_ranks_it_asks_for():
    """deploy/kubernetes/dsinfer-tensor-parallel.yaml: the launcher's `serve --tensor-parallel N` starts as many
    ranks as the operator's hostfile lists (the launcher, then the workers, slotsPerWorker each); every pod mounts
    the model where -m names it; the workers run the sshd that deploy/Dockerfile.mpi configures, with the keys
    where the operator mounts them."""
    with open(os.path.join(DEPLOY, "kubernetes", "dsinfer-tensor-parallel.yaml")) as f:
        (job,) = [d for d in yaml.safe_load_all(f) if d and d["kind"] == "MPIJob"]
    with open(os.path.join(DEPLOY, "Dockerfile.mpi")) as f:
        dockerfile = f.read()
    spec = job["spec"]
    launcher = spec["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
    worker_spec = spec["mpiReplicaSpecs"]["Worker"]
    args = launcher["containers"][0]["args"]
    hosts = worker_spec["replicas"] + (1 if spec["runLauncherAsWorker"] else 0)
    assert int(flag(args, "--tensor-parallel")) == hosts * spec["slotsPerWorker"]
    model_dir = os.path.dirname(flag(args, "-m"))
    for pod in (launcher, worker_spec["template"]["spec"]):
        mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["mountPath"] == model_dir)
        volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
        assert volume["persistentVolumeClaim"]["claimName"] == "dsinfer-models"
    sshd = worker_spec["template"]["spec"]["containers"][0]["command"]
    assert sshd[0] == "/usr/sbin/sshd" and "openssh-server" in dockerfile
    config = sshd[sshd.index("-f") + 1]
    assert f"> {config}" in dockerfile
    assert f"'HostKey {spec['sshAuthMountPath']}/id_rsa'" in dockerfile
    assert f"'AuthorizedKeysFile {spec['sshAuthMountPath']}/authorized_keys'" in dockerfile
    port = worker_spec["template"]["spec"]["containers"][0]["readinessProbe"]["tcpSocket"]["port"]
    assert f"'Port {port}'" in dockerfile and f"Port {port}\\n" in dockerfile  # sshd's, and the launcher's ssh client's


def test_systemd_unit():
    with open(os.path.join(DEPLOY, "dsinfer.service")) as f:
        text = f.read().replace("\\\n", " ")
    settings = dict(re.findall(r"^(\w+)=(.*)$", text, re.M))
    command = shlex.split(settings["ExecStart"])
    assert command[0] == "/usr/local/bin/dsinfer"
    args = accepts(command[1:])
    assert float(settings["TimeoutStopSec"]) > float(flag(args, "--drain-timeout", 30))
    assert flag(args, "--run-dir") == "/run/" + settings["RuntimeDirectory"]
    assert settings["KillSignal"] == "SIGTERM" and settings["Restart"] == "on-failure"


def package_of(library):
    """The Debian package of a shared library, by any of the names merged /usr gives it."""
    real = os.path.realpath(library)
    for path in (library, real, real.removeprefix("/usr"), "/usr" + library):
        found = subprocess.run(["dpkg", "-S", path], capture_output=True, text=True)
        if found.returncode == 0:
            return found.stdout.split(":")[0]
    raise AssertionError(f"no Debian package holds {library}")


def test_dockerfile():
    with open(os.path.join(DEPLOY, "Dockerfile")) as f:
        text = f.read()
    cmd = json.loads(re.search(r"^CMD (\[.*\])$", text, re.M).group(1))
    args = accepts(cmd)
    port = int(flag(args, "--port", 8000))
    assert re.search(rf"^EXPOSE {port}$", text, re.M)
    assert f"http://127.0.0.1:{port}/health" in re.search(r"^HEALTHCHECK .*$", text, re.M).group(0)
    build_packages = set(re.search(r"apt-get install -y --no-install-recommends \\\n(.*?)\\\n", text, re.S).group(1).split())
    with open(os.path.join(ROOT, "scripts", "install_deps.sh")) as f:
        tested = set(re.search(r"debian_packages=\((.*?)\)", f.read(), re.S).group(1).split())
    assert build_packages <= tested, build_packages - tested  # the image builds with what the tests build with
    # The runtime image installs the package of every shared library the binary links (Debian's slim image has libc6,
    # libstdc++6 and libgcc-s1).
    runtime_packages = set(re.search(r"^FROM debian:12-slim\nRUN apt-get update && apt-get install -y --no-install-recommends (.*?) \\",
                                     text, re.M).group(1).split())
    linked = re.findall(r"=> (/\S+)", subprocess.run(["ldd", DSINFER], capture_output=True, text=True, check=True).stdout)
    needed = {package_of(path) for path in linked} - {"libc6", "libstdc++6", "libgcc-s1"}
    assert needed <= runtime_packages, needed - runtime_packages


def test_the_readmes_router_configs_are_valid(tmp_path):
    with open(os.path.join(ROOT, "README.md")) as f:
        blocks = [b for b in re.findall(r"```json\n(.*?)```", f.read(), re.S) if '"instances"' in b]
    assert blocks, "the README shows no router config"
    for i, block in enumerate(blocks):
        config = tmp_path / f"readme-{i}.json"
        config.write_text(block)
        checked = subprocess.run([DSINFER, "router", "--config", str(config), "--check"], capture_output=True, text=True, timeout=30)
        assert checked.returncode == 0, (block, checked.stderr)
