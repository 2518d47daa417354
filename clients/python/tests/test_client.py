"""The Python client against a real rampd (conftest.py starts one per test)."""

import datetime
import json
import os
import socket
import subprocess
import sys
import time

import pytest

import rampd
from conftest import CHECKOUT, rampctl_binary

RATE = 48_000


def test_default_socket_follows_rampctls_rules():
    path = rampd.default_socket_path
    assert path({"RAMPD_SOCKET": "/a.sock", "RAMPD_SOCKET_PATH": "/b.sock"}, is_root=False) == "/a.sock"
    assert path({"RAMPD_SOCKET": "", "RAMPD_SOCKET_PATH": "/b.sock"}, is_root=False) == "/b.sock"
    assert path({"XDG_RUNTIME_DIR": "/run/user/1000/"}, is_root=False) == "/run/user/1000/rampd/rampd.sock"
    assert path({"XDG_RUNTIME_DIR": "/run/user/1000"}, is_root=True) == "/run/rampd/rampd.sock"
    assert path({"XDG_RUNTIME_DIR": "relative"}, is_root=False) == "/run/rampd/rampd.sock"
    assert path({}, is_root=False) == "/run/rampd/rampd.sock"


def test_connect_uses_the_environment(daemon, monkeypatch):
    monkeypatch.setenv("RAMPD_SOCKET", daemon.socket)
    with rampd.connect() as r:
        assert r.path == daemon.socket
        assert r.greeting.hello == "rampd" and r.greeting.protocol == rampd.PROTOCOL_VERSION


def test_a_missing_socket_is_a_clear_error(tmp_path):
    with pytest.raises(rampd.ConnectionClosed, match="cannot connect to rampd at .*nothing.sock"):
        rampd.connect(str(tmp_path / "nothing.sock"))


def test_replies_are_objects(client):
    assert client.ping().pong is True
    version = client.version()
    assert version.server == "rampd" and version.protocol == 1 and version.version == client.greeting.version
    status = client.status()
    assert status.output.rate == RATE and status.output.period_frames == status.output["periodFrames"] == 240
    assert status.streams == [] and status.clients == 1
    got = client.get("master.gain")
    assert got.model == 1 and got.range == [0, 1] and isinstance(got.sample, int)
    assert got.to_dict()["key"] == "master.gain"


def test_errors_carry_code_field_and_message(client):
    with pytest.raises(rampd.CommandError) as refused:
        client.fade(2, key="master.gain", duration=1)
    assert refused.value.code == "out-of-range" and refused.value.field == "to"
    with pytest.raises(rampd.CommandError) as typo:
        client.request("fade", key="master.gain", to=0, durtion=1)
    assert typo.value.code == "unknown-field" and typo.value.field == "durtion"
    assert "did you mean duration" in typo.value.message
    with pytest.raises(rampd.CommandError) as unknown:
        client.stop("nope")
    assert unknown.value.code == "unknown-stream" and unknown.value.field == "stream"
    assert isinstance(unknown.value.id, int)
    with pytest.raises(rampd.CommandError) as batch:
        client.batch([rampd.command("set", key="master.gain", value=0.5), rampd.command("get", key="streams.x.gain")])
    assert batch.value.code == "unknown-key-path" and batch.value.field == "commands[1].key"
    # The connection goes on after a refusal.
    assert client.ping().pong


