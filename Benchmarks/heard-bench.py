#!/usr/bin/env python3
"""When a change is heard, and what an idle daemon costs (driven by script/bench-heard).

Measures, in one run:
  (a) rampd: time from sending a `set` to the first changed sample *heard*, on the clocked test
      device (Tests/Fixtures/pcm_clocked.c: an ALSA ioplug PCM that consumes its ring in real
      time and records when it consumed each frame), 10 ms period: without rewind (output.rewind
      "off") with a 50 ms and a 200 ms buffer, against the buffer (its bound), and with rewind
      ("on") with a 50 ms, a 200 ms and a 1 s buffer, against the rewind margin;
  (b) rampd: a `set` with `at` (1 s ahead, wall clock): how far from that time it is heard;
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


def set_to_heard(args, work, buffer, rewind, constant, say):
    """(a) and (b) on one daemon with a `buffer`-second buffer, rewind "on" or "off"."""
    name = f"rampd-heard-{int(buffer * 1000)}ms-rewind-{rewind}"
    daemon, raw, times = clocked_daemon(args, work, name, buffer, rewind=rewind)
    try:
        c = bench.Rampd(daemon.socket_path)
        output = c.request("status")["output"]
        sets = send_sets(c, constant, args.tries, buffer + 0.05)
        value = sets[-1][1]
        scheduled = []
        for _ in range(args.scheduled):
            value = 0.6 if value == 1.0 else 1.0
            # Due one second after the daemon receives it: after the send, within the transit.
            t0 = time.monotonic()
            c.request("set", key="master.gain", value=value, duration=0, at=1.0, ack="scheduled")
            scheduled.append((t0 + 1.0, value))
            time.sleep(1.0 + buffer + 0.1)
        status = c.request("status")["output"]
        c.request("stop", fade=0.01)
        time.sleep(buffer + 0.1)
        c.close()
    finally:
        daemon.stop()
    heard = finder(*read_recording(raw, times))
    latencies = [heard(t0, value) - t0 for t0, value in sets]
    errors = [heard(due - 0.5, value) - due for due, value in scheduled]
    result = {"buffer_s": buffer, "rewind": status.get("rewind"), "rewinds": status.get("rewinds"),
              "rewind_margin_ms": 1e3 * status.get("rewindMargin", 0), "buffer_frames": output["bufferFrames"], "period_frames": output["periodFrames"],
              "median_ms": 1e3 * percentile(latencies, 50), "p99_ms": 1e3 * percentile(latencies, 99),
              "max_ms": 1e3 * max(latencies), "min_ms": 1e3 * min(latencies), "tries": len(latencies),
              "at_error_ms": [round(1e3 * e, 3) for e in errors],
              "status_delay_s": status.get("delay"), "status_drift_ppm": status.get("drift"),
              "device_underruns": status.get("underruns")}
    say(f"{name}: {result}")
    return result


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
    parser.add_argument("--scheduled", type=int, default=5)
    parser.add_argument("--idle-seconds", type=float, default=10)
    parser.add_argument("--results")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    say = print if args.verbose else (lambda *_: None)
    constant = os.path.join(args.work, "constant.wav")
    bench.write_constant_wav(constant, int(args.tries * 1.15 + args.scheduled * 2.2 + 20))
    results = {"heard": [set_to_heard(args, args.work, b, r, constant, say)
                         for r in ("off", "on") for b in (0.05, 0.2, 1.0) if r == "on" or b < 1],
               "idle": idle(args, args.work, say)}
    if args.results:
        with open(args.results, "w") as f:
            json.dump(results, f, indent=1)
    print("| `set` → first changed sample heard (clocked test device, period 10 ms) | median | p99 | max |"
          " buffer (bound without rewind) | median / buffer | rewinds | `at` 1 s ahead: heard off by | device underruns |")
    print("|---|---|---|---|---|---|---|---|---|")
    for h in results["heard"]:
        how = f"rewind (margin {h['rewind_margin_ms']:g} ms)" if h["rewind"] else "no rewind"
        print(f"| rampd, buffer {h['buffer_s'] * 1000:g} ms, {how} | {h['median_ms']:.1f} ms | {h['p99_ms']:.1f} ms |"
              f" {h['max_ms']:.1f} ms | {h['buffer_frames'] / RATE * 1000:g} ms |"
              f" {h['median_ms'] / (h['buffer_frames'] / RATE * 1000):.3f} | {h['rewinds']} |"
              f" {', '.join(f'{e:+.2f}' for e in h['at_error_ms'])} ms | {h['device_underruns']} |")
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
