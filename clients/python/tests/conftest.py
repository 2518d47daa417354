"""A real rampd for the tests: the binary `swift build` made ($RAMPD_BINARY, else .build/debug/rampd
of this checkout), playing into ALSA's `file` plugin over `null` (raw float samples, paced by the
clock), with its own socket, configuration and recording in a temporary directory. Without the
binary the tests fail; they are never skipped."""

import array
import os
import pathlib
import socket
import struct
import subprocess
import sys
import tempfile
import time
import wave

import pytest

HERE = pathlib.Path(__file__).resolve().parent
CHECKOUT = HERE.parents[2]
# The package from this checkout, unless it is installed (script/test installs it in a venv).
if os.environ.get("RAMPD_CLIENT_INSTALLED") != "1":
    sys.path.insert(0, str(HERE.parent))

RATE = 48_000


def rampd_binary():
    path = os.environ.get("RAMPD_BINARY") or str(CHECKOUT / ".build" / "debug" / "rampd")
    if not os.access(path, os.X_OK):
        pytest.fail(f"no rampd binary at {path}: run `swift build` first (or set RAMPD_BINARY)", pytrace=False)
    return path


def rampctl_binary():
    """The rampctl built beside the rampd under test."""
    path = os.path.join(os.path.dirname(rampd_binary()), "rampctl")
    if not os.access(path, os.X_OK):
        pytest.fail(f"no rampctl binary at {path}: run `swift build` first", pytrace=False)
    return path


def write_configuration(directory, **values):
    """Writes `rampd.toml` and `asound.conf` into `directory` from the templates the Swift tests
    use too (Tests/Fixtures/test-daemon.*), their `{key}`s filled in: `socket` and `recording`
    given, the rest (device, state file, 5 ms period, 20 ms buffer, clock pacing) by default."""
    values = {
        "device": "rampd_py", "state": str(pathlib.Path(directory) / "state.json"),
        "period": "5ms", "buffer": "20ms", "pacing": "clock", "limiter": "-1dBTP", **values,
    }
    for template, name in (("test-daemon.toml", "rampd.toml"), ("test-daemon.asound.conf", "asound.conf")):
        text = (CHECKOUT / "Tests" / "Fixtures" / template).read_text()
        for key, value in values.items():
            text = text.replace("{" + key + "}", str(value))
        (pathlib.Path(directory) / name).write_text(text)


class Daemon:
    def __init__(self, directory):
        self.directory = pathlib.Path(directory)
        self.socket = str(self.directory / "rampd.sock")
        self.recording = self.directory / "played.raw"
        write_configuration(self.directory, socket=self.socket, recording=self.recording)
        environment = {key: value for key, value in os.environ.items() if not key.startswith("RAMPD_")}
        environment["ALSA_CONFIG_PATH"] = f"/usr/share/alsa/alsa.conf:{self.directory / 'asound.conf'}"
        self.log = open(self.directory / "rampd.log", "wb")
        self.process = subprocess.Popen(
            [rampd_binary(), "--config", str(self.directory / "rampd.toml")],
            env=environment, stdout=subprocess.DEVNULL, stderr=self.log,
        )
        deadline = time.monotonic() + 20
        while not self._greets():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"rampd did not start: {(self.directory / 'rampd.log').read_text()}")
            time.sleep(0.01)

    def _greets(self):
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
                probe.settimeout(1)
                probe.connect(self.socket)
                return probe.recv(100).startswith(b'{"hello"')
        except OSError:
            return False

    def stop(self):
        if self.process.poll() is not None:
            return
        self.process.terminate()
        self.process.wait(10)
        self.log.close()

    def played(self, channel=0):
        """One channel of every sample played so far (float32, interleaved stereo)."""
        samples = array.array("f", self.recording.read_bytes())
        return samples[channel::2]

    def constant_file(self, name, seconds, level=0.5):
        """A stereo 16-bit WAV at 48 kHz whose every sample is `level`."""
        path = self.directory / f"{name}.wav"
        value = round(level * 32768)
        frames = struct.pack("<hh", value, value) * int(seconds * RATE)
        with wave.open(str(path), "wb") as file:
            file.setnchannels(2)
            file.setsampwidth(2)
            file.setframerate(RATE)
            file.writeframes(frames)
        return str(path)


def _started_daemon():
    with tempfile.TemporaryDirectory(prefix="rampd-py-") as directory:
        started = Daemon(directory)
        try:
            yield started
        finally:
            started.stop()


@pytest.fixture
def daemon():
    yield from _started_daemon()


@pytest.fixture
def another_daemon():
    """A second rampd, for comparing two runs of the same thing."""
    yield from _started_daemon()


@pytest.fixture
def client(daemon):
    import rampd

    with rampd.connect(daemon.socket) as connection:
        yield connection
