"""Local processes of MXNet's distributed kvstore (ps-lite): a scheduler, S servers and M workers on loopback.

Input: the command every worker runs, M, S, a log directory. Output: a :class:`LaunchResult` once every worker has
exited 0, or a :class:`LaunchError` with one line naming the process that failed (or the ones still running at the
timeout) and its log. Either way no process it started is left: on any failure, timeout or interrupt every other
one is killed (its whole process group, by id) and reaped before the function returns.

ps-lite is configured only by environment variables: ``DMLC_ROLE`` (scheduler | server | worker),
``DMLC_PS_ROOT_URI`` / ``DMLC_PS_ROOT_PORT`` (the scheduler's address; a free port picked here),
``DMLC_NUM_SERVER``, ``DMLC_NUM_WORKER``, and ``DMLC_NODE_HOST`` (the address each node listens on, 127.0.0.1
here, so nothing is reachable from outside the machine). A scheduler or server is ``python -c "import mxnet"``:
importing mxnet with that role serves until the workers finish (``mxnet/kvstore/kvstore_server.py``), then exits.
ps-lite has no authentication: whoever reaches these ports can join or push.

Every process writes stdout and stderr to ``{log_dir}/{name}.log`` (``scheduler``, ``server0``.., ``worker0``..;
worker i is the i-th started, not necessarily kvstore rank i), so nothing of MXNet's reaches the terminal.
"""
from __future__ import annotations

import logging
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tofu.errors import TofuError

log = logging.getLogger(__name__)

_ROOT = Path(__file__).resolve().parents[2]     # the directory holding the tofu package
_POLL_S = 0.05


class LaunchError(TofuError):
    """A process of a launched run failed, or the run did not finish in time; ``processes`` are every process
    started (all of them killed and reaped by the time this is raised)."""

    def __init__(self, message: str, processes: tuple["ProcessResult", ...] = ()):
        super().__init__(message)
        self.processes = processes


@dataclass(frozen=True)
class ProcessResult:
    name: str
    role: str
    pid: int
    returncode: int | None          # None: still running at the end and killed (scheduler, servers only)
    log: Path


@dataclass(frozen=True)
class LaunchResult:
    processes: tuple[ProcessResult, ...]
    seconds: float
    port: int

    @property
    def pids(self) -> tuple[int, ...]:
        return tuple(p.pid for p in self.processes)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on at the moment (the OS's choice; another process may still take it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def kvstore_env(role: str, port: int, machines: int, servers: int, host: str = "127.0.0.1") -> dict[str, str]:
    """The ps-lite variables of one process."""
    return {"DMLC_ROLE": role, "DMLC_PS_ROOT_URI": host, "DMLC_PS_ROOT_PORT": str(port),
            "DMLC_NUM_SERVER": str(servers), "DMLC_NUM_WORKER": str(machines), "DMLC_NODE_HOST": host}


def _base_env(extra: Mapping[str, str] | None) -> dict[str, str]:
    env = dict(os.environ)
    # as tofu/__init__.py sets them for this process (its import has run by now): exact graphs, quiet binds
    for name, value in (("MXNET_SUBGRAPH_BACKEND", "NONE"), ("MXNET_SUBGRAPH_VERBOSE", "0"),
                        ("MXNET_MKLDNN_ENABLED", "0"), ("MXNET_STORAGE_FALLBACK_LOG_VERBOSE", "0"),
                        ("MXNET_EXEC_INPLACE_GRAD_SUM_CAP", "1000000"), ("OMP_NUM_THREADS", "1")):
        env.setdefault(name, value)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_ROOT), env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


