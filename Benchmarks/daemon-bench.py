#!/usr/bin/env python3
"""rampd against MPD, side by side in one run (driven by script/bench-daemon).

Measures, for both daemons started fresh in a temporary directory:
  (a) request round trip, p50 and p99, for 1, 10 and 100 concurrent clients:
      rampd `set master.gain <v>` with "duration": 0 against MPD `setvol <v>`;
  (b) CPU seconds (utime + stime from /proc/<pid>/stat) to play a WAV: the long file through ALSA
      `null` as fast as each daemon goes (MPD's ALSA output does not pace on `null`; rampd with
      pacing "device"), and the short file in real time by both at once (rampd pacing "clock" on
      ALSA `null`, MPD on its own `null` output with sync "yes"), with rampd's CPU per thread;
  (c) resident memory (VmRSS) idle and while playing;
  (d) rampd only: time from a `set` to the first changed output sample, on an ALSA `file` PCM
      over `null` (raw float), with the default period and buffer.

Everything talks to the daemons' Unix sockets directly. Prints a human-readable report and writes
the raw figures as JSON (--results). Standard library only.
"""
import argparse
import json
import math
import multiprocessing as mp
import os
import random
import resource
import selectors
import signal
import socket
import struct
import subprocess
import threading
import time
import wave

RATE = 48000
TICK = os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------- /proc


