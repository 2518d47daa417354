#!/usr/bin/env python3
"""Instructions per request: rampd's `set` round trip against nio-floor's, counted by callgrind
(driven by script/bench-instructions).

Instruction counts do not depend on the machine's load, unlike wall-clock latency and CPU time, so
they compare builds on a busy machine. Each server runs under `valgrind --tool=callgrind
--separate-threads=yes`; a client sends benchmark (a)'s request,
`{"id":N,"cmd":"set","key":"master.gain","value":V,"duration":0}`, each connection waiting for its
reply before the next, first from 1 connection, then from 10. Around each run the counters are
zeroed and dumped (`callgrind_control`); an idle period measured the same way gives each thread's
instructions per second when no request comes (rampd's render thread runs all along), which is
subtracted. User-space instructions only: the kernel's work (socket reads and writes, the journal's
`pwrite`) is not counted.
"""
import argparse
import glob
import importlib.util
import os
import queue
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time

_spec = importlib.util.spec_from_file_location(
    "daemon_bench", os.path.join(os.path.dirname(os.path.abspath(__file__)), "daemon-bench.py"))
daemon_bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(daemon_bench)


def drive(path, clients, each):
    """`each` sequential `set` round trips from each of `clients` connections: benchmark (a)'s
    own client (daemon-bench.py's rtt_worker), in this process."""
    results = queue.Queue()
    daemon_bench.rtt_worker("rampd", path, clients, each, threading.Barrier(1), results)
    status, detail, failures = results.get()
    if status != "ok":
        raise RuntimeError(detail)
    if failures:
        raise RuntimeError(f"{failures} requests refused")


def dumps(directory):
    """{dump name: {thread: instructions}} from callgrind's files."""
    found = {}
    for name in glob.glob(os.path.join(directory, "callgrind.out*")):
        with open(name, errors="replace") as f:
            head = f.read(1 << 16)
        trigger = re.search(r"^desc: Trigger: .*?(\w+)\s*$", head, re.M)
        thread = re.search(r"^thread: (\d+)", head, re.M)
        with open(name, errors="replace") as f:
            totals = re.search(r"^(?:summary|totals): (\d+)", f.read(), re.M)
        if trigger and thread and totals:
            found.setdefault(trigger.group(1), {})[int(thread.group(1))] = int(totals.group(1))
    return found


def measure(label, argv, socket_path, work, runs):
    directory = os.path.join(work, label)
    os.makedirs(directory, exist_ok=True)
    log = open(os.path.join(directory, "log"), "w")
    environment = {k: v for k, v in os.environ.items() if not k.startswith("RAMPD_")}
    process = subprocess.Popen(
        ["valgrind", "--tool=callgrind", "--separate-threads=yes",
         f"--callgrind-out-file={directory}/callgrind.out.%p", *argv],
        stdout=log, stderr=log, env=environment, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not os.path.exists(socket_path):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{label} did not start; see {log.name}")
            time.sleep(0.2)
        time.sleep(2)
        drive(socket_path, 1, 50)  # warm-up

        def control(*arguments):
            subprocess.run(["callgrind_control", *arguments, str(process.pid)], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        walls = {}
        for name, clients, each in [("idle", 0, 0)] + runs:
            control("-z")
            start = time.monotonic()
            if clients:
                drive(socket_path, clients, each)
            else:
                time.sleep(5)
            walls[name] = time.monotonic() - start
            control("-d", name)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    found = dumps(directory)
    idle = found.get("idle", {})
    results = {}
    for name, clients, each in runs:
        total = 0.0
        for thread, count in found.get(name, {}).items():
            total += count - idle.get(thread, 0) / walls["idle"] * walls[name]
        results[name] = total / (clients * each)
    return results


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rampd", required=True)
    parser.add_argument("--floor", required=True)
    parser.add_argument("--requests", type=int, default=2000, help="with 1 client")
    parser.add_argument("--each", type=int, default=300, help="per client, with 10 clients")
    args = parser.parse_args()
    runs = [("one", 1, args.requests), ("ten", 10, args.each)]
    work = tempfile.mkdtemp(prefix="rampd-instructions.")
    try:
        conf = os.path.join(work, "rampd.toml")
        with open(conf, "w") as f:
            f.write(f"""[socket]
path = "{work}/rampd.sock"
[output]
device = "null"
pacing = "clock"
[embedded-output]
enabled = false
[limits]
clients = 256
[state]
path = "{work}/state.json"
[log]
level = "notice"
""")
        rampd = measure("rampd", [args.rampd, "--config", conf], f"{work}/rampd.sock", work, runs)
        floor = measure("floor", [args.floor, f"{work}/floor.sock"], f"{work}/floor.sock", work, runs)
        print("instructions per request (callgrind, user space, every thread, idle rate subtracted)")
        print(f"{'':12}{'rampd':>10}{'nio-floor':>12}{'rampd/floor':>13}")
        for name, clients, _ in runs:
            print(f"{clients:>3} client{'s' if clients > 1 else ' '}  {rampd[name]:>10.0f}{floor[name]:>12.0f}"
                  f"{rampd[name] / floor[name]:>13.2f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
