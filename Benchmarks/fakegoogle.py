"""Starting `fake-google` (the test suite's fakes of Google's metadata server, OAuth and IAM
Credentials, as a program) for the benchmarks that sign or fetch through it: keyless.py,
federation.py and access.py; and the agent beside it."""

import os
import subprocess
import threading
import time


def start_fake(fake, *arguments):
    """Starts `fake --port 0 ARGUMENTS... --log-calls yes` and reads its start-up lines up to
    `listening`. Returns the process, those lines as a dict (name -> value), the list its call
    log's lines go into as they come, and the thread reading them (join it once the fake is
    stopped, before reading the list)."""
    process = subprocess.Popen(
        [fake, "--port", "0", *arguments, "--log-calls", "yes"],
        stdout=subprocess.PIPE, text=True, bufsize=1,
    )
    info = {}
    for line in process.stdout:
        name, _, value = line.strip().partition(" ")
        info[name] = value
        if name == "listening":
            break
    # The call log is read as it comes: a pipe left unread fills (64 KiB) and stalls the fake.
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(process.stdout), daemon=True)
    reader.start()
    return process, info, lines, reader


def start_agent(agent, socket_path, config_path, environment):
    """Starts `agent serve` on `socket_path` with `config_path` and `environment` (log level
    warning, stderr discarded) and returns the process once its socket exists (and 0.2 s more)."""
    process = subprocess.Popen([agent, "serve", "--socket", socket_path, "--config", config_path,
                                "--log-level", "warning"], env=environment, stderr=subprocess.DEVNULL)
    for _ in range(200):
        if os.path.exists(socket_path):
            break
        time.sleep(0.05)
    time.sleep(0.2)
    return process
