#!/usr/bin/env python3
"""What playing costs per minute in real time, and when a change is heard, per device kind, in one
run (driven by `BENCH_ONLY=playing script/bench-daemon`).

  (a) CPU and wake-ups while playing a WAV in real time, every player at once over the same
      seconds: MPD 0.23 on its own `null` output (sync "yes", software volume 50%), and each rampd
      build given (--rampd, and --before for the build before a change) on ALSA `null` (pacing
      "clock") and on the clocked test device (Tests/Fixtures/pcm_clocked.c, plays in real time)
      with rewind on, the daemon's defaults otherwise (period 10 ms, buffer 50 ms, rewind buffer
      200 ms, the master limiter at -1 dBTP); the build after on `null` with the limiter off (what
      the limiter costs), and, with --loud-track and --quiet-track, the build after on `null` with
      the limiter on and off playing each of those (a signal over the ceiling, that the limiter
      limits all along, and one far under it, where it rests); and the build after the change
      through ALSA's `pipewire` PCM into a PipeWire of the
      benchmark's own (pipewire_session.py: a null sink, as a desktop without a card), with
      PipeWire's own process beside it. Per daemon, over the middle of the playback: the process's CPU seconds per minute,
      and the render (or output) thread's CPU and voluntary context switches (its wake-ups) per
      second, from /proc/<pid>/task/<tid>/{schedstat,status}. The clocked device's own clock
      thread runs in the daemon's process (a card's interrupt does not): it is reported apart.
  (b) `set` → first changed sample heard, median/p99/max, on the clocked device with rewind
      (defaults as above) and without (buffer 50 ms), per build (heard-bench.py's measure).

Standard library only.
"""
import argparse
import importlib.util
import json
import os
import threading
import time

here = os.path.dirname(os.path.abspath(__file__))


def load(name, file):
    spec = importlib.util.spec_from_file_location(name, os.path.join(here, file))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bench = load("daemon_bench", "daemon-bench.py")
heard = load("heard_bench", "heard-bench.py")
pipewire = load("pipewire_session", "pipewire_session.py")


def playing(args, say):
    builds = [("after", args.rampd)] + ([("before", args.before)] if args.before else [])
    daemons, tracks = {}, {}
    mpd = bench.start_mpd(args.mpd, args.work, os.path.dirname(args.track))
    # A desktop's PipeWire of the benchmark's own: rampd plays into it through ALSA's pipewire PCM.
    session = pipewire.PipeWireSession(args.work)
    try:
        for build, rampd in builds:
            daemons[f"rampd {build}, null (pacing clock)"] = bench.start_rampd(
                rampd, args.work, f"rampd-{build}-null", 'device = "null"\npacing = "clock"')
            daemons[f"rampd {build}, clocked device, rewind"] = heard.clocked_daemon(
                args, args.work, f"rampd-{build}-clocked", rewind="on", rampd=rampd)[0]
        # The master limiter's cost: the same build on null without it, and with and without it on
        # a signal it limits all along and on one under the level where it interpolates nothing.
        daemons["rampd after, null (pacing clock), limiter off"] = bench.start_rampd(
            args.rampd, args.work, "rampd-after-null-no-limiter", 'device = "null"\npacing = "clock"\nlimiter = "off"')
        for signal, track in (("loud", args.loud_track), ("quiet", args.quiet_track)):
            if not track:
                continue
            for limiter in ("on", "off"):
                name = f"rampd after, null (pacing clock), {signal} track, limiter {limiter}"
                daemons[name] = bench.start_rampd(
                    args.rampd, args.work, f"rampd-after-null-{signal}-limiter-{limiter}",
                    'device = "null"\npacing = "clock"' + ('\nlimiter = "off"' if limiter == "off" else ""))
                tracks[name] = track
        daemons["rampd after, pipewire (PipeWire 0.3)"] = bench.start_rampd(
            args.rampd, args.work, "rampd-after-pipewire", 'device = "pipewire"', env=session.environment)
        time.sleep(1)
        say(f"{len(daemons)} rampd and MPD play {args.seconds:g} s in real time ...")
        results, snapshots = {}, []

        def snapshot():
            everyone = dict(daemons, MPD=mpd, **{"PipeWire 0.3 (its process, serving rampd)": session.server})
            snapshots.append((time.monotonic(), {name: bench.threads(d.pid) for name, d in everyone.items()}))

        window = (min(5, args.seconds / 4), max(args.seconds - 5, args.seconds * 3 / 4))
        timers = [threading.Timer(t, snapshot) for t in window]
        players = [threading.Thread(target=lambda: results.update(MPD=bench.play_mpd(mpd, os.path.basename(args.track), output=1)))]
        for name, daemon in daemons.items():
            players.append(threading.Thread(
                target=lambda name=name, daemon=daemon: results.update(
                    {name: bench.play_rampd(daemon, tracks.get(name, args.track), args.seconds, count_underruns=True)})))
        for thread in players + timers:
            thread.start()
        for thread in players + timers:
            thread.join()
    finally:
        for daemon in daemons.values():
            daemon.stop()
        mpd.stop()
        session.stop()
    (t0, before), (t1, after) = sorted(snapshots, key=lambda x: x[0])
    out = {}
    server = "PipeWire 0.3 (its process, serving rampd)"
    per_thread = bench.rates(before[server], after[server], t1 - t0)
    busiest = max(per_thread, key=lambda t: t[3])
    total_ms = sum(t[2] for t in per_thread)
    out[server] = {"cpu_s_per_min": 60 * total_ms / 1e3, "cpu_s_per_min_without_device": 60 * total_ms / 1e3,
                   "main_thread": busiest[1], "main_ms_per_s": busiest[2], "main_wakeups_per_s": busiest[3],
                   "wakeups_per_s_all": sum(t[3] for t in per_thread), "threads": per_thread,
                   "underrun_events": None}
    say(f"{server}: {out[server]}")
    for name in results:
        per_thread = bench.rates(before[name], after[name], t1 - t0)
        if name == "MPD":
            # Its output thread: the one that woke most.
            main = max(per_thread, key=lambda t: t[3])
        else:
            main = next(t for t in per_thread if t[1] == "rampd-render")
        # The clocked device's clock thread (unnamed: it has the process's name) wakes once a period.
        # (Through PipeWire, the client's data thread is part of playing there: it is counted.)
        device = [t for t in per_thread if "clocked" in name and t[1] == "rampd" and t[0] != min(before[name])]
        device_ms = sum(t[2] for t in device if t[3] >= 80)
        total_ms = sum(t[2] for t in per_thread)
        out[name] = {
            "cpu_s_per_min": 60 * total_ms / 1e3, "cpu_s_per_min_without_device": 60 * (total_ms - device_ms) / 1e3,
            "main_thread": main[1], "main_ms_per_s": main[2], "main_wakeups_per_s": main[3],
            "wakeups_per_s_all": sum(t[3] for t in per_thread), "threads": per_thread,
            "underrun_events": results[name].get("underrun_blocks"), "wall_s": results[name]["wall_s"],
        }
        say(f"{name}: {out[name]}")
    return out


