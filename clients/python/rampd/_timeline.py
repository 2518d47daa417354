"""Timeline files, as `rampctl batch` runs them: one request object per line, each with an
optional `at`."""

import datetime
import json
import os
import time

from ._client import CommandError, Error, rfc3339


class TimelineError(Error):
    """A timeline that could not run (`problems`: every bad line, as `file:line: message`; nothing
    was sent), or that rampd refused lines of (`outcomes`: every line's outcome, all of them ran)."""

    def __init__(self, problems, outcomes=None):
        super().__init__("\n".join(problems))
        self.problems = problems
        self.outcomes = outcomes


class TimelineOutcome:
    """One line of a timeline: `label` (`file:line`), `request` (as sent, without `at`), `due`
    (seconds from the start, or None for a date), and `result` (a Record) or `error` (a
    `CommandError`)."""

    def __init__(self, label, request, at):
        self.label = label
        self.request = request
        self.at = at
        self.result = None
        self.error = None

    @property
    def due(self):
        return self.at if isinstance(self.at, (int, float)) else None

    @property
    def ok(self):
        return self.error is None

    def __repr__(self):
        outcome = f"error={self.error}" if self.error else f"result={self.result!r}"
        return f"TimelineOutcome({self.label}, {self.request.get('cmd')}, {outcome})"


def _lines(source):
    """(name, text lines) from a path, a file object or an iterable of lines (str or dict)."""
    if isinstance(source, (str, os.PathLike)):
        with open(source, encoding="utf-8") as file:
            return os.fspath(source), file.read().split("\n")
    if hasattr(source, "read"):
        return getattr(source, "name", "<timeline>"), source.read().split("\n")
    return "<timeline>", list(source)


def _rfc3339_seconds(text):
    """Unix seconds of an RFC 3339 date and time with a zone, or None."""
    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None
    return None if moment.tzinfo is None else moment.timestamp()


def parse_timeline(source):
    """The lines of a timeline, checked: a list of `TimelineOutcome`s not yet run. Each line is a
    request object as in PROTOCOL.md (protocol values: numbers in seconds and amplitudes), with an
    optional `at`: seconds from the start of the timeline, or an RFC 3339 date and time; blank
    lines and lines starting with `#` are skipped, and so is an `id` (the client chooses ids).
    Every bad line is reported at once in a `TimelineError`."""
    name, lines = _lines(source)
    entries, problems = [], []
    for number, line in enumerate(lines, start=1):
        label = f"{name}:{number}"
        if isinstance(line, dict):
            request = dict(line)
        else:
            text = line.strip()
            if not text or text.startswith("#"):
                continue
            try:
                request = json.loads(text)
            except ValueError as error:
                problems.append(f"{label}: not JSON ({error})")
                continue
        if not isinstance(request, dict):
            problems.append(f"{label}: expected a request object, got {json.dumps(request)}")
            continue
        if not isinstance(request.get("cmd"), str):
            problems.append(f"{label}: cmd: missing, expected the command's name")
            continue
        at = request.pop("at", None)
        request.pop("id", None)
        if isinstance(at, bool) or not (at is None or isinstance(at, (int, float, str))):
            problems.append(f"{label}: at: expected seconds from the start or an RFC 3339 date, got {json.dumps(at)}")
            continue
        if isinstance(at, (int, float)) and not (0 <= at < float("inf")):
            problems.append(f"{label}: at: expected seconds >= 0, got {at}")
            continue
        if isinstance(at, str) and _rfc3339_seconds(at) is None:
            problems.append(f"{label}: at: expected an RFC 3339 date and time such as 2026-11-21T07:30:00Z, got {at!r}")
            continue
        entries.append(TimelineOutcome(label, request, at))
    if problems:
        raise TimelineError(problems)
    return entries


def run_timeline(client, source, lead=1.0, check=True):
    entries = parse_timeline(source) if not isinstance(source, list) or not all(
        isinstance(e, TimelineOutcome) for e in source) else source
    start = time.time()
    clock = time.monotonic()
    queue = sorted(entries, key=lambda e: e.due if e.due is not None else 0)
    waiting = {}
    for entry in queue:
        offset = entry.due if entry.due is not None else 0
        pause = offset - lead - (time.monotonic() - clock)
        if pause > 0:
            _collect(client, waiting, pause)
        fields = {key: value for key, value in entry.request.items() if key != "cmd"}
        if entry.due is not None and entry.due > 0:
            fields["at"] = rfc3339(start + entry.due)
        elif isinstance(entry.at, str):
            fields["at"] = entry.at
        waiting[client.send(entry.request["cmd"], **fields)] = entry
    while waiting:
        _collect(client, waiting, None)
    refused = [entry for entry in entries if entry.error is not None]
    if check and refused:
        raise TimelineError([f"{entry.label}: {entry.error}" for entry in refused], entries)
    return entries


def _collect(client, waiting, seconds):
    """Files the replies that arrive within `seconds` (None: until one does)."""
    deadline = None if seconds is None else time.monotonic() + seconds
    while waiting:
        for id in [id for id in waiting if id in client._replies]:
            entry = waiting.pop(id)
            try:
                entry.result = client.reply(id, timeout=0)
            except CommandError as error:
                entry.error = error
        if not waiting:
            return
        if not client._pump(deadline):
            return
