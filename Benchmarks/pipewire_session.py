"""A PipeWire of the benchmark's own, as a desktop login has one, with no sound card: a private
XDG_RUNTIME_DIR, a session D-Bus, pipewire, wireplumber and pipewire-pulse, and a null sink
(`rampd-bench-sink`) made with `pw-cli create-node`. Clients given `environment` reach it through
ALSA's `pipewire` and `pulse` PCMs. Standard library only; as the tests' PipeWireSession does it.
"""
import json
import os
import shutil
import signal
import subprocess
import tempfile
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

    def stop(self):
        for process in reversed(self.processes):
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
                process.wait()
        self.processes = []
        shutil.rmtree(self.runtime, ignore_errors=True)