def heard_per_kind(args, say):
    """set → heard on the clocked device, with rewind (defaults) and without (buffer 50 ms)."""
    constant = os.path.join(args.work, "constant.wav")
    bench.write_constant_wav(constant, int(args.tries * 0.35 + 10))
    out = {}
    builds = [("after", args.rampd)] + ([("before", args.before)] if args.before else [])
    for build, rampd in builds:
        for rewind in ("on", "off"):
            name = f"rampd {build}, clocked device, rewind {rewind}"
            daemon, raw, times = heard.clocked_daemon(args, args.work, f"heard-{build}-{rewind}", rewind=rewind, rampd=rampd)
            try:
                c = bench.Rampd(daemon.socket_path)
                status = c.request("status")["output"]
                sets = heard.send_sets(c, constant, args.tries, 0.25)
                final = c.request("status")["output"]
                c.close()
            finally:
                daemon.stop()
            find = heard.finder(*heard.read_recording(raw, times))
            latencies = [find(t0, value) - t0 for t0, value in sets]
            out[name] = {"median_ms": 1e3 * heard.percentile(latencies, 50), "p99_ms": 1e3 * heard.percentile(latencies, 99),
                         "max_ms": 1e3 * max(latencies), "tries": len(latencies), "buffer_ms": 1e3 * status["bufferFrames"] / 48000,
                         "rewinds": final.get("rewinds"), "device_underruns": final.get("underruns")}
            say(f"{name}: {out[name]}")
    return out


def main():
    parser = heard.clocked_arguments()
    parser.add_argument("--before", help="a second rampd build, measured beside --rampd")
    parser.add_argument("--track", required=True, help="the WAV played, inside a music directory")
    parser.add_argument("--seconds", type=float, required=True, help="its length")
    parser.add_argument("--loud-track", help="a WAV of the same length over the limiter's ceiling")
    parser.add_argument("--quiet-track", help="a WAV of the same length far under the limiter's ceiling")
    parser.add_argument("--results", required=True)
    args = parser.parse_args()
    say = lambda *a: print(*a, flush=True)
    results = {"playing": playing(args, say), "heard": heard_per_kind(args, say)}
    with open(args.results, "w") as f:
        json.dump(results, f, indent=1)
    print()
    print(f"| playing {args.seconds:g} s in real time, all at once | CPU s per minute (process) | without the test device's thread"
          " | render / output thread, ms per s | its wake-ups per s | wake-ups per s, all threads | underrun events |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, x in results["playing"].items():
        print(f"| {name} | {x['cpu_s_per_min']:.3f} | {x['cpu_s_per_min_without_device']:.3f} | {x['main_ms_per_s']:.3f} |"
              f" {x['main_wakeups_per_s']:.1f} | {x['wakeups_per_s_all']:.1f} | {x['underrun_events'] if x['underrun_events'] is not None else ''} |")
    played = results["playing"]
    pairs = [("the track above", "rampd after, null (pacing clock)", "rampd after, null (pacing clock), limiter off")]
    pairs += [(f"the {signal} track", f"rampd after, null (pacing clock), {signal} track, limiter on",
               f"rampd after, null (pacing clock), {signal} track, limiter off") for signal in ("loud", "quiet")]
    pairs = [p for p in pairs if p[1] in played and p[2] in played]
    if pairs:
        print()
        print("| the limiter, side by side (rampd on null) | render thread ms per s, on | off | on − off"
              " | CPU s per minute (process), on | off |")
        print("|---|---:|---:|---:|---:|---:|")
        for label, on, off in pairs:
            a, b = played[on], played[off]
            print(f"| {label} | {a['main_ms_per_s']:.3f} | {b['main_ms_per_s']:.3f} | {a['main_ms_per_s'] - b['main_ms_per_s']:+.3f} |"
                  f" {a['cpu_s_per_min']:.3f} | {b['cpu_s_per_min']:.3f} |")
    print()
    print("| `set` → first changed sample heard | buffer | median | p99 | max | rewinds | device underruns |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, x in results["heard"].items():
        print(f"| {name} ({x['tries']} tries) | {x['buffer_ms']:g} ms | {x['median_ms']:.1f} ms | {x['p99_ms']:.1f} ms |"
              f" {x['max_ms']:.1f} ms | {x['rewinds']} | {x['device_underruns']} |")


if __name__ == "__main__":
    main()
