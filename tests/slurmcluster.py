"""A real one-node SLURM cluster for the cluster tests (Debian's slurm-wlm and munge; no systemd).

:func:`start` writes a ``slurm.conf`` for this machine (its node line from ``slurmd -C``: the real CPUs and
memory), starts ``munged`` with its own key and socket, ``slurmctld -D`` and ``slurmd -D`` in the foreground
as child processes, all state under one folder and on free ports, and waits for the node to be idle;
:meth:`Cluster.stop` cancels every job and ends the three daemons by their pids. :func:`unavailable` says
why a cluster cannot start here (not root, a binary missing), for the tests to skip with that reason.
Install the packages with ``make setup-slurm`` (``scripts/install_slurm.sh``).
"""
from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel", "sinfo")


def unavailable() -> str | None:
    """Why no cluster can start here, or None."""
    if os.geteuid() != 0:
        return "the one-node SLURM cluster runs its daemons as root (run the tests as root)"
    missing = [b for b in BINARIES if shutil.which(b) is None and not Path(f"/usr/sbin/{b}").exists()]
    if missing:
        return f"SLURM is not installed ({', '.join(missing)} missing): run `make setup-slurm` (Debian: slurm-wlm, munge)"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _binary(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


def node_line() -> str:
    """``NodeName=<host> CPUs=.. RealMemory=..`` as ``slurmd -C`` reports this machine."""
    out = subprocess.run([_binary("slurmd"), "-C"], capture_output=True, text=True, timeout=30).stdout
    line = next(ln for ln in out.splitlines() if ln.startswith("NodeName="))
    return re.sub(r"\s+UpTime=\S+", "", line)


@dataclass
class Cluster:
    root: Path
    env: dict
    procs: dict = field(default_factory=dict)
    log: list = field(default_factory=list)

    def run(self, *cmd, check=True, timeout=120, quiet=False, **kw) -> subprocess.CompletedProcess:
        r = subprocess.run([str(c) for c in cmd], env=self.env, capture_output=True, text=True, timeout=timeout, **kw)
        if not quiet:
            self.log.append(f"$ {' '.join(map(str, cmd))}\n{r.stdout}{r.stderr}".rstrip())
        if check and r.returncode != 0:
            raise RuntimeError(f"{cmd} failed ({r.returncode}): {r.stdout}{r.stderr}")
        return r

    def job_state(self, job_id: str) -> dict:
        """``scontrol show job`` fields of a job (every array task: the first one's), {} once it is gone."""
        r = self.run("scontrol", "-o", "show", "job", job_id, check=False, quiet=True)
        if r.returncode != 0 or not r.stdout.strip():
            return {}
        return dict(kv.split("=", 1) for kv in r.stdout.splitlines()[0].split() if "=" in kv)

    def tasks(self, job_id: str) -> list[dict]:
        r = self.run("scontrol", "-o", "show", "job", job_id, check=False, quiet=True)
        return [dict(kv.split("=", 1) for kv in line.split() if "=" in kv) for line in r.stdout.splitlines()
                if line.strip()]

    def wait_done(self, job_id: str, timeout: float = 900) -> list[dict]:
        """Wait until no task of the job is pending or running; their final ``scontrol`` records."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            tasks = self.tasks(job_id)
            if tasks and all(t.get("JobState") not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING",
                                                        "REQUEUED", "SUSPENDED") for t in tasks):
                self.log.append(f"job {job_id}: " + "; ".join(
                    f"{t.get('JobId')}[{t.get('ArrayTaskId', '-')}] {t.get('JobState')} Restarts={t.get('Restarts')} "
                    f"Start={t.get('StartTime')} End={t.get('EndTime')}" for t in tasks))
                return tasks
            time.sleep(2)
        raise TimeoutError(f"job {job_id} still running after {timeout} s: {self.tasks(job_id)}")

    def stop(self) -> None:
        if "slurmctld" in self.procs:
            self.run("scancel", "--full", "--user", "root", check=False)
            deadline = time.time() + 60
            while time.time() < deadline and self.run("squeue", "-h", check=False, quiet=True).stdout.strip():
                time.sleep(1)
        for name in ("slurmd", "slurmctld", "munged"):
            proc = self.procs.pop(name, None)
            if proc is not None and proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=30)
        if self.root.name.startswith("harness-slurm-"):
            shutil.rmtree(self.root, ignore_errors=True)


def _conf(root: Path, ctld_port: int, slurmd_port: int) -> str:
    host = socket.gethostname()
    return f"""# generated by tests/slurmcluster.py: a one-node cluster on this machine
ClusterName=harness
SlurmctldHost={host}(127.0.0.1)
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={root}/munge.socket,cred_expire=20
# cred_expire: a requeued job waits cred_expire + 1 s before it starts again (default 120)
SlurmUser=root
SlurmdUser=root
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
JobRequeue=1
KillWait=10
MinJobAge=3600
{node_line()} NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


def start(timeout: float = 60) -> Cluster:
    """Start munged, slurmctld and slurmd in a new folder under /tmp (munged wants every folder above its
    socket searchable by all, which pytest's tmp folders are not); raise with the daemons' logs if the node
    does not become idle. :meth:`Cluster.stop` removes the folder."""
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="harness-slurm-"))
    for d in ("state", "spool"):
        (root / d).mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o755)
    key = root / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    conf = root / "slurm.conf"
    conf.write_text(_conf(root, _free_port(), _free_port()))
    cluster = Cluster(root, dict(os.environ, SLURM_CONF=str(conf)))
    logs = {n: open(root / f"{n}.out", "w") for n in ("munged", "slurmctld", "slurmd")}
    cmds = {"munged": [_binary("munged"), "-F", f"--socket={root}/munge.socket", f"--key-file={key}",
                       f"--pid-file={root}/munged.pid", f"--log-file={root}/munged.log", f"--seed-file={root}/munge.seed"],
            "slurmctld": [_binary("slurmctld"), "-D", "-i", "-f", str(conf)],
            "slurmd": [_binary("slurmd"), "-D", "-f", str(conf)]}
    try:
        for name, cmd in cmds.items():
            cluster.procs[name] = subprocess.Popen(cmd, env=cluster.env, stdout=logs[name], stderr=subprocess.STDOUT,
                                                   start_new_session=True)
            time.sleep(1.0)
        deadline = time.time() + timeout
        while time.time() < deadline:
            dead = [n for n, p in cluster.procs.items() if p.poll() is not None]
            if dead:
                raise RuntimeError(f"{dead} exited")
            state = cluster.run("sinfo", "-h", "-o", "%T", check=False).stdout.strip()
            if state == "idle":
                return cluster
            time.sleep(1)
        raise RuntimeError(f"node not idle after {timeout} s (sinfo: {state!r})")
    except Exception as e:
        detail = "\n".join(f"--- {n}:\n{(root / f'{n}.out').read_text()[-1500:]}" for n in cmds)
        cluster.stop()
        raise RuntimeError(f"the SLURM cluster did not start: {e}\n{detail}") from e
