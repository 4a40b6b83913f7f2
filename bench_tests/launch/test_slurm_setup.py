"""ci/slurm/start.sh (which ci/setup.sh runs) beside clusters it did not start, on host 1 of the
namespace hosts (bench_tests/launch/test_two_hosts.py): its own PID namespace, and a private mount
namespace with an empty /etc/slurm, as on a node of a configless site.

The site's cluster is real: a slurmctld with ``enable_configless`` and a slurmd started as
``slurmd --conf-server`` (no slurm.conf on the node; clients read the configuration the slurmd
fetched, under /run/slurm/conf), on ports of its own."""
import os
import re
import shutil
import subprocess

import pytest

from ..components import needs
from .test_two_hosts import NETNS, hosts  # noqa: F401 - fixture

pytestmark = pytest.mark.launch
START = NETNS.with_name("slurm") / "start.sh"

SITE_CONF = """ClusterName=site
SlurmctldHost={host}({addr})
SlurmctldPort=6917
SlurmdPort=6918
SlurmctldParameters=enable_configless
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation={site}/ctld
SlurmdSpoolDir={site}/d
SlurmctldPidFile={site}/slurmctld.pid
SlurmdPidFile={site}/slurmd.pid
SlurmctldLogFile={site}/slurmctld.log
SlurmdLogFile={site}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
MailProg=/bin/true
NodeName={host} NodeAddr={addr} CPUs=1 State=UNKNOWN
PartitionName=site Nodes={host} Default=YES MaxTime=INFINITE State=UP
"""

# Run on host 1 in a private mount namespace. Prints "pids: CTLD D" before and after each run of
# start.sh, its exit status, and what it left in /etc/slurm and its state directory.
SCRIPT = r"""
set -u
site="$1"; start="$2"; host="$3"
mount -t tmpfs tmpfs /etc/slurm
mkdir -p /run/slurm && mount -t tmpfs tmpfs /run/slurm
slurmctld -c -f "$site/slurm.conf" || exit 10
slurmd -c --conf-server "$host:6917" || exit 11
trap 'kill -CONT $(cat "$site/slurmctld.pid"); kill $(cat "$site/slurmd.pid") $(cat "$site/slurmctld.pid")' EXIT
answers() { env -u SLURM_CONF timeout 10 sinfo -h -o %T 2>/dev/null | grep -q '^idle'; }
for _ in $(seq 60); do answers && break; sleep 0.5; done
answers || { echo "site cluster did not come up"; exit 12; }
pids() { echo "pids: $(pgrep -x slurmctld) $(pgrep -x slurmd)"; }

echo "== configless"; pids
env -u SLURM_CONF DLSCALE_SLURM_STATE="$site/ours" bash "$start"; echo "rc: $?"; pids

echo "== not answering"; kill -STOP "$(cat "$site/slurmctld.pid")"
env -u SLURM_CONF DLSCALE_SLURM_STATE="$site/ours" bash "$start"; echo "rc: $?"; pids
echo "etc-slurm: $(ls -A /etc/slurm | tr '\n' ' ')"
echo "state: $(ls -A "$site/ours" 2>/dev/null | tr '\n' ' ')"
kill -CONT "$(cat "$site/slurmctld.pid")"
for _ in $(seq 60); do answers && break; sleep 0.5; done
answers && echo "answers again"
"""


@pytest.fixture(scope="module")
def site(hosts, tmp_path_factory):  # noqa: F811 - the fixture imported above
    """The output of SCRIPT, run once for both tests."""
    for tool in ("slurmctld", "slurmd", "sinfo", "munge"):
        needs("slurm", f"{tool} not found (Debian packages slurm-wlm and munge)" if shutil.which(tool) is None else None)
    munge = subprocess.run("munge -n | unmunge", shell=True, capture_output=True).returncode
    needs("slurm", "munged does not answer (ci/slurm/start.sh starts it)" if munge else None)
    host, addr = f"{hosts['DLSCALE_NETNS_PREFIX']}1", f"{hosts['DLSCALE_NETNS_SUBNET']}.2"
    tmp_path = tmp_path_factory.mktemp("site")
    for part in ("ctld", "d"):
        (tmp_path / part).mkdir()
    (tmp_path / "slurm.conf").write_text(SITE_CONF.format(host=host, addr=addr, site=tmp_path))
    command = [str(NETNS), "exec", "1", "unshare", "--mount", "--propagation", "private", "bash", "-c", SCRIPT,
               "site", str(tmp_path), str(START), host]
    env = dict(hosts, PATH=os.environ["PATH"])
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=240)
    output = done.stdout + done.stderr
    assert done.returncode == 0 and "== configless" in output, output[-3000:]
    return output


def _section(output: str, name: str) -> str:
    return output.split(f"== {name}", 1)[1].split("\n== ", 1)[0]


def test_a_configless_cluster_is_reused_as_it_is(site):
    configless = _section(site, "configless")
    assert "reusing the Slurm cluster that answers without a local configuration (configless)" in configless
    assert "rc: 0" in configless
    before, after = re.findall(r"pids: (.*)", configless)
    assert before == after and len(before.split()) == 2  # both daemons, untouched


def test_a_daemon_it_did_not_start_is_named_and_never_signalled(site):
    """The site's controller stops answering (SIGSTOP): start.sh refuses at once, naming it, writes
    no slurm.conf and starts nothing; a SIGTERM it had sent would have ended the controller on
    SIGCONT, and it answers again."""
    refused = _section(site, "not answering")
    assert "rc: 1" in refused
    assert re.search(r"a slurmctld this script did not start is running \(pid \d+\) and no usable cluster "
                     r"answers", refused), refused
    before = re.findall(r"pids: (.*)", _section(site, "configless"))[-1]
    assert re.findall(r"pids: (.*)", refused) == [before]
    assert "etc-slurm: \n" in refused and "state: \n" in refused
    assert "starting" not in refused
    assert "answers again" in refused
