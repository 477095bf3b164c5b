"""``tofu launch`` and ``tofu plan --machines``, in-process: bad input is one line with status 2 and starts
nothing; the planner's inter-machine bytes equal the bytes a loopback run hands the kvstore; the ``--hostfile``
ssh command lines (built, never run) start each role on its host with the ps-lite variables."""
import json
import shlex

import pytest

from tests.test_cli import assert_one_line_error, run
from tofu.runtime.launch import LaunchError, read_hostfile, ssh_specs


@pytest.mark.parametrize("argv,names", [
    (["--machines", "0", "--workers", "2", "--", "tofu", "run", "mlp"], ["--machines must be at least 1"]),
    (["--machines", "2", "--workers", "7", "--", "tofu", "run", "mlp", "--batch", "24"], ["7 workers"]),
    (["--machines", "2", "--workers", "2", "tofu", "run", "mlp"], ["missing `--`"]),
    (["--machines", "2", "--workers", "2"], ["missing `--`"]),
    (["--machines", "2", "--workers", "2", "--", "python", "train.py"], ["after `--` comes `tofu run"]),
    (["--machines", "2", "--workers", "2", "--", "tofu", "run", "mlp", "--batch", "25"],
     ["global batch 25 is not divisible by 2 machines"]),
    (["--machines", "2", "--workers", "2", "--", "tofu", "run", "mlp", "--workers", "4"],
     ["--workers 4", "--workers 2"]),
    (["--machines", "2", "--workers", "2", "--", "tofu", "run", "mlp", "--bogus"], ["after `--`", "--bogus"]),
    (["--machines", "2", "--workers", "2", "--", "tofu", "run", "mlp", "--checkpoint-every", "5"],
     ["--checkpoint PATH and --checkpoint-every N go together"]),
])
def test_launch_bad_input_is_one_line_and_starts_nothing(capsys, tmp_path, argv, names):
    logs = tmp_path / "logs"
    rc, out, err = run(capsys, "launch", "--log-dir", str(logs), *argv)
    assert_one_line_error(rc, out, err, *names)
    assert not logs.exists()


def test_launch_unreadable_or_short_hostfile(capsys, tmp_path):
    rc, out, err = run(capsys, "launch", "--machines", "2", "--workers", "2", "--hostfile", str(tmp_path / "none"),
                       "--", "tofu", "run", "mlp")
    assert_one_line_error(rc, out, err, "cannot read hostfile", "none")
    hostfile = tmp_path / "hosts"
    hostfile.write_text("node1\n")
    rc, out, err = run(capsys, "launch", "--machines", "2", "--workers", "2", "--hostfile", str(hostfile),
                       "--", "tofu", "run", "mlp")
    assert_one_line_error(rc, out, err, "lists 1 hosts; 2 machines need 2")


def test_hostfile_format_errors(tmp_path):
    path = tmp_path / "hosts"
    for text, message in (("node1\nbad host\n", "line 2: 'bad host' is not"), ("# only a comment\n", "lists no host"),
                          ("node1\nnode1  # again\n", "line 2: 'node1' is listed twice")):
        path.write_text(text)
        with pytest.raises(LaunchError, match=message):
            read_hostfile(path)


