"""A PipeWire of the benchmark's own, as a desktop login has one, with no sound card: a private
XDG_RUNTIME_DIR, a session D-Bus, pipewire, wireplumber and pipewire-pulse, and a null sink
(`rampd-bench-sink`) made with `pw-cli create-node`. Clients given `environment` reach it through
ALSA's `pipewire` and `pulse` PCMs; `record` records what the sink plays with `pw-record`, each
piece read with the CLOCK_MONOTONIC time it arrived, or handed to a consumer and not kept. Standard
library only; as the tests' PipeWireSession does it.

Run as a program (`python3 pipewire_session.py WORK FILE`), it holds a session for a shell script:
it starts one under WORK, writes its runtime directory and environment to FILE (JSON) once it is
up, and stops it on SIGTERM or SIGINT. Another process reaches it with `attach(FILE)`.
"""
import fcntl
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time

SINK = "rampd-bench-sink"


class PipeWireSession:
    def __init__(self, work):
        self.runtime = tempfile.mkdtemp(prefix="pw-", dir=work)
        os.chmod(self.runtime, 0o700)
        r = self.runtime
        self.environment = {k: v for k, v in os.environ.items() if not k.startswith("RAMPD_")}
        self.environment.update({
            "XDG_RUNTIME_DIR": r, "DBUS_SESSION_BUS_ADDRESS": f"unix:path={r}/bus",
            "XDG_CONFIG_HOME": f"{r}/config", "XDG_STATE_HOME": f"{r}/state", "HOME": r,
            "PIPEWIRE_RUNTIME_DIR": r, "PULSE_RUNTIME_PATH": f"{r}/pulse"})
        self.processes = []
        try:
            self._launch("dbus-daemon", "--session", "--nofork", f"--address=unix:path={r}/bus")
            self._wait(lambda: os.path.exists(f"{r}/bus"), "the session bus")
            self.server = self._launch("pipewire")
            self._wait(lambda: os.path.exists(f"{r}/pipewire-0"), "pipewire")
            self._launch("wireplumber")
            self._launch("pipewire-pulse")
            self._wait(lambda: os.path.exists(f"{r}/pulse/native"), "pipewire-pulse")
            made = subprocess.run(
                ["pw-cli", "create-node", "adapter",
                 f"{{ factory.name=support.null-audio-sink node.name={SINK} media.class=Audio/Sink "
                 "object.linger=true audio.position=[FL FR] audio.rate=48000 }"],
                env=self.environment, capture_output=True, timeout=10)
            if made.returncode != 0:
                raise RuntimeError(f"pw-cli create-node: {made.stderr!r}")
            self._wait(lambda: SINK in subprocess.run(
                ["wpctl", "inspect", "@DEFAULT_AUDIO_SINK@"], env=self.environment,
                capture_output=True, text=True, timeout=10).stdout, "the null sink as the default")
        except BaseException:
            self.stop()
            raise

    def _launch(self, *argv):
        log = open(os.path.join(self.runtime, f"{argv[0]}.log"), "w")
        process = subprocess.Popen(argv, env=self.environment, stdout=log, stderr=log, start_new_session=True)
        self.processes.append(process)
        return process

    def _wait(self, ready, what, timeout=15):
        deadline = time.monotonic() + timeout
        while not ready():
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not come up in {self.runtime}")
            time.sleep(0.05)

    def sink_state(self):
        """The null sink's node state (running, idle, suspended), from pw-dump."""
        dump = subprocess.run(["pw-dump"], env=self.environment, capture_output=True, text=True, timeout=10)
        for node in json.loads(dump.stdout or "[]"):
            info = node.get("info") or {}
            if node.get("type") == "PipeWire:Interface:Node" and (info.get("props") or {}).get("node.name") == SINK:
                return info.get("state")
        return None

    def streams(self):
        """Each playback stream's node (pw-dump): its node.name, application.name, the quantum it
        asks for (node.latency) and its state."""
        dump = subprocess.run(["pw-dump"], env=self.environment, capture_output=True, text=True, timeout=10)
        out = []
        for node in json.loads(dump.stdout or "[]"):
            info = node.get("info") or {}
            props = info.get("props") or {}
            if node.get("type") == "PipeWire:Interface:Node" and props.get("media.class") == "Stream/Output/Audio":
                out.append({"node": props.get("node.name"), "application": props.get("application.name"),
                            "latency": props.get("node.latency"), "state": info.get("state")})
        return out

    def record(self, path, consume=None):
        """Starts recording what the sink plays into `path` (raw interleaved stereo float), or,
        with `consume`, handing each piece read to `consume(data)` and keeping neither it nor
        `reads`."""
        return Recording(self, path, consume)

    def stop(self):
        for process in reversed(self.processes):
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
                process.wait()
        self.processes = []
        shutil.rmtree(self.runtime, ignore_errors=True)


class Recording:
    """pw-record writing the sink's raw samples to a pipe that a thread of its own drains,
    noting for each read the CLOCK_MONOTONIC nanoseconds it returned, the first frame it held and
    how many: `reads`. A graph cycle hands pw-record a quantum at once, so a read comes at or
    after the cycle that played its first frame: `sink_clock` in heard-bench.py maps frames to
    time from the earliest of them."""

    FRAME = 8

    def __init__(self, session, path, consume=None):
        self.path = path
        self.consume = consume
        self.reads = []
        log = open(os.path.join(session.runtime, "pw-record.log"), "w")
        self.process = subprocess.Popen(
            ["pw-record", "--target", SINK, "--format", "f32", "--rate", "48000", "--channels", "2", "-"],
            env=session.environment, stdout=subprocess.PIPE, stderr=log, start_new_session=True)
        # A pipe of 1 MiB (5 s of audio): pw-record never waits on a reader the scheduler is late to.
        fcntl.fcntl(self.process.stdout.fileno(), 1031, 1 << 20)  # F_SETPIPE_SZ
        self.thread = threading.Thread(target=self._drain, daemon=True)
        self.thread.start()

    def _drain(self):
        fd = self.process.stdout.fileno()
        if self.consume:
            while data := os.read(fd, 1 << 20):
                self.consume(data)
            return
        received = 0
        with open(self.path, "wb") as out:
            while True:
                data = os.read(fd, 1 << 20)
                now = time.monotonic_ns()
                if not data:
                    return
                first = received // self.FRAME
                received += len(data)
                self.reads.append((now, first, received // self.FRAME - first))
                out.write(data)

    def finish(self):
        """Stops pw-record; the reads, once all it wrote is in `path`."""
        self.process.send_signal(signal.SIGINT)
        self.process.wait(timeout=10)
        self.thread.join(timeout=10)
        return self.reads


def attach(path):
    """The session that `python3 pipewire_session.py WORK FILE` runs, from its FILE: for
    `record` and `sink_state`; `stop` leaves it to the process that holds it."""
    with open(path) as f:
        held = json.load(f)
    session = PipeWireSession.__new__(PipeWireSession)
    session.runtime, session.environment, session.processes = held["runtime"], held["environment"], []
    session.stop = lambda: None
    return session


if __name__ == "__main__":
    import sys

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    session = PipeWireSession(sys.argv[1])
    try:
        with open(sys.argv[2] + ".part", "w") as f:
            json.dump({"runtime": session.runtime, "environment": session.environment}, f)
        os.rename(sys.argv[2] + ".part", sys.argv[2])
        while True:
            signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        session.stop()