def test_a_fade_made_from_python_is_heard(daemon, client):
    """The recorded samples fall along the fade: 0.5 to 0 over one second, linear."""
    client.play(daemon.constant_file("bed", 5, level=0.5), stream="bed")
    time.sleep(0.2)
    fade = client.fade(0, key="master.gain", duration=1, curve="linear")
    assert fade.key == "master.gain" and fade.to == 0 and fade.duration == 1
    done = client.wait(fade)
    assert [(a.id, a.finished) for a in done.animations] == [(fade.animation, True)]
    time.sleep(0.1)
    left = daemon.played(0)
    # After the stream's declick ramp up to 0.5, the first sample below it starts the fade.
    steady = next(i for i, s in enumerate(left) if s >= 0.4999)
    start = next(i for i in range(steady, len(left)) if left[i] < 0.4999)
    ramp = left[start - 1 : start + RATE]
    assert all(b <= a for a, b in zip(ramp, ramp[1:])), "the fade never rises"
    for fraction in (0.25, 0.5, 0.75):
        heard = left[start + int(fraction * RATE)]
        assert abs(heard - 0.5 * (1 - fraction)) < 0.01, f"{fraction:.0%} through the fade: {heard}"
    assert max(left[start + RATE + 480 :]) == 0, "silent after the fade"


def test_every_command_is_a_method(daemon, client):
    path = daemon.constant_file("one", 10)
    played = client.play(path, "one", gain=0.8, fade_in=0.05, curve="ease-in")
    assert played.stream == "one" and played.path == os.path.realpath(path) and played.animation > 0
    assert client.status().streams[0].stream == "one"
    paused = client.pause("one", fade=0.02)
    assert paused.streams == ["one"] and len(paused.animations) == 1
    client.wait(paused)
    assert client.status().streams[0].paused is True
    assert client.resume("one").streams == ["one"]
    assert client.seek("one", 2.5).position == 2.5
    implicit = client.set("streams.one.pan", -0.5, duration=0.05)
    assert implicit.value == -0.5 and implicit.animation > 0
    faded_in = client.fade_in("streams.one.gain", duration=0.05)
    assert faded_in.to == 1
    swell = client.animate(
        "master.gain",
        {"type": "keyframe", "values": [0.2, 1, 0.6], "key_times": [0, 0.3, 1], "duration": 8},
        name="swell",
    )
    listed = client.list("master")
    assert [a.name for a in listed.properties[0].animations] == ["swell"]
    assert listed.properties[0].animations[0].id == swell.animation
    held = client.cancel("master.gain")
    assert 0.2 <= held.value <= 1
    client.animate("master.gain", {"type": "basic", "to": 0.5, "duration": 60}, name="lfo")
    assert client.remove("master.gain", "lfo").value == held.value
    assert client.subscribe(["stream-ended"]).events == ["stream-ended"]
    assert client.subscribe("underrun").events == ["stream-ended", "underrun"]
    assert client.unsubscribe().events == []
    assert client.observe("master.gain", rate=10).rate == 10
    assert client.unobserve().keys == ["master.gain"]
    client.play(path, "two")
    out = client.fade_out("streams.two.gain", duration=0.05, then="stop")
    assert out.streams == ["two"]
    client.wait(out)
    deadline = time.monotonic() + 5
    while len(client.status().streams) > 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert [s.stream for s in client.status().streams] == ["one"], "fade_out then stop ended the stream"
    result = client.batch([rampd.command("set", key="master.gain", value=0.5, duration=0), rampd.command("ping")])
    assert result.results[0].value == 0.5 and result.results[1].pong is True


def test_wait_timeout_is_a_command_error(client):
    long = client.fade(0, key="master.gain", duration=30)
    with pytest.raises(rampd.CommandError) as late:
        client.wait(long, timeout=0.1)
    assert late.value.code == "timeout" and late.value.field == "timeout"
    assert client.ping().pong, "the connection goes on"


def test_events_arrive_through_the_iterator(daemon, client):
    client.subscribe(["animation-started", "animation-finished", "stream-started"])
    client.play(daemon.constant_file("one", 2), stream="one")
    fade = client.fade(0.5, key="streams.one.gain", duration=0.1, name="dip")
    seen = []
    for event in client.events(timeout=5):
        seen.append(event)
        if event.event == "animation-finished" and event.id == fade.animation:
            break
    kinds = [(e.event, e.get("name")) for e in seen]
    assert kinds[0] == ("stream-started", None)
    assert ("animation-started", "dip") in kinds and kinds[-1] == ("animation-finished", "dip")
    assert seen[-1].finished is True and seen[-1].key == "streams.one.gain"
    # Only the kinds asked for, and the iteration ends when nothing comes.
    client.fade(0.4, key="streams.one.gain", duration=0.05)
    assert [e.event for e in client.events("animation-started", timeout=1)] == ["animation-started"]


