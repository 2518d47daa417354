#!/usr/bin/env python3
"""When a change is heard, and what an idle daemon costs (driven by script/bench-heard).

Measures, in one run:
  (a) rampd: time from sending a `set` to the first changed sample *heard*, on the clocked test
      device (Tests/Fixtures/pcm_clocked.c: an ALSA ioplug PCM that consumes its ring in real
      time and records when it consumed each frame), 10 ms period: without rewind (output.rewind
      "off") with a 50 ms and a 200 ms buffer, against the buffer (its bound), and with rewind
      ("on") with a 50 ms, a 200 ms and a 1 s buffer, against the rewind margin; and through
      ALSA's `pipewire` and `pulse` PCMs into a PipeWire of its own (pipewire_session.py), with a
      50 ms and a 100 ms buffer, recorded at its null sink with pw-record (`sink_clock` says when
      the sink played each frame, and how well it knows);
  (b) rampd: a `set` with `at` (1 s ahead, wall clock): how far from that time it is heard, on
      each of those;
  (r) `rewind` "on" (forced) against "off" through `pipewire`, sets while processes spin at
      normal priority: glitches at the sink, underruns, rewinds, `set` → heard;
  (c) idle, nothing playing: CPU (% of a core) and wake-ups per second, summed over all threads
      (schedstat), of rampd on the clocked device (pacing "device"), rampd on ALSA `null` (pacing
      "clock"), rampd on its embedded output, rampd through ALSA's `pipewire` and `pulse` PCMs
      into a PipeWire of its own (pipewire_session.py) with PipeWire itself and its sink's state,
      and MPD 0.23, over the same seconds.

Reuses daemon-bench.py's daemons and clients. Prints a report and writes the raw figures as JSON
(--results). Standard library only.
"""
import argparse
import importlib.util
import json
import os
import random
import struct
import subprocess
import sys
import threading
import time

here = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("daemon_bench", os.path.join(here, "daemon-bench.py"))
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)
spec = importlib.util.spec_from_file_location("pipewire_session", os.path.join(here, "pipewire_session.py"))
pipewire = importlib.util.module_from_spec(spec)
spec.loader.exec_module(pipewire)

RATE = 48000


def percentile(values, p):
    ordered = sorted(values)
    return ordered[min(int(round(p / 100 * (len(ordered) - 1))), len(ordered) - 1)]