class _Process:
    def __init__(self, name: str, role: str, argv: Sequence[str], env: Mapping[str, str], log_dir: Path):
        self.name, self.role, self.log = name, role, log_dir / f"{name}.log"
        with open(self.log, "wb") as out:
            self.popen = subprocess.Popen(list(argv), env=dict(env), stdin=subprocess.DEVNULL, stdout=out,
                                          stderr=subprocess.STDOUT, start_new_session=True)

    def kill(self) -> None:
        """Kills the process's group (it leads its own session) and reaps it."""
        if self.popen.poll() is None:
            try:
                os.killpg(self.popen.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            self.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:      # a process in uninterruptible sleep: reported, not waited on
            log.warning("%s (pid %d) did not die within 10 s of SIGKILL", self.name, self.popen.pid)

    def failure(self) -> str:
        rc = self.popen.returncode
        how = f"was killed by {signal.Signals(-rc).name}" if rc < 0 else f"exited with status {rc}"
        last = _last_line(self.log)
        return f"{self.name} (pid {self.popen.pid}) {how}" + (f": {last}" if last else "") + f" (log: {self.log})"

    def result(self) -> ProcessResult:
        return ProcessResult(self.name, self.role, self.popen.pid, self.popen.returncode, self.log)


def _last_line(path: Path, limit: int = 200) -> str:
    try:
        lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1][:limit] if lines else ""


def launch_local(command: Sequence[str], machines: int, servers: int = 1, *, log_dir: str | Path,
                 timeout_s: float = 300.0, grace_s: float = 15.0, env: Mapping[str, str] | None = None,
                 host: str = "127.0.0.1") -> LaunchResult:
    """Runs a ps-lite scheduler, ``servers`` servers and ``machines`` workers (each running ``command``) as local
    processes, and waits until every worker has exited 0.

    Args:
        command: the argv every worker runs (e.g. ``[sys.executable, "-m", "tofu.runtime.dist_worker", ...]``).
        machines: workers (M); each finds its index as its kvstore rank.
        servers: kvstore servers (S).
        log_dir: where ``scheduler.log``, ``server{i}.log`` and ``worker{i}.log`` go (created if missing).
        timeout_s: the whole run's limit, start-up included.
        grace_s: how long the scheduler and servers get to exit after the last worker (then they are killed),
            and the workers after a scheduler or server has exited (then it is an error).
        env: more environment variables for every process.
        host: the address everything listens on; loopback unless the network is trusted (no authentication).

    Returns:
        Every process's pid, exit status and log.

    Raises:
        LaunchError: a process failed (exited non-zero or was killed), workers still ran ``grace_s`` after a
            scheduler or server exited, or ``timeout_s`` passed; every process has been killed and reaped by then.
    """
    _check_counts(machines, servers)
    port = free_port(host)
    base = _base_env(env)
    serve = (sys.executable, "-c", "import mxnet")

    def spec(name: str, role: str, argv: Sequence[str]) -> ProcessSpec:
        return ProcessSpec(name, role, tuple(argv), {**base, **kvstore_env(role, port, machines, servers, host)})

    specs = [spec("scheduler", "scheduler", serve)]
    specs += [spec(f"server{i}", "server", serve) for i in range(servers)]
    specs += [spec(f"worker{i}", "worker", command) for i in range(machines)]
    return supervise(specs, log_dir=log_dir, port=port, timeout_s=timeout_s, grace_s=grace_s)


def _check_counts(machines: int, servers: int) -> None:
    if machines < 1 or servers < 1:
        raise LaunchError(f"need at least one worker and one server, not {machines} and {servers}")


@dataclass(frozen=True)
class ProcessSpec:
    """One process to start here: its name (and log's), its ps-lite role, its argv and its whole environment."""

    name: str
    role: str
    argv: tuple[str, ...]
    env: Mapping[str, str]