def test_observed_values_follow_a_fade(client):
    client.observe("master.gain", rate=100)
    client.fade(0.2, key="master.gain", duration=0.5, curve="linear")
    values = []
    for value in client.values("master.gain", timeout=3):
        assert value.key == "master.gain"
        values.append((value.sample, value.value))
        if value.value == pytest.approx(0.2):
            break
    assert values[-1][1] == pytest.approx(0.2), values
    assert len(values) >= 5, "values reported along the way"
    assert all(b[1] <= a[1] and b[0] > a[0] for a, b in zip(values, values[1:])), values
    client.unobserve("master.gain")


def test_a_timeline_runs_each_line_at_its_time(daemon, client, tmp_path):
    script = tmp_path / "show.jsonl"
    script.write_text(
        "# a timeline\n"
        '{"cmd": "get", "key": "master.gain"}\n'
        '{"at": 0.5, "cmd": "set", "key": "master.gain", "value": "50%", "duration": 0}\n'
        '{"at": "1s", "cmd": "get", "key": "master.gain"}\n'
        "\n"
        '{"at": 2, "id": 99, "cmd": "get", "key": "master.gain"}\n'
    )
    started = time.monotonic()
    outcomes = client.run_timeline(script, rampctl=rampctl_binary())
    assert time.monotonic() - started >= 1.9, "the last line replied when it took effect"
    assert [o.label for o in outcomes] == [f"{script}:{n}" for n in (2, 3, 4, 6)]
    first, setting, after, last = (o.result for o in outcomes)
    assert first.model == 1 and setting.value == 0.5 and after.model == 0.5
    # Dated 1 s apart, they take effect 1 s of samples apart: rampd turns a date into a sample when
    # the request arrives, so a render thread that falls behind the clock on an overloaded test
    # machine shifts that by as much as it fell behind (0.12 s seen at a load of 15 on 2 cores).
    assert abs(last.sample - after.sample - RATE) <= 0.2 * RATE


def test_a_timeline_reports_bad_lines_before_sending_and_stops_at_a_refusal(client, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        '{"cmd": "ping"}\nnot json\n[1]\n{"at": -1, "cmd": "ping"}\n{"at": "tomorrow", "cmd": "ping"}\n'
        '{"at": 1, "cmd": "set", "key": "master.gain", "value": 0.5, "ack": "scheduled"}\n'
    )
    with pytest.raises(rampd.TimelineError) as problems:
        client.run_timeline(bad, rampctl=rampctl_binary())
    assert [p.split(":")[1] for p in problems.value.problems] == ["2", "3", "4", "5", "6"]
    assert "ack: a timeline line's at counts from the timeline's start" in problems.value.problems[-1]
    assert problems.value.outcomes == []
    assert client.get("master.gain").model == 1
    refused = ['{"cmd": "set", "key": "master.gain", "value": 2}', '{"cmd": "set", "key": "master.gain", "value": 0.3}']
    with pytest.raises(rampd.TimelineError) as refusal:
        client.run_timeline(refused, rampctl=rampctl_binary())
    assert refusal.value.problems[0].startswith("<stdin>:1: out-of-range")
    assert [o.label for o in refusal.value.outcomes] == ["<stdin>:1"]
    assert client.get("master.gain").model == 1, "the line after the refused one was not applied"
    outcomes = client.run_timeline(refused, check=False, rampctl=rampctl_binary())
    assert [o.ok for o in outcomes] == [False]
    assert outcomes[0].error.code == "out-of-range" and outcomes[0].error.field == "value"