def read_recording(raw, times):
    with open(raw, "rb") as f:
        data = f.read()
    left = memoryview(data)[: len(data) // 8 * 8].cast("f")[0::2]
    with open(times, "rb") as f:
        log = f.read()
    runs = [struct.unpack_from("<qqq", log, i) for i in range(0, len(log) // 24 * 24, 24)]
    return left, runs


def heard_at(runs, frame, ppm=0.0):
    """CLOCK_MONOTONIC seconds at which `frame` was consumed."""
    lo, hi = 0, len(runs) - 1
    while lo <= hi:
        mid = (lo + hi) // 2
        first, ns, count = runs[mid]
        if frame < first:
            hi = mid - 1
        elif frame >= first + count:
            lo = mid + 1
        else:
            return (ns + (frame - first) / (RATE * (1 + ppm * 1e-6)) * 1e9) / 1e9
    raise RuntimeError(f"frame {frame} not in the recording's times")


def clocked_daemon(args, work, name, buffer=None, ppm=0, rewind="off", rampd=None):
    """rampd (`args.rampd`, or `rampd`) on the clocked device. With `buffer`, that buffer, also
    when it rewinds (rewind-buffer 0), and a 10 ms period; without, the daemon's defaults (its
    200 ms rewind buffer when it rewinds). rewind "on": the clocked device plays from its ring as
    it goes ("auto" rewinds on sound cards only)."""
    d = os.path.join(work, name)
    os.makedirs(d, exist_ok=True)
    raw, times = os.path.join(d, "played.raw"), os.path.join(d, "played.times")
    asound = os.path.join(d, "asound.conf")
    with open(asound, "w") as f:
        f.write(f'pcm_type.rampd_clocked {{ lib "{args.plugin}" }}\n'
                f'pcm.rampd_heard {{ type rampd_clocked; file "{raw}"; times "{times}"; ppm {ppm} }}\n')
    output = f'device = "rampd_heard"\nformat = "float"\npacing = "device"\nrewind = "{rewind}"'
    if buffer is not None:
        output += f"\nperiod = 0.01\nbuffer = {buffer}\nrewind-buffer = 0"
    daemon = bench.start_rampd(rampd or args.rampd, work, name, output,
                               env={"ALSA_CONFIG_PATH": f"/usr/share/alsa/alsa.conf:{asound}"})
    return daemon, raw, times


def send_sets(c, constant, tries, pause):
    """Plays `constant` at master.gain 1, then, 1.5 s later, `tries` sets of master.gain to 0.6
    and 1.0 in turn, each after a random 20–60 ms (a random phase against the period) and
    followed by `pause` seconds: (send time, value) of each."""
    c.request("set", key="master.gain", value=1, duration=0)
    c.request("play", path=constant, stream="constant")
    time.sleep(1.5)
    rng = random.Random(7)
    sets, value = [], 1.0
    for _ in range(tries):
        time.sleep(rng.uniform(0.02, 0.06))
        value = 0.6 if value == 1.0 else 1.0
        t0 = time.monotonic()
        c.request("set", key="master.gain", value=value, duration=0)
        sets.append((t0, value))
        time.sleep(pause)
    return sets


def send_scheduled(c, value, count, buffer):
    """`count` sets of master.gain, alternating from `value`, each with `at` one second ahead and
    heard before the next: (due time, value) of each."""
    scheduled = []
    for _ in range(count):
        value = 0.6 if value == 1.0 else 1.0
        # Due one second after the daemon receives it: after the send, within the transit.
        t0 = time.monotonic()
        c.request("set", key="master.gain", value=value, duration=0, at=1.0, ack="scheduled")
        scheduled.append((t0 + 1.0, value))
        time.sleep(1.0 + buffer + 0.1)
    return scheduled


def finder(left, runs):
    """heard(after, value): when the first frame at `value` (× the file's 0.5) heard from `after`
    on was heard in the recording; each search goes on from where the last one ended."""
    position = [0]

    def heard(after, value):
        start = position[0]
        while start < len(left) and heard_at(runs, start) < after:
            start += 1
        i = start
        while i < len(left) and abs(left[i] - 0.5 * value) > 1e-6:
            i += 1
        if i >= len(left):
            raise RuntimeError(f"the change to {value} is not in the recording")
        position[0] = i
        return heard_at(runs, i)

    return heard


def drive(daemon, args, constant, buffer):
    """The sets and the scheduled changes sent to one daemon, with its status before and after;
    then a stop that lets the device play out."""
    c = bench.Rampd(daemon.socket_path)
    output = c.request("status")["output"]
    sets = send_sets(c, constant, args.tries, buffer + 0.05)
    scheduled = send_scheduled(c, sets[-1][1], args.scheduled, buffer)
    status = c.request("status")["output"]
    c.request("stop", fade=0.01)
    time.sleep(buffer + 0.1)
    c.close()
    return output, sets, scheduled, status


def set_to_heard(args, work, buffer, rewind, constant, say):
    """(a) and (b) on one daemon with a `buffer`-second buffer, rewind "on" or "off"."""
    name = f"rampd-heard-{int(buffer * 1000)}ms-rewind-{rewind}"
    load = load_average()
    daemon, raw, times = clocked_daemon(args, work, name, buffer, rewind=rewind)
    try:
        output, sets, scheduled, status = drive(daemon, args, constant, buffer)
    finally:
        daemon.stop()
    result = {"device": "clocked test device", "buffer_s": buffer, "load_average_at_start": load,
              **heard_figures(finder(*read_recording(raw, times)), sets, scheduled, output, status)}
    say(f"{name}: {result}")
    return result


def heard_figures(heard, sets, scheduled, output, status):
    """From a recording's `heard` (finder): `set` → heard and `at` → heard, with the output's
    `status` before and after."""
    latencies = [heard(t0, value) - t0 for t0, value in sets]
    errors = [heard(due - 0.5, value) - due for due, value in scheduled]
    return {"kind": output.get("kind"), "rewind": status.get("rewind"), "rewinds": status.get("rewinds"),
            "rewind_margin_ms": 1e3 * status.get("rewindMargin", 0), "buffer_frames": output["bufferFrames"],
            "period_frames": output["periodFrames"],
            "median_ms": 1e3 * percentile(latencies, 50), "p99_ms": 1e3 * percentile(latencies, 99),
            "max_ms": 1e3 * max(latencies), "min_ms": 1e3 * min(latencies), "tries": len(latencies),
            "at_error_ms": [round(1e3 * e, 3) for e in errors],
            "at_mean_ms": 1e3 * sum(errors) / len(errors) if errors else None,
            "at_max_abs_ms": 1e3 * max(abs(e) for e in errors) if errors else None,
            "status_delay_s": status.get("delay"), "status_drift_ppm": status.get("drift"),
            "device_underruns": status.get("underruns")}


def sink_clock(reads, quantum, window=0.3):
    """When the PipeWire sink played each recorded frame, from a pipewire_session.Recording's
    reads, the graph running at `quantum` frames (or fewer): runs for heard_at, and each rise of
    the placement by more than 1 ms (ms): the sink fell behind CLOCK_MONOTONIC, or every read for
    `window` seconds came that late.

    A frame is heard when the graph cycle that takes it to the sink runs (a null sink plays
    nothing; on a card it is when the cycle hands the quantum to the driver), the quantum's frames
    following at the rate. pw-record writes through a 4096-byte stdio buffer, so a read holds
    whatever filled it (512 frames: half a cycle of 1024, two of 256), not a cycle: what a read
    says is that the cycle holding its last frame had run when it came, and that cycle began at
    most `quantum` − 1 frames before that frame. Each read comes at or after that cycle, late by
    the cycle's work and the wake-ups of pw-record and of the reader, never early. A timer-driven
    sink keeps to CLOCK_MONOTONIC but falls behind for good when the machine is slow to run a
    cycle, so no single line fits a long recording: each read is placed at the earliest that the
    reads of the next `window` seconds allow (read time − (its last frame − quantum + 1) / rate),
    which the sink's falling behind later does not move earlier. Error: late by the shortest
    lateness of those reads (≥ 0; a read that ends mid-cycle is late by the rest of the cycle),
    early only where the graph ran a late cycle and then caught up within the window (cycles less
    than a quantum apart), or if the graph ran a larger quantum than `quantum`."""
    offsets = [ns - (first + count - quantum) * 1e9 / RATE for ns, first, count in reads]
    span = max(1, int(window * RATE / max(1, percentile([count for _, _, count in reads], 50))))
    placed = [min(offsets[j:j + span]) for j in range(len(offsets))]
    runs = [(first, int(round(placed[j] + first * 1e9 / RATE)), count)
            for j, (_, first, count) in enumerate(reads) if count > 0]
    behind = [(placed[j] - placed[j - 1]) / 1e6 for j in range(1, len(placed))
              if placed[j] - placed[j - 1] > 1e6]
    return runs, behind


def graph_quantum(session):
    """The quantum the graph runs at while the playback streams in `session` play: the smallest
    node.latency they ask for, rounded down to a power of two as PipeWire 0.3 does (a stream asking
    480/48000 runs the graph at 256: its client thread wakes 187.5 times a second), at most 2048
    (the default clock.max-quantum); the default 1024 if none asks."""
    asked = [int(s["latency"].split("/")[0]) for s in session.streams() if s.get("latency")]
    quantum = min(asked + [1024])
    return min(2048, 1 << (quantum.bit_length() - 1))


def recorded_left(raw):
    with open(raw, "rb") as f:
        data = f.read()
    return memoryview(data)[: len(data) // 8 * 8].cast("f")[0::2]


def load_average():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def through_pipewire(args, work, session, device, buffer, constant, say, quantum=None):
    """(a) and (b) through ALSA's `device` PCM (`pipewire` or `pulse`) into `session`'s sink, a
    `buffer`-second buffer, the kind's defaults otherwise, recorded at the sink; or, with
    `quantum`, through rampd's native PipeWire stream (`device` "pipewire-native") asking for
    that quantum (`buffer`: how long to wait for a change to be heard)."""
    load = load_average()
    if quantum:
        name = f"rampd-heard-{device}-{quantum}"
        output = f'device = "{device}"\npipewire-quantum = {quantum}'
    else:
        name = f"rampd-heard-{device}-{int(buffer * 1000)}ms"
        output = f'device = "{device}"\nbuffer = {buffer}'
    daemon = bench.start_rampd(args.rampd, work, name, output, env=session.environment)
    raw = os.path.join(work, name, "sink.raw")
    recording = session.record(raw)
    # The graph's quantum, asked while the first second plays (send_sets waits 1.5 s before its sets).
    quanta = []
    asked = threading.Timer(1.0, lambda: quanta.append(graph_quantum(session)))
    asked.start()
    try:
        output, sets, scheduled, status = drive(daemon, args, constant, buffer)
    finally:
        asked.cancel()
        reads = recording.finish()
        daemon.stop()
    with open(raw + ".reads.json", "w") as f:
        json.dump({"reads": reads, "sets": sets, "scheduled": scheduled, "graph_quantum": quanta}, f)
    runs, behind = sink_clock(reads, quanta[0] if quanta else 2048)
    result = {"device": device, "buffer_s": buffer, "load_average_at_start": load,
              "load_average_at_end": load_average(), "pipewire_quantum": quantum,
              "sink_fell_behind_ms": [round(x, 2) for x in behind],
              "read_frames": percentile([count for _, _, count in reads], 50),
              "quantum_frames": quanta[0] if quanta else None,
              **heard_figures(finder(recorded_left(raw), runs), sets, scheduled, output, status)}
    say(f"{name}: {result}")
    return result


def glitches(left, levels=(0.3, 0.5)):
    """What a recording of the constant at gains 0.6 and 1.0 holds between its first frame at full
    level and the end of its last millisecond at either level: runs of frames at neither level
    (an underrun's silence, a step), as (first frame, frames), and the changes from one level to
    the other."""
    def level(x):
        for value in levels:
            if abs(x - value) <= 1e-6:
                return value
        return None

    start = next(i for i in range(len(left)) if level(left[i]) == levels[1])
    # The last frame of a millisecond at one level: the stop's fade passes through 0.3 too.
    end = next(i for i in range(len(left) - 1, start, -1)
               if level(left[i]) is not None and all(level(left[j]) == level(left[i]) for j in range(i - 47, i)))
    runs, changes, current, bad = [], 0, levels[1], None
    for i in range(start, end + 1):
        value = level(left[i])
        if value is None:
            bad = i if bad is None else bad
            continue
        if bad is not None:
            runs.append((bad, i - bad))
            bad = None
        if value != current:
            changes += 1
            current = value
    return runs, changes


def busy_loops(count):
    """`count` processes spinning at normal priority, as builds on the same cores do."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


def rewind_stress(args, work, session, constant, say):
    """`rewind` "on" (forced: `auto` leaves it off there) against "off" through `pipewire`,
    `args.stress_runs` runs each of `args.tries` sets while playing, with `args.stress_load`
    processes spinning: per run, the glitches in the sink's recording, the level changes against
    the sets (a change heard twice: rewound audio played anyway), `set` → heard, and rampd's
    underruns and rewinds."""
    results = []
    for run in range(args.stress_runs):
        for rewind in ("on", "off"):
            name = f"rampd-stress-pipewire-rewind-{rewind}-{run}"
            rampd = args.rewind_rampd if rewind == "on" and args.rewind_rampd else args.rampd
            try:
                daemon = bench.start_rampd(rampd, work, name, f'device = "pipewire"\nrewind = "{rewind}"',
                                           env=session.environment)
            except RuntimeError:
                with open(os.path.join(work, f"{name}.log")) as f:
                    refused = f.read().strip().splitlines()[-1]
                say(f"{name}: refused: {refused}")
                results.append({"run": run, "rewind_asked": rewind, "refused": refused})
                continue
            raw = os.path.join(work, name, "sink.raw")
            load_at_start = load_average()
            recording = session.record(raw)
            quanta = []
            asked = threading.Timer(1.0, lambda: quanta.append(graph_quantum(session)))
            asked.start()
            load = []
            try:
                c = bench.Rampd(daemon.socket_path)
                output = c.request("status")["output"]
                load = busy_loops(args.stress_load)
                sets = send_sets(c, constant, args.tries, output["bufferFrames"] / RATE + 0.05)
                status = c.request("status")["output"]
                for p in load:
                    p.kill()
                    p.wait()
                load = []
                c.request("stop", fade=0.01)
                time.sleep(0.3)
                c.close()
            finally:
                for p in load:
                    p.kill()
                    p.wait()
                asked.cancel()
                reads = recording.finish()
                daemon.stop()
            left = recorded_left(raw)
            gaps, changes = glitches(left)
            runs, behind = sink_clock(reads, quanta[0] if quanta else 2048)
            try:
                heard = heard_figures(finder(left, runs), sets, [], output, status)
                heard = {k: heard[k] for k in ("median_ms", "p99_ms", "max_ms")}
            except RuntimeError as e:
                heard = {"error": str(e)}
            result = {"run": run, "rewind_asked": rewind, "load_average_at_start": load_at_start,
                      "rewind": status.get("rewind"),
                      "rewinds": status.get("rewinds"), "underruns": status.get("underruns"),
                      "buffer_frames": output["bufferFrames"], "sets": len(sets), "level_changes": changes,
                      "glitches": len(gaps), "glitch_ms": [round(n / RATE * 1e3, 2) for _, n in gaps],
                      "silent_glitches": sum(1 for f, n in gaps if all(left[i] == 0 for i in range(f, f + n))),
                      "sink_fell_behind_ms": [round(x, 2) for x in behind], **heard}
            say(f"{name}: {result}")
            results.append(result)
    return results


# (p): who plays into the same PipeWire, one at a time: rampd through its native stream at two
# quanta (and at 1024 with its master limiter off) and through ALSA's `pipewire` PCM (its
# defaults: period 10 ms, buffer 50 ms); MPD 0.23 with its own `pipewire` output and with its
# `alsa` output on `pipewire`, software volume both.
PIPEWIRE_PLAYERS = (
    ("rampd, native, quantum 1024", "rampd", 'device = "pipewire-native"\npipewire-quantum = 1024'),
    ("rampd, native, quantum 256", "rampd", 'device = "pipewire-native"\npipewire-quantum = 256'),
    # What the master limiter (on by default; MPD has none) costs there.
    ("rampd, native, quantum 1024, limiter off", "rampd",
     'device = "pipewire-native"\npipewire-quantum = 1024\nlimiter = "off"'),
    ("rampd, ALSA `pipewire` (buffer 50 ms)", "rampd", 'device = "pipewire"'),
    ("MPD, its `pipewire` output", "mpd", '  type "pipewire"\n  name "pipewire"\n  mixer_type "software"'),
    ("MPD, its `alsa` output on `pipewire`", "mpd",
     '  type "alsa"\n  name "alsa-pipewire"\n  device "pipewire"\n  mixer_type "software"'),
)
MPD_NATIVE = "MPD, its `pipewire` output"


def playing_on_pipewire(args, work, session, say):
    """(p) Each of PIPEWIRE_PLAYERS, in turn, plays `args.track` (`args.playing_seconds` long) in
    real time into `session`'s null sink, nothing else playing; over the middle of the playback
    (5 s in to 5 s before the end): per thread of the player (/proc/<pid>/task/*: schedstat's CPU
    time, voluntary context switches as its wake-ups, comm as its name) and of the PipeWire daemon,
    CPU ms and wake-ups per second played; the quantum each stream asks for (node.latency, pw-dump,
    read after the window); rampd's underruns."""
    chosen = [p for p in PIPEWIRE_PLAYERS
              if not args.players or any(part in p[0] for part in args.players.split(";"))]
    rounds = {label: [] for label, _, _ in chosen}
    for turn in range(args.playing_rounds):
        # Every other round in the opposite order: a load that rises or falls over the run favours no one.
        players = chosen if turn % 2 == 0 else chosen[::-1]
        for label, x in playing_round(args, work, session, players, turn, say).items():
            rounds[label].append(x)
    results = {}
    for label, xs in rounds.items():
        mean = lambda key: sum(x[key] for x in xs) / len(xs)
        threads = mean_threads([x["threads"] for x in xs])
        pw = mean_threads([x["pipewire_threads"] for x in xs])
        results[label] = {
            **{key: mean(key) for key in ("cpu_ms_per_s", "wakeups_per_s", "pipewire_cpu_ms_per_s", "pipewire_wakeups_per_s")},
            "threads": threads, "pipewire_threads": pw, "streams": xs[0]["streams"],
            "status": xs[0]["status"] and {**xs[0]["status"], "underruns": sum(x["status"]["underruns"] for x in xs)},
            "load_average_at_start": min(x["load_average_at_start"] for x in xs),
            "load_average_at_end": max(x["load_average_at_end"] for x in xs),
            "rounds": xs}
    return results


def mean_threads(rounds):
    """Per thread, the mean over `rounds` (each a list of (name, CPU ms per s, wake-ups per s) in
    the order the threads were made): threads matched by name and, among those of one name, by
    that order (a thread a round lacks counts as 0 there)."""
    means = {}
    for threads in rounds:
        seen = {}
        for name, ms, wakeups in threads:
            key = (name, seen.setdefault(name, 0))
            seen[name] += 1
            total = means.setdefault(key, [0.0, 0.0])
            total[0] += ms / len(rounds)
            total[1] += wakeups / len(rounds)
    return [(name, ms, wakeups) for (name, _), (ms, wakeups) in means.items()]


def playing_round(args, work, session, players, turn, say):
    """One round of (p): each of `players` in turn."""
    seconds = args.playing_seconds
    track = args.track
    results = {}
    for label, kind, config in players:
        name = f"playing-{turn}-" + "".join(c if c.isalnum() else "-" for c in label.lower()).strip("-")
        load = load_average()
        if kind == "rampd":
            daemon = bench.start_rampd(args.rampd, work, name, config, env=session.environment)
            play = lambda daemon=daemon: bench.play_rampd(daemon, track, seconds, count_underruns=True)
        else:
            daemon = bench.start_mpd(args.mpd, work, os.path.dirname(track), outputs=[config], name=name,
                                     env=session.environment)
            play = lambda daemon=daemon: bench.play_mpd(daemon, os.path.basename(track), output=2)
        snapshots, streams, played = [], [], {}

        def snapshot(daemon=daemon):
            snapshots.append((time.monotonic(), bench.threads(daemon.pid), bench.threads(session.server.pid)))

        window = (5, seconds - 5)
        timers = [threading.Timer(t, snapshot) for t in window]
        timers.append(threading.Timer(seconds - 3, lambda: streams.extend(session.streams())))
        try:
            for timer in timers:
                timer.start()
            played.update(play())
            for timer in timers:
                timer.join()
            status = None
            if kind == "rampd":
                c = bench.Rampd(daemon.socket_path)
                status = {k: v for k, v in c.request("status")["output"].items()
                          if k in ("kind", "periodFrames", "bufferFrames", "underruns")}
                c.close()
        finally:
            for timer in timers:
                timer.cancel()
            daemon.stop()
        (t0, player0, server0), (t1, player1, server1) = snapshots
        player = bench.rates(player0, player1, t1 - t0)
        server = bench.rates(server0, server1, t1 - t0)
        results[label] = {
            "cpu_ms_per_s": sum(t[2] for t in player), "wakeups_per_s": sum(t[3] for t in player),
            "threads": [t[1:] for t in player if t[2] or t[3]],
            "pipewire_cpu_ms_per_s": sum(t[2] for t in server), "pipewire_wakeups_per_s": sum(t[3] for t in server),
            "pipewire_threads": [t[1:] for t in server if t[2] or t[3]],
            "streams": streams, "status": status, "underrun_events": played.get("underrun_blocks"),
            "window_s": t1 - t0, "wall_s": played.get("wall_s"),
            "load_average_at_start": load, "load_average_at_end": load_average()}
        say(f"{name}: {results[label]}")
    return results


def print_playing_on_pipewire(results, seconds):
    base = results.get(MPD_NATIVE)

    def ratio(x, key):
        return f"{x[key] / base[key]:.2f}" if base and base[key] else ""

    rounds = len(next(iter(results.values())).get("rounds", [None]))
    print(f"\n| playing {seconds:g} s into PipeWire's null sink, one at a time, mean of {rounds} rounds | quantum asked (node.latency)"
          " | CPU ms per s played (process) | × MPD native | wake-ups per s (all threads) | × MPD native"
          " | PipeWire's CPU ms per s | its wake-ups per s | player + PipeWire ms per s | × MPD native"
          " | underruns | load average, start / end |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for label, x in results.items():
        x["both_ms_per_s"] = x["cpu_ms_per_s"] + x["pipewire_cpu_ms_per_s"]
    for label, x in results.items():
        latency = ", ".join(sorted({s["latency"] or "none" for s in x["streams"]})) or "?"
        underruns = x["status"]["underruns"] if x["status"] else ""
        print(f"| {label} | {latency} | {x['cpu_ms_per_s']:.3f} | {ratio(x, 'cpu_ms_per_s')} |"
              f" {x['wakeups_per_s']:.1f} | {ratio(x, 'wakeups_per_s')} | {x['pipewire_cpu_ms_per_s']:.3f} |"
              f" {x['pipewire_wakeups_per_s']:.1f} | {x['both_ms_per_s']:.3f} | {ratio(x, 'both_ms_per_s')} |"
              f" {underruns} | {x['load_average_at_start']:.2f} / {x['load_average_at_end']:.2f} |")
    print("\nper round, CPU ms per second played, process (PipeWire): " + "; ".join(
        f"{label} " + ", ".join(f"{r['cpu_ms_per_s']:.3f} ({r['pipewire_cpu_ms_per_s']:.3f})" for r in x.get("rounds", []))
        for label, x in results.items()))
    print("\nper thread, CPU ms per second played (wake-ups per second), mean of the rounds:")
    for label, x in results.items():
        print(f"  {label}: " + ", ".join(f"{n} {ms:.3f} ({w:.0f}/s)" for n, ms, w in x["threads"]))
        print(f"    PipeWire: " + ", ".join(f"{n} {ms:.3f} ({w:.0f}/s)" for n, ms, w in x["pipewire_threads"]))


def schedstat_totals(pid):
    runs = {}
    cpu = bench.thread_cpu(pid, runs)
    return sum(c for _, c in cpu.values()), sum(runs.values())


def idle(args, work, say):
    """(c): the three daemons idle at once, over the same seconds."""
    music = os.path.join(work, "music")
    os.makedirs(music, exist_ok=True)
    daemons = {}
    session = None
    try:
        daemons["rampd, clocked device (pacing device)"] = clocked_daemon(args, work, "rampd-idle-device", 0.05)[0]
        daemons["rampd, null (pacing clock)"] = bench.start_rampd(
            args.rampd, work, "rampd-idle-null", 'device = "null"\npacing = "clock"')
        daemons["MPD 0.23"] = bench.start_mpd(args.mpd, work, music)
        # The embedded output: a device that cannot be opened, the WAV file instead.
        embedded = os.path.join(work, "rampd-idle-embedded")
        os.makedirs(embedded, exist_ok=True)
        daemons["rampd, embedded output (WAV file)"] = bench.Daemon(
            "rampd-idle-embedded", [args.rampd, "--socket", f"{embedded}/rampd.sock", "--device",
                                    "rampd_no_such_device", "--embedded-file", f"{embedded}/out.wav"],
            f"{embedded}/rampd.sock", work, {**{k: v for k, v in os.environ.items() if not k.startswith("RAMPD_")},
                                             "RAMPD_STATE_PATH": f"{embedded}/state.json"})
        # A desktop: rampd through ALSA's pipewire and pulse PCMs into a PipeWire of its own.
        session = pipewire.PipeWireSession(work)
        for device in ("pipewire", "pulse"):
            daemons[f"rampd, {device} (PipeWire 0.3)"] = bench.start_rampd(
                args.rampd, work, f"rampd-idle-{device}", f'device = "{device}"', env=session.environment)
        # WirePlumber suspends a sink idle for 5 s.
        time.sleep(7)
        before = {name: schedstat_totals(d.pid) for name, d in daemons.items()}
        server_before = schedstat_totals(session.server.pid)
        t0 = time.monotonic()
        time.sleep(args.idle_seconds)
        seconds = time.monotonic() - t0
        after = {name: schedstat_totals(d.pid) for name, d in daemons.items()}
        server_after = schedstat_totals(session.server.pid)
        sink = session.sink_state()
        result = {name: {"cpu_percent": 100 * (after[name][0] - before[name][0]) / seconds,
                         "wakeups_per_s": (after[name][1] - before[name][1]) / seconds}
                  for name in daemons}
        c = bench.Rampd(daemons["rampd, clocked device (pacing device)"].socket_path)
        result["rampd_idle_status"] = {k: v for k, v in c.request("status")["output"].items()
                                       if k in ("idle", "resumeLatency", "delay", "drift")}
        c.close()
        result["PipeWire 0.3 serving the two (pipewire process)"] = {
            "cpu_percent": 100 * (server_after[0] - server_before[0]) / seconds,
            "wakeups_per_s": (server_after[1] - server_before[1]) / seconds}
        result["sink_state"] = sink
        for device in ("pipewire", "pulse"):
            c = bench.Rampd(daemons[f"rampd, {device} (PipeWire 0.3)"].socket_path)
            result[f"rampd_idle_{device}"] = c.request("status")["output"].get("idle")
            c.close()
    finally:
        for d in daemons.values():
            d.stop()
        if session:
            session.stop()
    say(f"idle: {result}")
    return result


def clocked_arguments():
    """The arguments every benchmark on the clocked device takes: rampd, MPD, the device's plugin,
    a work directory and the number of `set` tries."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--rampd", required=True)
    parser.add_argument("--mpd", default="mpd")
    parser.add_argument("--plugin", required=True, help="libasound_module_pcm_rampd_clocked.so")
    parser.add_argument("--work", required=True)
    parser.add_argument("--tries", type=int, default=50)
    return parser


def main():
    parser = clocked_arguments()
    parser.add_argument("--scheduled", type=int, default=10)
    parser.add_argument("--idle-seconds", type=float, default=10)
    parser.add_argument("--stress-runs", type=int, default=3)
    parser.add_argument("--stress-load", type=int, default=2)
    parser.add_argument("--rewind-rampd", help="a rampd that accepts rewind on through pipewire, for (c)")
    parser.add_argument("--only", choices=("heard", "pipewire", "stress", "idle"), action="append",
                        help="pipewire: `set` → heard and `at` through PipeWire (native and ALSA's plugins),"
                             " and, with --track, what playing costs there (p)")
    parser.add_argument("--track", help="a WAV in a music directory of its own, for (p)")
    parser.add_argument("--playing-seconds", type=float, default=40, help="its length")
    parser.add_argument("--playing-rounds", type=int, default=2, help="rounds of (p), every other one in reverse order")
    parser.add_argument("--pipewire-devices", default="pipewire-native:1024,pipewire-native:256,pipewire,pulse",
                        help="through PipeWire, in this order: pipewire-native:<quantum>, pipewire, pulse;"
                             " none: only the playing")
    parser.add_argument("--players", help="(p) only the players whose label contains one of these"
                                          " (separated by ;), e.g. 'native, quantum 1024;MPD, its `pipewire`'")
    parser.add_argument("--results")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    only = set(args.only or ("heard", "pipewire", "stress", "idle"))
    say = print if args.verbose else (lambda *_: None)
    constant = os.path.join(args.work, "constant.wav")
    bench.write_constant_wav(constant, int(args.tries * 1.15 + args.scheduled * 2.2 + 20))
    results = {"heard": [set_to_heard(args, args.work, b, r, constant, say)
                         for r in ("off", "on") for b in (0.05, 0.2, 1.0) if r == "on" or b < 1]
               if "heard" in only else []}
    if only & {"pipewire", "stress"}:
        session = pipewire.PipeWireSession(args.work)
        try:
            if "pipewire" in only:
                for device in args.pipewire_devices.split(","):
                    if device in ("", "none"):
                        continue
                    device, _, quantum = device.partition(":")
                    if quantum:
                        # A change is heard about a quantum after it is sent, plus the graph's delay.
                        results["heard"].append(through_pipewire(
                            args, args.work, session, device, 2 * int(quantum) / RATE + 0.03, constant, say,
                            quantum=int(quantum)))
                    else:
                        results["heard"] += [through_pipewire(args, args.work, session, device, buffer, constant, say)
                                             for buffer in (0.05, 0.1)]
                if args.track and args.playing_seconds > 0:
                    results["playing"] = playing_on_pipewire(args, args.work, session, say)
            if "stress" in only:
                results["rewind_stress"] = rewind_stress(args, args.work, session, constant, say)
        finally:
            session.stop()
    if "idle" in only:
        results["idle"] = idle(args, args.work, say)
    if args.results:
        with open(args.results, "w") as f:
            json.dump(results, f, indent=1)
    print("| `set` → first changed sample heard (period 10 ms) | median | p99 | max | buffer (bound without rewind)"
          " | median / buffer | rewinds | `at` 1 s ahead: heard off by, mean / max abs | device underruns |")
    print("|---|---|---|---|---|---|---|---|---|")
    for h in results["heard"]:
        how = f"rewind (margin {h['rewind_margin_ms']:g} ms)" if h["rewind"] else "no rewind"
        where = "clocked test device" if h["device"] == "clocked test device" else f"through `{h['device']}`"
        bound = h["buffer_frames"] / RATE * 1000
        if h.get("pipewire_quantum"):
            # Native: no buffer of rampd's; the target is a quantum plus 5 ms.
            where, bound = f"native PipeWire stream, quantum {h['pipewire_quantum']}", h["pipewire_quantum"] / RATE * 1000 + 5
            print(f"| rampd, {where} | {h['median_ms']:.1f} ms | {h['p99_ms']:.1f} ms | {h['max_ms']:.1f} ms |"
                  f" {bound:.1f} ms (quantum + 5 ms) | {h['median_ms'] / bound:.3f} | {h['rewinds']} |"
                  f" {h['at_mean_ms']:+.2f} / {h['at_max_abs_ms']:.2f} ms | {h['device_underruns']} |")
            continue
        print(f"| rampd, {where}, buffer {h['buffer_s'] * 1000:g} ms, {how} | {h['median_ms']:.1f} ms |"
              f" {h['p99_ms']:.1f} ms | {h['max_ms']:.1f} ms | {bound:g} ms |"
              f" {h['median_ms'] / bound:.3f} | {h['rewinds']} |"
              f" {h['at_mean_ms']:+.2f} / {h['at_max_abs_ms']:.2f} ms | {h['device_underruns']} |")
    for h in results["heard"]:
        if "sink_fell_behind_ms" in h:
            print(f"through {h['device']}, {('quantum asked %d' % h['pipewire_quantum']) if h.get('pipewire_quantum') else ('buffer %g ms' % (h['buffer_s'] * 1000))}:"
                  f" graph quantum {h['quantum_frames']} frames, {h['read_frames']} frames a read at the sink, load average {h['load_average_at_start']:.2f} / {h['load_average_at_end']:.2f},"
                  f" the sink fell behind CLOCK_MONOTONIC {len(h['sink_fell_behind_ms'])} times (by"
                  f" {sum(h['sink_fell_behind_ms']):.1f} ms in all); status drift {h['status_drift_ppm']} ppm")
    if "playing" in results:
        print_playing_on_pipewire(results["playing"], args.playing_seconds)
    if "rewind_stress" in results:
        print(f"\n| through `pipewire`, {args.tries} sets while {args.stress_load} processes spin | rewind | rewinds"
              " | underruns (status) | level changes / sets | glitches in the recording | silent | longest |"
              " `set` → heard median / max |")
        print("|---|---|---|---|---|---|---|---|---|")
        for r in results["rewind_stress"]:
            if "refused" in r:
                print(f"| run {r['run'] + 1}, rewind = \"{r['rewind_asked']}\" | refused at start: {r['refused']} |"
                      " | | | | | | |")
                continue
            heard = (f"{r['median_ms']:.1f} / {r['max_ms']:.1f} ms" if "median_ms" in r else r["error"])
            print(f"| run {r['run'] + 1}, rewind = \"{r['rewind_asked']}\" | {r['rewind']} | {r['rewinds']} |"
                  f" {r['underruns']} | {r['level_changes']} / {r['sets']} | {r['glitches']} | {r['silent_glitches']} |"
                  f" {max(r['glitch_ms'], default=0):g} ms | {heard} |")
    if "idle" not in results:
        return
    print()
    print(f"| idle, nothing playing, {args.idle_seconds:g} s | CPU, % of a core | wake-ups per second (all threads) |")
    print("|---|---|---|")
    for name, x in results["idle"].items():
        if not isinstance(x, dict) or name == "rampd_idle_status":
            continue
        print(f"| {name} | {x['cpu_percent']:.3f} | {x['wakeups_per_s']:.1f} |")
    print(f"\nrampd's status while idle on the clocked device: {results['idle']['rampd_idle_status']}")
    print(f"PipeWire's null sink: {results['idle']['sink_state']}; output.idle through pipewire: "
          f"{results['idle']['rampd_idle_pipewire']}, through pulse: {results['idle']['rampd_idle_pulse']}")


if __name__ == "__main__":
    main()