def cpu_seconds(pid):
    """utime + stime of every thread of `pid`, in seconds (clock-tick resolution)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # Fields after the command name start at field 3 (state); utime is 14, stime 15.
    return (int(fields[11]) + int(fields[12])) / TICK


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


# ---------------------------------------------------------------- clients


class LineSocket:
    """A blocking Unix-socket client reading lines."""

    def __init__(self, path, timeout=30):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(path)
        self.buffer = b""

    def line(self):
        while b"\n" not in self.buffer:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise RuntimeError("connection closed")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line.decode()

    def send(self, text):
        self.sock.sendall(text.encode() + b"\n")

    def close(self):
        self.sock.close()


class Rampd(LineSocket):
    def __init__(self, path, timeout=30):
        super().__init__(path, timeout)
        self.greeting = json.loads(self.line())
        self.next_id = 0
        self.events = []

    def request(self, cmd, **fields):
        self.next_id += 1
        self.send(json.dumps({"id": self.next_id, "cmd": cmd, **fields}))
        while True:
            reply = json.loads(self.line())
            if "event" in reply:
                self.events.append(reply)
                continue
            if reply.get("id") != self.next_id:
                raise RuntimeError(f"unexpected reply {reply}")
            if not reply.get("ok"):
                raise RuntimeError(f"rampd refused {cmd}: {reply}")
            return reply.get("result")

    def event(self, match, timeout):
        deadline = time.monotonic() + timeout
        for e in self.events:
            if match(e):
                return e
        while time.monotonic() < deadline:
            self.sock.settimeout(max(deadline - time.monotonic(), 0.01))
            e = json.loads(self.line())
            self.events.append(e)
            if match(e):
                return e
        raise RuntimeError(f"no matching event in {timeout} s; saw {self.events[-5:]}")


class Mpd(LineSocket):
    def __init__(self, path, timeout=30):
        super().__init__(path, timeout)
        self.greeting = self.line()
        if not self.greeting.startswith("OK MPD"):
            raise RuntimeError(f"not MPD: {self.greeting}")

    def command(self, text):
        self.send(text)
        lines = {}
        while True:
            line = self.line()
            if line == "OK":
                return lines
            if line.startswith("ACK"):
                raise RuntimeError(f"MPD refused {text!r}: {line}")
            key, _, value = line.partition(": ")
            lines[key] = value


# ---------------------------------------------------------------- daemons


class Daemon:
    def __init__(self, name, argv, socket_path, work, env=None):
        self.name = name
        self.socket_path = socket_path
        log = open(os.path.join(work, f"{name}.log"), "w")
        self.proc = subprocess.Popen(argv, stdout=log, stderr=log, env=env, start_new_session=True)
        with open(os.path.join(work, "pids"), "a") as f:
            f.write(f"{self.proc.pid}\n")
        deadline = time.monotonic() + 20
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {self.proc.returncode}; see {log.name}")
            if os.path.exists(socket_path):
                try:
                    LineSocket(socket_path, 2).close()
                    break
                except OSError:
                    pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not start; see {log.name}")
            time.sleep(0.02)

    @property
    def pid(self):
        return self.proc.pid

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_mpd(mpd, work, music, outputs=(), name="mpd", env=None):
    """MPD on `music`, its outputs: 0 ALSA `null` (as fast as it goes), 1 its own `null` output
    paced in real time (sync), then each of `outputs` (the body of an `audio_output` block), from 2
    on; `env` its environment (a PipeWire session's, for its `pipewire` output)."""
    d = os.path.join(work, name)
    os.makedirs(d, exist_ok=True)
    conf = os.path.join(d, "mpd.conf")
    with open(conf, "w") as f:
        f.write(f"""music_directory "{music}"
db_file "{d}/db"
log_file "{d}/log"
pid_file "{d}/pid"
state_file "{d}/state"
bind_to_address "{d}/mpd.sock"
zeroconf_enabled "no"
auto_update "no"
max_connections "256"
audio_output {{
  type "alsa"
  name "alsa-null"
  device "null"
  mixer_type "software"
}}
audio_output {{
  type "null"
  name "null-realtime"
  sync "yes"
  mixer_type "software"
}}
""")
        for body in outputs:
            f.write(f"audio_output {{\n{body}\n}}\n")
    daemon = Daemon(name, [mpd, "--no-daemon", conf], f"{d}/mpd.sock", work, env)
    daemon.outputs = 2 + len(outputs)
    c = Mpd(daemon.socket_path)
    c.command("update")
    deadline = time.monotonic() + 30
    while "updating_db" in c.command("status"):
        if time.monotonic() > deadline:
            raise RuntimeError("MPD's database update did not finish")
        time.sleep(0.05)
    c.close()
    return daemon


def start_rampd(rampd, work, name, output, extra="", env=None):
    d = os.path.join(work, name)
    os.makedirs(d, exist_ok=True)
    conf = os.path.join(d, "rampd.toml")
    with open(conf, "w") as f:
        f.write(f"""[socket]
path = "{d}/rampd.sock"
[output]
{output}
[embedded-output]
enabled = false
[limits]
clients = 256
[state]
path = "{d}/state.json"
[log]
level = "notice"
{extra}""")
    environment = {k: v for k, v in os.environ.items() if not k.startswith("RAMPD_")}
    environment.update(env or {})
    return Daemon(name, [rampd, "--config", conf], f"{d}/rampd.sock", work, environment)


# ---------------------------------------------------------------- (a) round trips


def rtt_worker(kind, path, connections, requests, barrier, results):
    """One process driving `connections` clients with selectors; each client does `requests`
    sequential round trips. Puts the latencies (ns) in `results`."""
    try:
        socks = []
        for _ in range(connections):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(30)
            for attempt in range(100):  # a full listen backlog refuses a Unix connect at once
                try:
                    s.connect(path)
                    break
                except (BlockingIOError, ConnectionRefusedError):
                    if attempt == 99:
                        raise
                    time.sleep(0.05)
            greeting = b""
            while not greeting.endswith(b"\n"):
                chunk = s.recv(4096)
                if not chunk:
                    raise RuntimeError("closed before the greeting")
                greeting += chunk
            s.setblocking(False)
            socks.append(s)
        sel = selectors.DefaultSelector()
        state = {}
        for index, s in enumerate(socks):
            state[s] = {"n": 0, "t0": 0, "buf": b"", "index": index}
            sel.register(s, selectors.EVENT_READ, s)

        def request(s, n):
            v = (n + state[s]["index"]) % 2
            if kind == "rampd":
                return b'{"id":%d,"cmd":"set","key":"master.gain","value":%s,"duration":0}\n' % (
                    n, b"0.6" if v else b"0.4")
            return b"setvol 60\n" if v else b"setvol 40\n"

        latencies = []
        failures = 0
        barrier.wait()
        for s in socks:
            state[s]["t0"] = time.perf_counter_ns()
            s.send(request(s, 0))
        active = len(socks)
        deadline = time.monotonic() + 120
        while active and time.monotonic() < deadline:
            for key, _ in sel.select(timeout=5):
                s = key.data
                st = state[s]
                chunk = s.recv(65536)
                if not chunk:
                    raise RuntimeError("daemon closed the connection")
                st["buf"] += chunk
                while b"\n" in st["buf"]:
                    line, st["buf"] = st["buf"].split(b"\n", 1)
                    now = time.perf_counter_ns()
                    latencies.append(now - st["t0"])
                    ok = b'"ok":true' in line if kind == "rampd" else line == b"OK"
                    failures += 0 if ok else 1
                    st["n"] += 1
                    if st["n"] < requests:
                        st["t0"] = time.perf_counter_ns()
                        s.send(request(s, st["n"]))
                    else:
                        sel.unregister(s)
                        active -= 1
        if active:
            raise RuntimeError(f"{active} clients did not finish in time")
        for s in socks:
            s.close()
        results.put(("ok", latencies, failures))
    except Exception as error:  # reported by the parent
        barrier.abort()
        results.put(("error", repr(error), 0))


def percentile(values, p):
    ordered = sorted(values)
    rank = max(int(math.ceil(p / 100 * len(ordered))) - 1, 0)
    return ordered[rank]


def round_trips(kind, path, pid, clients, requests_per_client, per_process=10):
    processes = max(1, math.ceil(clients / per_process))
    split = [clients // processes + (1 if i < clients % processes else 0) for i in range(processes)]
    barrier = mp.Barrier(processes + 1)
    results = mp.Queue()
    workers = [mp.Process(target=rtt_worker, args=(kind, path, n, requests_per_client, barrier, results))
               for n in split]
    for w in workers:
        w.start()
    try:
        barrier.wait(timeout=60)
    except threading.BrokenBarrierError:
        status, data, _ = results.get(timeout=10)
        raise RuntimeError(f"{kind} client failed before the start: {data}")
    start = time.perf_counter()
    daemon_cpu0 = cpu_seconds(pid)
    latencies, failures = [], 0
    for _ in workers:
        status, data, failed = results.get(timeout=180)
        if status != "ok":
            raise RuntimeError(f"{kind} client failed: {data}")
        latencies += data
        failures += failed
    wall = time.perf_counter() - start
    daemon_cpu = cpu_seconds(pid) - daemon_cpu0
    for w in workers:
        w.join(10)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    if failures:
        raise RuntimeError(f"{kind}: {failures} requests refused")
    return {
        "clients": clients, "requests": len(latencies), "processes": processes,
        "p50_us": percentile(latencies, 50) / 1e3, "p99_us": percentile(latencies, 99) / 1e3,
        "max_us": max(latencies) / 1e3, "per_second": len(latencies) / wall, "latencies": latencies,
        # Cores busy during the run: the daemon, and every client process so far (cumulative
        # children's time, so the caller takes differences).
        "daemon_cores": daemon_cpu / wall, "wall_s": wall,
        "children_cpu_s": children.ru_utime + children.ru_stime,
    }


# ---------------------------------------------------------------- (b), (c) playback


def sample_rss(pid, until, interval=0.1):
    """Samples VmRSS until `until()` is true; returns the highest value in KiB."""
    peak = 0
    while not until():
        peak = max(peak, rss_kib(pid))
        time.sleep(interval)
    return max(peak, rss_kib(pid))


def play_mpd(daemon, track, output=0):
    """Plays `track` on MPD output `output` (0: ALSA null, as fast as it goes; 1: MPD's null output
    paced in real time; from 2, those start_mpd was given), the others disabled, software volume
    at 50%; CPU and wall seconds from `play` to the stop."""
    c = Mpd(daemon.socket_path)
    c.command("stop")
    c.command("clear")
    c.command(f"enableoutput {output}")
    for other in range(daemon.outputs):
        if other != output:
            c.command(f"disableoutput {other}")
    c.command(f'add "{track}"')
    c.command("setvol 50")
    c.command("single 1")
    watcher = Mpd(daemon.socket_path)
    cpu0, t0 = cpu_seconds(daemon.pid), time.monotonic()
    c.command("play")
    # The watcher sleeps in `idle player` (MPD is not polled) while we sample RSS; a status once a
    # second covers an end that came before the idle.
    watcher.send("idle player")
    watcher.sock.settimeout(0.1)
    state = {"done": False, "checked": time.monotonic()}

    def done():
        if state["done"]:
            return True
        try:
            line = watcher.line()
            while line != "OK":
                line = watcher.line()
            idle = True
        except socket.timeout:
            idle = False
            if time.monotonic() - state["checked"] < 1:
                return False
        state["checked"] = time.monotonic()
        if c.command("status")["state"] == "stop":
            state["done"] = True
            return True
        if idle:
            watcher.send("idle player")
        return False

    peak = sample_rss(daemon.pid, done)
    cpu1, t1 = cpu_seconds(daemon.pid), time.monotonic()
    c.close()
    watcher.close()
    return {"cpu_s": cpu1 - cpu0, "wall_s": t1 - t0, "rss_playing_kib": peak}


def tids(pid):
    return set(int(t) for t in os.listdir(f"/proc/{pid}/task"))


def play_rampd(daemon, track, seconds, count_underruns=False, interval=0.1):
    """Plays `track` with a 2 s fade-in and a 3 s fade-out ending with the file; returns CPU and wall
    seconds from the request to the stream's end. With `count_underruns`, also subscribes to
    underrun events (which costs the daemon a line per event) and counts those that arrive.

    The end is the stream-ended event or, whichever comes first, the exit of the stream's decoder
    thread (the thread `play` started): a safety net from the time a render thread that outran
    its decoder (pacing "device" on `null`) flooded the event queue with underruns; it now waits
    for the decoder, and the underrun count says whether it had to play silence instead."""
    c = Rampd(daemon.socket_path)
    kinds = ["stream-ended", "animation-finished"] + (["underrun"] if count_underruns else [])
    c.request("subscribe", events=kinds)
    threads_before = tids(daemon.pid)
    cpu0, t0 = cpu_seconds(daemon.pid), time.monotonic()
    # One batch, so the stream's 2 s fade-in and the 3 s fade-out of master.gain (placed to end with
    # the file) start on the same sample.
    fade_out = {"type": "basic", "from": 1, "to": 0, "beginTime": seconds - 3, "duration": 3,
                "timingFunction": "linear", "fillMode": "forwards"}
    c.request("batch", commands=[
        {"cmd": "set", "key": "master.gain", "value": 1, "duration": 0},
        {"cmd": "play", "path": track, "stream": "bench", "fadeIn": 2},
        {"cmd": "animate", "key": "master.gain", "name": "fade-out", "animation": fade_out},
    ])
    decoder = tids(daemon.pid) - threads_before
    c.sock.setblocking(False)
    ended = {}
    state = {"underruns": 0}

    def done():
        while True:  # take whatever events have arrived, without waiting
            try:
                chunk = c.sock.recv(1 << 20)
            except BlockingIOError:
                break
            if not chunk:
                raise RuntimeError("rampd closed the connection")
            c.buffer += chunk
        while b"\n" in c.buffer:
            line, c.buffer = c.buffer.split(b"\n", 1)
            e = json.loads(line)
            if e.get("event") == "underrun":
                state["underruns"] += 1
                continue
            c.events.append(e)
            if e.get("event") == "stream-ended" and e.get("stream") == "bench":
                ended.update(e)
        if ended:
            return True
        if decoder and not (decoder & tids(daemon.pid)):
            ended["reason"] = "(decoder thread ended; no stream-ended event yet)"
            return True
        return False

    peak = sample_rss(daemon.pid, done, interval)
    cpu1, t1 = cpu_seconds(daemon.pid), time.monotonic()
    finished = [e for e in c.events if e.get("event") == "animation-finished" and e.get("name") == "fade-out"]
    c.close()
    result = {"cpu_s": cpu1 - cpu0, "wall_s": t1 - t0, "rss_playing_kib": peak, "reason": ended.get("reason"),
              "fade_out_finished_first": bool(finished), "decoder_threads": len(decoder)}
    if count_underruns:
        result["underrun_blocks"] = state["underruns"]
    return result


def thread_cpu(pid, runs=None, switches=None):
    """CPU seconds of each thread (schedstat, nanosecond resolution), by thread id. With a dict as
    `runs`, also fills it with each thread's count of times it ran (schedstat's third field: its
    wake-ups, plus the preemptions it resumed from); with one as `switches`, with its voluntary
    context switches (its wake-ups alone)."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                fields = f.read().split()
            if switches is not None:
                with open(f"/proc/{pid}/task/{tid}/status") as f:
                    switches[int(tid)] = next(int(line.split()[1]) for line in f
                                              if line.startswith("voluntary_ctxt_switches"))
            out[int(tid)] = (name, int(fields[0]) / 1e9)
            if runs is not None:
                runs[int(tid)] = int(fields[2])
        except (FileNotFoundError, ProcessLookupError, StopIteration):
            pass
    return out


def threads(pid):
    """Per thread: name, CPU seconds (schedstat), voluntary context switches (its wake-ups)."""
    switches = {}
    cpu = thread_cpu(pid, switches=switches)
    return {tid: (name, seconds, switches[tid]) for tid, (name, seconds) in cpu.items() if tid in switches}


def rates(before, after, seconds):
    """From two `threads` snapshots: (tid, name, CPU ms per second, wake-ups per second) for each
    thread alive at both ends."""
    return [(tid, name, (cpu - before[tid][1]) / seconds * 1e3, (switches - before[tid][2]) / seconds)
            for tid, (name, cpu, switches) in sorted(after.items()) if tid in before]


def thread_rates(before, after, seconds):
    """Per thread, from two (cpu, runs) snapshots: (tid, name, CPU ms per second, runs per second)."""
    (cpu0, runs0), (cpu1, runs1) = before, after
    return [(tid, name, round((cpu - cpu0.get(tid, (name, 0))[1]) / seconds * 1e3, 3),
             round((runs1.get(tid, 0) - runs0.get(tid, 0)) / seconds, 1))
            for tid, (name, cpu) in sorted(cpu1.items())]


def idle_cpu(pid, seconds):
    """CPU seconds per second over `seconds`, summed over the threads (schedstat: finer than the
    100 Hz ticks of /proc/<pid>/stat, which matters at a fraction of a percent)."""
    before = thread_cpu(pid)
    time.sleep(seconds)
    after = thread_cpu(pid)
    return sum(cpu - before.get(tid, (name, 0))[1] for tid, (name, cpu) in after.items()) / seconds


# ---------------------------------------------------------------- (d) set → first changed sample


def write_constant_wav(path, seconds, level=0.5):
    """16-bit stereo at `level` (0.5 is exactly 16384)."""
    frame = struct.pack("<hh", int(level * 32768), int(level * 32768))
    with wave.open(path, "wb") as w:
        w.setnchannels(2)
        w.setsampwidth(2)
        w.setframerate(RATE)
        chunk = frame * RATE
        for _ in range(int(seconds)):
            w.writeframes(chunk)


def set_latency(rampd, work, tries):
    d = os.path.join(work, "rampd-latency")
    os.makedirs(d, exist_ok=True)
    recording = os.path.join(d, "played.raw")
    asound = os.path.join(d, "asound.conf")
    with open(asound, "w") as f:
        f.write(f'pcm.rampd_bench {{ type file; slave.pcm null; file "{recording}"; format raw }}\n')
    seconds = int(tries * 0.2 + 10)
    constant = os.path.join(d, "constant.wav")
    write_constant_wav(constant, seconds)
    daemon = start_rampd(
        rampd, work, "rampd-latency", 'device = "rampd_bench"\nformat = "float"\npacing = "clock"',
        env={"ALSA_CONFIG_PATH": f"/usr/share/alsa/alsa.conf:{asound}"})
    try:
        c = Rampd(daemon.socket_path)
        output = c.request("status")["output"]
        period, buffer = output["periodFrames"], output["bufferFrames"]
        c.request("set", key="master.gain", value=1, duration=0)
        c.request("play", path=constant, stream="constant")
        time.sleep(1.0)
        rng = random.Random(7)
        records = []
        value = 1.0
        for i in range(tries):
            ts0 = time.monotonic()
            n = c.request("status")["sample"]
            ts1 = time.monotonic()
            time.sleep(rng.uniform(0.02, 0.06))  # a random phase against the period
            value = 0.6 if value == 1.0 else 1.0
            t0 = time.monotonic()
            c.request("set", key="master.gain", value=value, duration=0)
            t1 = time.monotonic()
            records.append({"status_send": ts0, "status_reply": ts1, "status_sample": n,
                            "send": t0, "reply": t1, "value": value})
            time.sleep(0.08)
        time.sleep(0.3)
        c.request("stop", fade=0.01)
        c.close()
    finally:
        daemon.stop()  # drains and closes the file PCM
    with open(recording, "rb") as f:
        data = f.read()
    left = memoryview(data)[: len(data) // 8 * 8].cast("f")[0::2]
    return analyse_latency(records, left, period, buffer)


def analyse_latency(records, left, period, buffer):
    """Finds each set's first changed sample and maps the send time to the sample being played.

    The model, from AlsaPCMOutput.secondsUntilWritable and Player.renderLoop (clock pacing): the
    frames written are kept between zero and one buffer ahead of the wall clock counted from the
    first write (the anchor), so the sample heard at time t is (t - anchor) * rate. The render
    thread waits before it renders a block, taking commands as they arrive; a command lands on the
    next block's first sample N, the frames written when it is taken, at a time t between its send
    and its reply; `status` reports such an N too (the next block's first sample, published once
    that block fits). So 0 <= N - (t - anchor) * rate <= buffer, and each round trip brackets the
    anchor: send - N/rate <= anchor <= reply - (N - buffer)/rate. The latest anchor the data
    allows puts the playhead earliest: it gives an upper bound of each latency. (The model of
    earlier runs, a command taken at a block start and replied to after the block's write, no
    longer holds since commands are taken while waiting, commit 830c775: its bounds were up to a
    period too low.)
    """
    for r in records:
        expected = 0.5 * r["value"]
        start = r["status_sample"]
        i = start
        while i < len(left) and abs(left[i] - expected) > 1e-6:
            i += 1
        if i >= len(left):
            raise RuntimeError(f"the change to {r['value']} is not in the recording")
        # Everything between the status sample and the change must be the previous level.
        before = left[start:i]
        if any(abs(x - (0.5 * (1.6 - r["value"]))) > 1e-6 for x in before):
            raise RuntimeError(f"unexpected samples before the change to {r['value']} (an underrun?)")
        r["changed"] = i
    lows = [r["status_send"] - r["status_sample"] / RATE for r in records]
    lows += [r["send"] - r["changed"] / RATE for r in records]
    highs = [r["status_reply"] - (r["status_sample"] - buffer) / RATE for r in records]
    highs += [r["reply"] - (r["changed"] - buffer) / RATE for r in records]
    low, high = max(lows), min(highs)
    consistent = low <= high + 1e-4
    # The latest anchor the data allows puts the playhead earliest: the latency's upper bound.
    anchor = high
    latencies = sorted((r["changed"] / RATE + anchor - r["send"]) for r in records)
    lower = sorted((r["changed"] / RATE + low - r["send"]) for r in records)
    sets = sorted(r["reply"] - r["send"] for r in records)
    return {
        "period_frames": period, "buffer_frames": buffer, "tries": len(records),
        "anchor_uncertainty_ms": (high - low) * 1e3, "model_consistent": consistent,
        "median_ms": latencies[len(latencies) // 2] * 1e3, "max_ms": latencies[-1] * 1e3,
        "min_ms": latencies[0] * 1e3,
        "median_lower_ms": lower[len(lower) // 2] * 1e3, "max_lower_ms": lower[-1] * 1e3,
        "bound_ms": (period + buffer) / RATE * 1e3,
        "set_round_trip_median_ms": sets[len(sets) // 2] * 1e3,
    }


# ---------------------------------------------------------------- main


def realtime(args, results, rampd, mpd, say):
    """(b) in real time, both at once (each keeps a small fraction of a core busy): rampd paced by
    the clock on ALSA `null`, MPD on its own `null` output paced in real time (sync "yes"). Both
    daemons' CPU and wake-ups per thread over the middle of the playback."""
    say(f"rampd and MPD play {args.short_seconds:g} s in real time ...")
    mpd_realtime = {}
    mpd_thread = threading.Thread(
        target=lambda: mpd_realtime.update(play_mpd(mpd, os.path.basename(args.short_track), output=1)))
    mpd_thread.start()
    # Per-thread CPU over the middle of the playback (the decoder thread ends with the stream).
    snapshots = []

    def snapshot():
        t = time.monotonic()
        rampd_runs, mpd_runs = {}, {}
        rampd_cpu, mpd_cpu = thread_cpu(rampd.pid, rampd_runs), thread_cpu(mpd.pid, mpd_runs)
        snapshots.append((t, (rampd_cpu, rampd_runs), (mpd_cpu, mpd_runs)))

    window = (min(5, args.short_seconds / 4), max(args.short_seconds - 5, args.short_seconds * 3 / 4))
    timers = [threading.Timer(t, snapshot) for t in window]
    for timer in timers:
        timer.start()
    results["rampd_realtime"] = play_rampd(rampd, args.short_track, args.short_seconds, count_underruns=True)
    for timer in timers:
        timer.join()
    mpd_thread.join()
    if not mpd_realtime:
        raise RuntimeError("MPD's real-time playback failed (see the traceback above)")
    results["mpd_realtime"] = mpd_realtime
    (t0, rampd0, mpd0), (t1, rampd1, mpd1) = sorted(snapshots, key=lambda x: x[0])
    # Thread ids in creation order; the render, decoder and recovery threads name themselves.
    rates = thread_rates(rampd0, rampd1, t1 - t0)
    results["rampd_realtime"]["threads_ms_per_s"] = [(tid, name, ms) for tid, name, ms, _ in rates]
    results["rampd_realtime"]["threads"] = rates
    results["mpd_realtime"]["threads"] = thread_rates(mpd0, mpd1, t1 - t0)
    say(f"mpd real time: {mpd_realtime}")
    say(f"rampd real time: {results['rampd_realtime']}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rampd", required=True)
    parser.add_argument("--mpd", default="/usr/bin/mpd")
    parser.add_argument("--floor", help="nio-floor: SwiftNIO answering every line with a fixed reply, "
                        "timed beside the daemons in (a) as the transport's floor")
    parser.add_argument("--work", required=True, help="a temporary directory (left for the caller to remove)")
    parser.add_argument("--track", required=True, help="the long WAV, inside a music directory")
    parser.add_argument("--seconds", type=float, required=True, help="its length")
    parser.add_argument("--short-track", required=True, help="the WAV played in real time, same directory")
    parser.add_argument("--short-seconds", type=float, required=True, help="its length")
    parser.add_argument("--results", required=True)
    parser.add_argument("--tries", type=int, default=50)
    parser.add_argument("--before", help="another rampd build, measured beside --rampd in (a) (kind rampd-before)")
    parser.add_argument("--only", choices=["realtime", "latency", "rtt"],
                        help="realtime: only (b) in real time (both daemons), with CPU and wake-ups per thread; "
                        "latency: only (d); rtt: only (a), with the floor")
    args = parser.parse_args()
    mp.set_start_method("fork")
    work, music = args.work, os.path.dirname(args.track)
    results = {"rtt": []}
    say = lambda *a: print(*a, flush=True)

    if args.only == "latency":
        results["latency"] = set_latency(args.rampd, work, args.tries)
        say(f"set latency: {results['latency']}")
        with open(args.results, "w") as f:
            json.dump(results, f, indent=1)
        return
    # (c) idle, then (a): both daemons idle; rampd on `null` paced by the clock (what `auto` picks).
    mpd = start_mpd(args.mpd, work, music)
    rampd = start_rampd(args.rampd, work, "rampd", 'device = "null"\npacing = "clock"')
    floor = None
    if args.floor and args.only in (None, "rtt"):
        path = os.path.join(work, "floor.sock")
        floor = Daemon("floor", [args.floor, path], path, work)
    before = None
    if args.before and args.only in (None, "rtt"):
        before = start_rampd(args.before, work, "rampd-before", 'device = "null"\npacing = "clock"')
    if args.only == "realtime":
        try:
            time.sleep(1.0)
            realtime(args, results, rampd, mpd, say)
        finally:
            rampd.stop()
            mpd.stop()
        with open(args.results, "w") as f:
            json.dump(results, f, indent=1)
        return
    try:
        time.sleep(1.0)
        results["idle"] = {
            "rampd_rss_kib": rss_kib(rampd.pid), "mpd_rss_kib": rss_kib(mpd.pid),
            "rampd_cpu_per_s": idle_cpu(rampd.pid, 3), "mpd_cpu_per_s": idle_cpu(mpd.pid, 3),
        }
        say(f"idle: {results['idle']}")
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        children_cpu = children.ru_utime + children.ru_stime
        # Several rounds, the daemons taking turns to go first, their latencies pooled: which cores
        # the scheduler gives a client and its daemon (the same or not) sways a single round.
        rounds = int(os.environ.get("RTT_ROUNDS", "3"))
        servers = ([("rampd", rampd), ("mpd", mpd)] + ([("floor", floor)] if floor else [])
                   + ([("rampd-before", before)] if before else []))
        for clients, each in [(1, 1000), (10, 200), (100, 30)]:
            pooled = {kind: [] for kind, _ in servers}
            totals = {kind: {"wall_s": 0.0, "daemon_s": 0.0, "clients_s": 0.0} for kind in pooled}
            for round_number in range(rounds):
                # Each goes first in turn: the order rotates by one every round.
                shift = round_number % len(servers)
                for kind, daemon in servers[shift:] + servers[:shift]:
                    # The floor speaks rampd's protocol.
                    r = round_trips("mpd" if kind == "mpd" else "rampd", daemon.socket_path, daemon.pid, clients, each)
                    pooled[kind] += r["latencies"]
                    totals[kind]["wall_s"] += r["wall_s"]
                    totals[kind]["daemon_s"] += r["daemon_cores"] * r["wall_s"]
                    totals[kind]["clients_s"] += r["children_cpu_s"] - children_cpu
                    children_cpu = r["children_cpu_s"]
            for kind in pooled:
                latencies, t = pooled[kind], totals[kind]
                r = {"daemon": kind, "clients": clients, "requests": len(latencies), "rounds": rounds,
                     "p50_us": percentile(latencies, 50) / 1e3, "p99_us": percentile(latencies, 99) / 1e3,
                     "max_us": max(latencies) / 1e3, "per_second": len(latencies) / t["wall_s"],
                     "daemon_cores": t["daemon_s"] / t["wall_s"], "client_cores": t["clients_s"] / t["wall_s"]}
                results["rtt"].append(r)
                say(f"round trip {kind:5} {clients:3} clients: p50 {r['p50_us']:9.1f} us  p99 {r['p99_us']:9.1f} us"
                    f"  max {r['max_us']:9.1f} us ({r['requests']} requests in {rounds} rounds,"
                    f" {r['per_second']:.0f}/s; cores busy: daemon {r['daemon_cores']:.2f},"
                    f" clients {r['client_cores']:.2f})")
        if floor:
            floor.stop()
        if before:
            before.stop()
        if args.only == "rtt":
            mpd.stop()
            with open(args.results, "w") as f:
                json.dump(results, f, indent=1)
            return
        realtime(args, results, rampd, mpd, say)
    finally:
        rampd.stop()

    # (b) and (c) playing: MPD through ALSA `null` (it goes as fast as the decoder, not in real time).
    try:
        results["mpd_play"] = play_mpd(mpd, os.path.basename(args.track))
        say(f"mpd play: {results['mpd_play']}")
        results["mpd_play_short"] = play_mpd(mpd, os.path.basename(args.short_track))
        say(f"mpd play short: {results['mpd_play_short']}")
    finally:
        mpd.stop()
    # rampd with pacing = "device" on `null`: the device takes audio as fast as it comes, so rampd
    # plays as fast as its decoder goes (and waits for it rather than play silence).
    player = start_rampd(args.rampd, work, "rampd-play", 'device = "null"\npacing = "device"')
    try:
        period = Rampd(player.socket_path).request("status")["output"]["periodFrames"]
        time.sleep(1.0)
        results["rampd_device_idle"] = {"rss_kib": rss_kib(player.pid), "cpu_per_s": idle_cpu(player.pid, 1),
                                        "period_frames": period}
        results["rampd_play"] = play_rampd(player, args.track, args.seconds, interval=0.005)
        say(f"rampd play: {results['rampd_play']}")
        # Again, only to count the blocks the render thread found the decoder behind.
        counted = play_rampd(player, args.track, args.seconds, count_underruns=True, interval=0.005)
        results["rampd_play"]["underrun_blocks"] = counted["underrun_blocks"]
        results["rampd_play"]["period_frames"] = results["rampd_device_idle"]["period_frames"]
        say(f"rampd play, counting underruns: {counted}")
    finally:
        player.stop()

    # (d)
    results["latency"] = set_latency(args.rampd, work, args.tries)
    say(f"set latency: {results['latency']}")
    with open(args.results, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