def _without_samples(value):
    """A reply without its `sample` members (the output's clock: where a run started)."""
    if isinstance(value, dict):
        return {key: _without_samples(member) for key, member in value.items() if key != "sample"}
    if isinstance(value, list):
        return [_without_samples(member) for member in value]
    return value


def test_a_timeline_is_the_same_through_rampctl_and_python(daemon, tmp_path, another_daemon):
    """One timeline (units, a relative path, two lines at one `at`, a refused line, a line after
    it) through `rampctl batch` against one rampd and through the Python client against another:
    the same replies, the same recording."""
    show = tmp_path / "show"
    show.mkdir()
    bed = daemon.constant_file("bed", 5, level=0.5)
    os.rename(bed, show / "bed.wav")
    script = show / "show.jsonl"
    script.write_text(
        '{"cmd": "play", "path": "bed.wav", "stream": "bed", "gain": "-6dB"}\n'
        '{"at": "500ms", "cmd": "fade", "key": "streams.bed.gain", "to": "-12dB", "duration": "200ms"}\n'
        '{"at": 0.5, "cmd": "set", "key": "master.gain", "value": "50%", "duration": "100ms"}\n'
        '{"at": "1s", "cmd": "set", "key": "master.gain", "value": 2}\n'
        '{"at": "1.5s", "cmd": "set", "key": "master.gain", "value": 0}\n'
    )
    # Run from elsewhere: "bed.wav" is the timeline's, not the current directory's.
    through_rampctl = subprocess.run(
        [rampctl_binary(), "batch", str(script), "--socket", daemon.socket, "--json"],
        capture_output=True, text=True, cwd="/",
    )
    assert through_rampctl.returncode == 65, through_rampctl.stderr
    with rampd.connect(another_daemon.socket) as client:
        with pytest.raises(rampd.TimelineError) as stopped:
            client.run_timeline(script, rampctl=rampctl_binary())
    assert stopped.value.problems == [line.removeprefix("rampctl: ") for line in through_rampctl.stderr.splitlines()]
    assert stopped.value.problems[0].startswith(f"{script}:4: out-of-range")
    replies = [json.loads(line) for line in through_rampctl.stdout.splitlines()]
    relayed = [
        {"line": o.label, "cmd": o.cmd, "ok": o.ok}
        | ({"result": o.result.to_dict()} if o.ok else {"error": o.error.reply["error"].to_dict()})
        for o in stopped.value.outcomes
    ]
    assert [_without_samples(r) for r in relayed] == [_without_samples(r) for r in replies]
    # In the order answered: line 4 is refused as it arrives, 1 s ahead; 2 and 3 apply at 0.5 s.
    replies.sort(key=lambda r: int(r["line"].rsplit(":", 1)[1]))
    assert [(r["line"].rsplit(":", 1)[1], r["cmd"], r["ok"]) for r in replies] == [
        ("1", "play", True), ("2", "fade", True), ("3", "set", True), ("4", "set", False)
    ]
    assert replies[0]["result"]["path"] == os.path.realpath(show / "bed.wav")
    assert replies[3]["error"]["field"] == "value"
    # The two lines at 0.5 s went as one batch: they took effect on one sample.
    assert replies[1]["result"].get("sample") == replies[2]["result"].get("sample")
    time.sleep(1.0)
    recordings = [d.played(0) for d in (daemon, another_daemon)]
    daemon.stop()
    another_daemon.stop()
    aligned = []
    for left in recordings:
        onset = next(i for i, s in enumerate(left) if s != 0)
        loud = next(i for i in range(onset, len(left)) if left[i] == left[onset + RATE // 4])
        ramp = next(i for i in range(loud, len(left)) if left[i] != left[loud])
        aligned.append((left[onset : onset + RATE // 4], left[loud], left[ramp - 1 : ramp + RATE // 2], left[-RATE // 2 :], ramp - onset))
    first, second = aligned
    assert first[0] == second[0], "the play's ramp in (-6 dB), sample for sample"
    assert first[1] == second[1] == pytest.approx(0.5 * 10 ** (-6 / 20)), "the -6 dB plateau"
    assert first[2] == second[2], "the two lines at 0.5 s, from one sample on, sample for sample"
    end = 0.5 * 10 ** (-12 / 20) * 0.5
    assert set(first[3]) == set(second[3]) and len(set(first[3])) == 1, "a level held to the end"
    assert first[3][0] == pytest.approx(end, rel=1e-4), "-12 dB and master 50 %: the 1.5 s line not applied"
    # The lines at 0.5 s came 0.5 s after the play (dates: give or take a loaded machine's delay).
    assert all(abs(a[4] - RATE // 2) <= 0.2 * RATE for a in aligned), [a[4] for a in aligned]


def test_every_protocol_command_is_a_method():
    """Every command PROTOCOL.md §5 describes has a method (duck-add: duck_add)."""
    import re

    text = (CHECKOUT / "PROTOCOL.md").read_text()
    section = text[text.index("## 5. Commands") : text.index("## 6. Events")]
    names = set()
    for heading in re.findall(r"^### (.*)$", section, re.M):
        heading = heading.split(":", 1)[-1].replace("play with queue", "")
        names |= {name.strip() for name in heading.split(",") if name.strip()}
    assert {"duck-add", "queue-add", "next", "previous", "seek"} <= names
    missing = sorted(name for name in names if not callable(getattr(rampd.Client, name.replace("-", "_"), None)))
    assert missing == []


def test_a_field_named_id_is_refused(client):
    with pytest.raises(ValueError) as refused:
        client.request("unschedule", id=37)
    assert str(refused.value).startswith("id: ") and "schedule=" in str(refused.value)
    assert client.ping().pong, "nothing was sent; the connection goes on"


def test_queue_and_duck_methods(daemon, client):
    one, two = daemon.constant_file("one", 3, level=0.25), daemon.constant_file("two", 3, level=0.5)
    assert client.play(one, "q", queue=[two], skip_crossfade=0.05).stream == "q"
    assert [item.path for item in client.queue_list("q").queue["items"]] == [os.path.realpath(p) for p in (one, two)]
    assert len(client.queue_add("q", one).queue["items"]) == 3
    assert len(client.queue_remove("q", 2).queue["items"]) == 2
    assert client.next("q").index == 1
    assert client.previous("q").index == 0
    assert len(client.queue_clear("q").queue["items"]) == 1
    assert client.duck_add("talk", "master.gain", depth=6).rule == "talk"
    assert client.duck("talk").rule == "talk"
    assert client.duck_list().ducks[0].manual is True
    assert client.unduck("talk").rule == "talk"
    assert client.duck_remove("talk").rule == "talk"


def test_at_accepts_a_datetime_and_replies_when_it_takes_effect(client):
    sent = time.monotonic()
    due = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=0.5)
    assert client.ping(at=due).pong is True
    assert time.monotonic() - sent >= 0.4
    scheduled = client.set("master.gain", 0.3, duration=0, at=3600, ack="scheduled")
    assert scheduled.scheduled > 0 and scheduled.due.endswith("Z")


def test_python_half_close_gets_every_reply(daemon):
    """shutdown(SHUT_WR) after sendall, as a script does: every reply, in order, then the end."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as raw:
        raw.settimeout(10)
        raw.connect(daemon.socket)
        raw.sendall(b"".join(b'{"id":%d,"cmd":"get","key":"master.gain"}\n' % i for i in range(1, 101)))
        raw.shutdown(socket.SHUT_WR)
        received = b""
        while chunk := raw.recv(65536):
            received += chunk
    lines = [json.loads(line) for line in received.splitlines()]
    assert lines[0]["hello"] == "rampd"
    assert [(line["id"], line["ok"]) for line in lines[1:]] == [(i, True) for i in range(1, 101)]


def test_pip_installs_the_package_from_the_checkout(tmp_path, daemon):
    """`pip install ./clients/python` into a fresh environment; the installed module talks to rampd."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(tmp_path / "env")], check=True)
    python = str(tmp_path / "env" / "bin" / "python")
    subprocess.run(
        [python, "-m", "pip", "install", "--quiet", "--no-index", package], check=True
    )
    probe = (
        "import rampd, sys; "
        "assert 'site-packages' in rampd.__file__, rampd.__file__; "
        "print(rampd.connect(sys.argv[1]).ping().pong)"
    )
    outcome = subprocess.run([python, "-c", probe, daemon.socket], capture_output=True, text=True, cwd=tmp_path)
    assert outcome.returncode == 0, outcome.stderr
    assert outcome.stdout.strip() == "True"


def _steady_runs(samples, minimum):
    """(start, end, level) of runs of at least `minimum` equal samples."""
    runs, start = [], 0
    for i in range(1, len(samples) + 1):
        if i == len(samples) or samples[i] != samples[start]:
            if i - start >= minimum:
                runs.append((start, i, samples[start]))
            start = i
    return runs


def test_readme_alarm(daemon, client):
    """The README's alarm, with times a moment away: silence, a rise, a fall, then the stream stops."""
    alarm = daemon.constant_file("alarm", 1, level=0.5)
    now = datetime.datetime.now(datetime.timezone.utc)
    wake, off = now + datetime.timedelta(seconds=1.5), now + datetime.timedelta(seconds=2.5)
    r = client
    r.play(alarm, stream="alarm", loop=True, fade_in=0.5, at=wake, ack="scheduled")
    r.fade_out("streams.alarm.gain", duration=0.3, then="stop", at=off, ack="scheduled")
    assert len(r.status().scheduled) == 2
    deadline = time.monotonic() + 10
    while (r.status().streams or r.status().scheduled) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert r.status().streams == [], "the alarm stopped"
    left = daemon.played(0)
    loud = [i for i, s in enumerate(left) if s > 0]
    first, last = loud[0], loud[-1]
    # It rises for 0.5 s (the fade-in), holds at 0.5 (looping), falls over 0.3 s, then silence.
    assert left[first + RATE // 4] == pytest.approx(0.25, abs=0.02)
    holds = [run for run in _steady_runs(left[first:last], RATE // 10) if run[2] == pytest.approx(0.5)]
    assert holds, "the alarm held its level between the fades"
    assert 0.3 * RATE * 0.9 <= last - (first + holds[-1][1]) <= 0.3 * RATE * 1.2
    # Both were scheduled by date: from the wake-up to silence is 1 s and the 0.3 s fall (give or
    # take what an overloaded machine shifts, as in the timeline test).
    assert (last - first) / RATE == pytest.approx(1.3, abs=0.2)


def test_readme_duck_around_a_jingle(daemon, client):
    """The README's duck: the show dips to 0.2 while the jingle plays, then comes back to 1."""
    show = daemon.constant_file("show", 10, level=0.25)
    jingle = daemon.constant_file("news", 0.5, level=0.5)
    r = client
    r.play(show, stream="show")
    time.sleep(0.5)
    r.subscribe("stream-ended")
    r.wait(r.fade(0.2, key="streams.show.gain", duration=0.5, space="db"))
    r.play(jingle, stream="jingle")
    next(e for e in r.events() if e.stream == "jingle")
    r.wait(r.fade(1, key="streams.show.gain", duration=1.5, space="db"))
    time.sleep(0.4)
    left = daemon.played(0)
    levels = [round(run[2], 4) for run in _steady_runs(left, RATE // 4)]
    # The show alone (0.25); with the jingle (0.5) over the show ducked to 0.2 (0.05); back.
    assert levels == [0.25, 0.55, 0.25], levels
    # Ducked before and after the jingle: the show at 0.05 alone, briefly.
    assert 0.05 in {round(s, 4) for s in left}