def supervise(specs: Sequence[ProcessSpec], *, log_dir: str | Path, port: int, timeout_s: float = 300.0,
              grace_s: float = 15.0) -> LaunchResult:
    """Starts ``specs`` in order and waits until every worker has exited 0 (the supervision of
    :func:`launch_local`, whose arguments and errors these are; ``port`` is only reported)."""
    log_dir = Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    procs: list[_Process] = []
    try:
        for s in specs:
            try:
                procs.append(_Process(s.name, s.role, s.argv, s.env, log_dir))
            except OSError as e:
                raise LaunchError(f"cannot start {s.name} ('{s.argv[0]}'): {e.strerror or e}") from None
        workers = [p for p in procs if p.role == "worker"]
        service_ended = None        # when a scheduler or server first exited 0 (rank 0 stops them at its end)
        while True:
            for p in procs:
                rc = p.popen.poll()
                if rc is not None and rc != 0:
                    raise LaunchError(p.failure())
                if rc == 0 and p.role != "worker" and service_ended is None:
                    service_ended = (p, time.monotonic())
            if all(w.popen.poll() == 0 for w in workers):
                break
            if service_ended is not None and time.monotonic() - service_ended[1] > grace_s:
                p = service_ended[0]
                running = [w for w in workers if w.popen.poll() is None]
                raise LaunchError(f"{p.name} (pid {p.popen.pid}) exited, and {grace_s:g} s later "
                                  f"{', '.join(w.name for w in running)} still ran (logs: {log_dir})")
            if time.monotonic() - start > timeout_s:
                running = [p for p in workers if p.popen.poll() is None]
                raise LaunchError(f"timed out after {timeout_s:g} s with {', '.join(p.name for p in running)} "
                                  f"still running (logs: {log_dir})")
            time.sleep(_POLL_S)
        deadline = time.monotonic() + grace_s
        while any(p.popen.poll() is None for p in procs) and time.monotonic() < deadline:
            time.sleep(_POLL_S)
        results = []
        for p in procs:
            if p.popen.poll() is None:
                log.warning("%s (pid %d) still running %g s after the workers finished; killed", p.name,
                            p.popen.pid, grace_s)
                p.kill()
                results.append(ProcessResult(p.name, p.role, p.popen.pid, None, p.log))
            elif p.popen.returncode != 0:
                raise LaunchError(p.failure())
            else:
                results.append(p.result())
        return LaunchResult(tuple(results), time.monotonic() - start, port)
    except LaunchError as e:
        for p in procs:
            p.kill()
        raise LaunchError(str(e), tuple(p.result() for p in procs)) from None
    finally:
        for p in procs:
            p.kill()


# ------------------------------------------------------------------------------------------- over ssh

@dataclass(frozen=True)
class Host:
    """One line of a hostfile: what ssh connects to (``user@host`` or ``host``), the address the ps-lite nodes
    on it listen on and are reached at (``host``), and ssh's port (None: ssh's default)."""

    destination: str
    address: str
    ssh_port: int | None = None


def read_hostfile(path: str | Path) -> tuple[Host, ...]:
    """The hosts of ``path``: one ``[USER@]HOST[:SSH_PORT]`` per line; blank lines and ``#`` comments skipped.

    Raises:
        LaunchError: the file cannot be read, a line is malformed, a host is listed twice, or it lists none.
    """
    path = Path(path)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise LaunchError(f"cannot read hostfile '{path}': {getattr(e, 'strerror', None) or e}") from None
    hosts: list[Host] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        m = _HOST_LINE.fullmatch(line)
        if not m:
            raise LaunchError(f"hostfile '{path}', line {number}: '{line}' is not [USER@]HOST[:SSH_PORT]")
        host = Host(m["user"] + m["host"] if m["user"] else m["host"], m["host"],
                    int(m["port"]) if m["port"] else None)
        if host in hosts:
            raise LaunchError(f"hostfile '{path}', line {number}: '{line}' is listed twice")
        hosts.append(host)
    if not hosts:
        raise LaunchError(f"hostfile '{path}' lists no host")
    return tuple(hosts)