def test_ssh_command_lines_start_each_role_on_its_host(tmp_path):
    path = tmp_path / "hosts"
    path.write_text("# three machines\nalice@node1\nnode2:2222   # ssh on another port\n10.0.0.3\n")
    hosts = read_hostfile(path)
    worker = ["/opt/venv/bin/python", "-m", "tofu", "run", "mlp", "--save", "/shared/my run/final.params"]
    specs = ssh_specs(worker, 2, 2, hosts, port=9100, cwd="/shared/tofu", env={"TOFU_LAUNCH_DIR": "/shared/logs"},
                      python="/opt/venv/bin/python")
    assert [s.name for s in specs] == ["scheduler", "server0", "server1", "worker0", "worker1"]
    where = {}
    for s in specs:
        ssh, remote = list(s.argv[:-1]), shlex.split(s.argv[-1])
        assert ssh[:4] == ["ssh", "-tt", "-o", "BatchMode=yes"]
        where[s.name] = ssh[-1]
        assert remote[:4] == ["cd", "/shared/tofu", "&&", "env"]
        variables = dict(w.split("=", 1) for w in remote[4:] if "=" in w and not w.startswith("/"))
        argv = [w for w in remote[4:] if w.split("=", 1)[0] not in variables]
        assert variables["DMLC_ROLE"] == s.role
        assert (variables["DMLC_PS_ROOT_URI"], variables["DMLC_PS_ROOT_PORT"]) == ("node1", "9100")
        assert (variables["DMLC_NUM_WORKER"], variables["DMLC_NUM_SERVER"]) == ("2", "2")
        assert variables["DMLC_NODE_HOST"] == {"alice@node1": "node1", "node2": "node2"}[where[s.name]]
        assert variables["TOFU_LAUNCH_DIR"] == "/shared/logs"
        assert variables["MXNET_SUBGRAPH_BACKEND"] == "NONE"
        assert argv == (worker if s.role == "worker" else ["/opt/venv/bin/python", "-c", "import mxnet"])
        assert ("-p" in ssh) == (where[s.name] == "node2") and (ssh[ssh.index("-p") + 1] == "2222" if "-p" in ssh
                                                                else True)
    assert where == {"scheduler": "alice@node1", "server0": "alice@node1", "server1": "node2",
                     "worker0": "alice@node1", "worker1": "node2"}
    with pytest.raises(LaunchError, match="lists 3 hosts; 4 machines need 4"):
        ssh_specs(worker, 4, 1, hosts, port=9100, cwd="/shared/tofu")


def test_plan_machines_bad_batch_is_one_line(capsys):
    rc, out, err = run(capsys, "plan", "mlp", "--machines", "2", "--workers", "2", "--batch", "25")
    assert_one_line_error(rc, out, err, "global batch 25 is not divisible by 2 machines")
    rc, out, err = run(capsys, "plan", "mlp", "--machines", "0", "--workers", "2")
    assert_one_line_error(rc, out, err, "--machines must be at least 1")


def test_plan_inter_machine_bytes_equal_the_kvstore_bytes_of_a_loopback_run(capsys, tmp_path):
    """The planner's two numbers: intra-machine bytes are the plan of one machine's share (batch 24 / 2), the
    inter-machine bytes are what each machine hands the kvstore per step, measured at push and pull."""
    rc, out, err = run(capsys, "plan", "mlp", "--machines", "2", "--workers", "2", "--batch", "24", "--json")
    assert rc == 0, err
    planned = json.loads(out)
    rc, out, err = run(capsys, "plan", "mlp", "--workers", "2", "--batch", "12", "--json")
    assert planned["intra_machine_bytes"] == json.loads(out)["comm_bytes"] == planned["comm_bytes"]
    assert (planned["global_batch"], planned["machine_batch"]) == (24, 12)
    rc, out, err = run(capsys, "plan", "mlp", "--machines", "2", "--workers", "2", "--batch", "24")
    assert rc == 0 and "inter-machine 55.38 KB per machine" in out

    rc, out, err = run(capsys, "launch", "--machines", "2", "--workers", "2", "--log-dir", str(tmp_path),
                       "--timeout", "120", "--", "tofu", "run", "mlp", "--batch", "24", "--steps", "3", "--check",
                       "--json")
    assert rc == 0, err
    doc = json.loads(out.strip().splitlines()[-1])
    assert doc["measured_kvstore_bytes"] == planned["inter_machine_bytes"] == doc["predicted_kvstore_bytes"]
    for m in doc["machine_reports"]:
        assert m["pushed_bytes"] == m["pulled_bytes"] == [planned["inter_machine_pushed_bytes"]] * 3
    assert doc["loss_max_abs_diff"] < 1e-4 and doc["parameter_max_rel_diff"] < 1e-4
    assert doc["replica_max_abs_diff"] == 0.0
    for name in ("scheduler", "server0", "worker0", "worker1"):
        assert (tmp_path / f"{name}.log").is_file()