_HOST_LINE = re.compile(r"(?P<user>[A-Za-z0-9._-]+@)?(?P<host>[A-Za-z0-9][A-Za-z0-9.-]*)(?::(?P<port>[0-9]{1,5}))?")
_FORWARDED = ("MXNET_SUBGRAPH_BACKEND", "MXNET_SUBGRAPH_VERBOSE", "MXNET_MKLDNN_ENABLED",
              "MXNET_STORAGE_FALLBACK_LOG_VERBOSE", "MXNET_EXEC_INPLACE_GRAD_SUM_CAP", "OMP_NUM_THREADS",
              "PYTHONPATH", "PYTHONUNBUFFERED")


def ssh_specs(command: Sequence[str], machines: int, servers: int, hosts: Sequence[Host], *, port: int,
              cwd: str | Path, env: Mapping[str, str] | None = None,
              python: str = sys.executable) -> tuple[ProcessSpec, ...]:
    """The local ``ssh`` processes that start a run's scheduler, servers and workers on ``hosts``.

    The scheduler runs on the first host (``DMLC_PS_ROOT_URI`` is its address, ``DMLC_PS_ROOT_PORT`` ``port``),
    server i on host ``i mod len(hosts)``, worker (machine) m on host m; each node listens on its own host's
    address (``DMLC_NODE_HOST``). On the host, each runs ``cd CWD && env VAR=VALUE ... ARGV`` (every word quoted
    for the remote shell): the ps-lite variables, this process's MXNet settings and ``PYTHONPATH`` (the same
    paths on every host: a shared file system), and ``env``. ``ssh -tt`` gives the remote command a terminal, so
    killing the local ssh hangs up on it and the remote process ends too.

    Raises:
        LaunchError: fewer hosts than machines (each machine's devices are its host's).
    """
    _check_counts(machines, servers)
    if len(hosts) < machines:
        raise LaunchError(f"the hostfile lists {len(hosts)} host{'s' * (len(hosts) != 1)}; {machines} machines "
                          f"need {machines} (one machine per host)")
    base = _base_env(env)
    forwarded = {k: base[k] for k in _FORWARDED if k in base}
    forwarded.update(env or {})
    serve = (python, "-c", "import mxnet")
    root = hosts[0].address

    def spec(name: str, role: str, host: Host, argv: Sequence[str]) -> ProcessSpec:
        variables = {**forwarded, **kvstore_env(role, port, machines, servers, root), "DMLC_NODE_HOST": host.address}
        remote = (f"cd {shlex.quote(str(cwd))} && env "
                  + " ".join(shlex.quote(f"{k}={v}") for k, v in variables.items()) + " "
                  + " ".join(shlex.quote(a) for a in argv))
        ssh = ["ssh", "-tt", "-o", "BatchMode=yes"] + (["-p", str(host.ssh_port)] if host.ssh_port else [])
        return ProcessSpec(name, role, (*ssh, host.destination, remote), dict(os.environ))

    specs = [spec("scheduler", "scheduler", hosts[0], serve)]
    specs += [spec(f"server{i}", "server", hosts[i % len(hosts)], serve) for i in range(servers)]
    specs += [spec(f"worker{m}", "worker", hosts[m], command) for m in range(machines)]
    return tuple(specs)


def launch_hosts(command: Sequence[str], machines: int, servers: int, hosts: Sequence[Host], *,
                 log_dir: str | Path, port: int = 9091, cwd: str | Path | None = None, timeout_s: float = 300.0,
                 grace_s: float = 15.0, env: Mapping[str, str] | None = None) -> LaunchResult:
    """:func:`launch_local` on ``hosts`` over ssh (:func:`ssh_specs`); the logs are the ssh clients' output, here.

    Raises:
        LaunchError: as :func:`launch_local`, and for too few hosts.
    """
    specs = ssh_specs(command, machines, servers, hosts, port=port, cwd=cwd or Path.cwd(), env=env)
    return supervise(specs, log_dir=log_dir, port=port, timeout_s=timeout_s, grace_s=grace_s)
