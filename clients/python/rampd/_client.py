"""The connection to rampd: requests and their replies, events, observed values."""

import collections
import datetime
import json
import os
import socket
import time

PROTOCOL_VERSION = 1
"""The protocol this client speaks (the greeting's `protocol`)."""

_UNSET = object()


def default_socket_path(environ=None, is_root=None):
    """The socket rampctl would use: $RAMPD_SOCKET, else $RAMPD_SOCKET_PATH (rampd's own
    `socket.path` variable), else $XDG_RUNTIME_DIR/rampd/rampd.sock for a user (not root, with an
    absolute XDG_RUNTIME_DIR), else /run/rampd/rampd.sock. Empty values count as unset."""
    env = os.environ if environ is None else environ
    for name in ("RAMPD_SOCKET", "RAMPD_SOCKET_PATH"):
        if env.get(name):
            return env[name]
    root = os.geteuid() == 0 if is_root is None else is_root
    runtime = env.get("XDG_RUNTIME_DIR") or ""
    if not root and runtime.startswith("/"):
        return (runtime[:-1] if runtime.endswith("/") else runtime) + "/rampd/rampd.sock"
    return "/run/rampd/rampd.sock"


class Error(Exception):
    """Anything that went wrong talking to rampd."""


class ConnectionClosed(Error):
    """rampd closed the connection (it said why in `reason` when it did, e.g. an idle timeout)."""

    def __init__(self, message, reason=None):
        super().__init__(message)
        self.reason = reason


class CommandError(Error):
    """rampd refused a request (or the connection): `code` is the protocol's stable error code
    (PROTOCOL.md §7), `field` the full path of the field at fault or None, `message` for people,
    `id` the request's id."""

    def __init__(self, code, message, field=None, id=None, reply=None):
        super().__init__(f"{code}: {message}" if field is None else f"{code} ({field}): {message}")
        self.code = code
        self.message = message
        self.field = field
        self.id = id
        self.reply = reply

    @classmethod
    def from_reply(cls, reply):
        error = reply.get("error") or {}
        return cls(
            error.get("code", "internal-error"), error.get("message", ""), error.get("field"), reply.get("id"), reply
        )


def _camel(name):
    """`fade_in` -> `fadeIn`, `from_` -> `from`; names without `_` are kept."""
    name = name.rstrip("_")
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _snake(name):
    return "".join("_" + c.lower() if c.isupper() else c for c in name)


def rfc3339(moment):
    """An `at` date: a datetime (naive ones are local time) or Unix seconds, as RFC 3339 in UTC."""
    if not isinstance(moment, datetime.datetime):
        moment = datetime.datetime.fromtimestamp(moment, datetime.timezone.utc)
    text = moment.astimezone(datetime.timezone.utc).isoformat(timespec="microseconds")
    return text.replace("+00:00", "Z")


def _wire(value):
    """A Python value as the protocol's JSON: keys in camelCase, dates as RFC 3339."""
    if isinstance(value, Record):
        value = value.to_dict()
    if isinstance(value, dict):
        return {_camel(key): _wire(member) for key, member in value.items() if member is not None}
    if isinstance(value, (list, tuple)):
        return [_wire(member) for member in value]
    if isinstance(value, datetime.datetime):
        return rfc3339(value)
    return value


def command(cmd, **fields):
    """A request object without id, for `batch` and timelines: `command("fade", key="master.gain",
    to=0, duration=2)`. Fields that are None are left out; snake_case names become camelCase."""
    return {"cmd": cmd, **_wire(fields)}


class Record:
    """A JSON object from rampd: members as attributes (`reply.animation`, `status.output.rate`,
    camelCase members also in snake_case: `period_frames`) or items (`reply["periodFrames"]`)."""

    __slots__ = ("_data",)

    def __init__(self, data=()):
        object.__setattr__(self, "_data", dict(data))

    def __getattr__(self, name):
        data = object.__getattribute__(self, "_data")
        if name in data:
            return data[name]
        camel = _camel(name)
        if camel in data:
            return data[camel]
        raise AttributeError(f"no member {name!r} (members: {', '.join(data) or 'none'})")

    def __setattr__(self, name, value):
        raise AttributeError("a reply is read-only")

    def __getitem__(self, key):
        return self._data[key]

    def __contains__(self, key):
        return key in self._data

    def __iter__(self):
        return iter(self._data)

    def __len__(self):
        return len(self._data)

    def __eq__(self, other):
        if isinstance(other, Record):
            return self._data == other._data
        return self._data == other

    def __repr__(self):
        return "Record(" + ", ".join(f"{key}={value!r}" for key, value in self._data.items()) + ")"

    def __dir__(self):
        return sorted(set(self._data) | {_snake(key) for key in self._data})

    def get(self, key, default=None):
        return self._data.get(key, default)

    def to_dict(self):
        """The plain JSON value (nested records too)."""

        def plain(value):
            if isinstance(value, Record):
                return {key: plain(member) for key, member in value._data.items()}
            if isinstance(value, list):
                return [plain(member) for member in value]
            return value

        return plain(self)


def connect(path=None, timeout=10.0):
    """Connects to rampd (at `path`, else `default_socket_path()`) and reads its greeting."""
    return Client(path, timeout=timeout)


def _animation_ids(animations):
    """Ids from ints, results of `fade`/`set`/`play`/`animate` (`animation`) or of
    `stop`/`pause`/`resume`/`fade_out(then=...)` (`animations`), or lists of those."""
    if animations is None:
        return None
    if isinstance(animations, (Record, dict)):
        if "animations" in animations:
            return [i for i in animations["animations"] if i is not None]
        found = animations.get("animation")
        return [] if found is None else [found]
    if isinstance(animations, (list, tuple)):
        return [i for item in animations for i in _animation_ids(item)]
    return [animations]


class Client:
    """One connection to rampd. Each method sends one request and returns its result (a `Record`)
    or raises `CommandError`; events and observed values that arrive meanwhile are kept for
    `events()` and `values()`. Not for use by several threads at once.

    `timeout` bounds the wait for an ordinary reply (seconds, None: no bound); a `wait`, and a
    command with `at` (answered when it takes effect), wait as long as it takes."""

    def __init__(self, path=None, timeout=10.0):
        self.path = path or default_socket_path()
        self.timeout = timeout
        self._buffer = bytearray()
        self._ended = False
        self._events = collections.deque()
        self._replies = {}
        self._unaddressed = []
        self._next_id = 0
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._socket.connect(self.path)
        except OSError as error:
            self._socket.close()
            raise ConnectionClosed(f"cannot connect to rampd at {self.path}: {error.strerror or error}") from error
        try:
            greeting = self._read_line(self._deadline(self.timeout))
            if greeting is None:
                raise Error(f"no greeting from {self.path} in {self.timeout} s")
            if greeting.get("ok") is False:
                raise CommandError.from_reply(greeting)
            if greeting.get("hello") != "rampd":
                raise Error(f"{self.path} is not rampd: it said {greeting.to_dict()}")
            if greeting.get("protocol") != PROTOCOL_VERSION:
                raise Error(
                    f"rampd speaks protocol {greeting.get('protocol')}; this client speaks {PROTOCOL_VERSION}"
                )
        except BaseException:
            self._socket.close()
            raise
        self.greeting = greeting
        """The greeting: `hello`, `version` (the daemon's release), `protocol`."""

    # ------------------------------------------------------------------ the connection

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self._socket.close()

    def fileno(self):
        """The socket, for select(): readable when a line (reply or event) may be read."""
        return self._socket.fileno()

    @staticmethod
    def _deadline(timeout):
        return None if timeout is None else time.monotonic() + timeout

    def _read_line(self, deadline):
        """The next line as a Record; None when the deadline passed first."""
        while True:
            newline = self._buffer.find(b"\n")
            if newline >= 0:
                line = bytes(self._buffer[:newline])
                del self._buffer[: newline + 1]
                if line.strip():
                    return json.loads(line, object_hook=Record)
                continue
            if self._ended:
                reason = self._unaddressed[-1] if self._unaddressed else None
                said = f": {reason.error.message}" if reason is not None else ""
                raise ConnectionClosed(f"rampd closed the connection{said}", reason)
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return None
            self._socket.settimeout(remaining)
            try:
                data = self._socket.recv(65536)
            except socket.timeout:
                return None
            except ConnectionResetError:
                data = b""
            if not data:
                self._ended = True
            self._buffer += data

    def _pump(self, deadline):
        """Reads one line and files it (event, reply, or a reply with no id); False on timeout."""
        line = self._read_line(deadline)
        if line is None:
            return False
        if "event" in line:
            self._events.append(line)
        elif line.get("id") is not None:
            self._replies[line["id"]] = line
        else:
            self._unaddressed.append(line)
        return True

    # ------------------------------------------------------------------ requests

    def send(self, cmd, **fields):
        """Sends a request without waiting; returns its id, for `reply()`. Fields that are None
        are left out; snake_case names become camelCase (`fade_in` -> `fadeIn`, `from_` -> `from`)."""
        if "id" in fields:
            raise ValueError(
                "id: a request's id is the client's to choose (send() returns it); unschedule's schedule id is "
                "schedule=, e.g. unschedule(schedule=37)"
            )
        self._next_id += 1
        request = {"id": self._next_id, "cmd": cmd, **_wire(fields)}
        line = json.dumps(request, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        self._socket.settimeout(self.timeout)
        self._socket.sendall(line.encode() + b"\n")
        return self._next_id

    def reply(self, id, timeout=_UNSET):
        """The result of request `id` (waiting for it: `timeout` seconds, by default the
        client's), or `CommandError`. `TimeoutError` when it did not come in time."""
        timeout = self.timeout if timeout is _UNSET else timeout
        deadline = self._deadline(timeout)
        while id not in self._replies:
            if not self._pump(deadline):
                raise TimeoutError(f"no reply to request {id} from rampd in {timeout} s")
        line = self._replies.pop(id)
        if line.get("ok") is True:
            return line.get("result") or Record()
        raise CommandError.from_reply(line)

    def request(self, cmd, **fields):
        """Sends any request and returns its result: `request("fade", key="master.gain", to=0)`."""
        slow = cmd == "wait" or (fields.get("at") is not None and fields.get("ack") != "scheduled")
        return self.reply(self.send(cmd, **fields), timeout=None if slow else _UNSET)

    # ------------------------------------------------------------------ events

    def _next_event(self, wanted, timeout):
        """The first kept or arriving event `wanted` accepts; None after `timeout` seconds
        without one (None: no limit)."""
        deadline = self._deadline(timeout)
        checked = 0
        while True:
            while checked < len(self._events):
                if wanted(self._events[checked]):
                    event = self._events[checked]
                    del self._events[checked]
                    return event
                checked += 1
            if not self._pump(deadline):
                return None

    def events(self, kinds=None, timeout=None):
        """Iterates over events (subscribe to them first), oldest first: those that came while
        waiting for replies, then as they arrive. `kinds` (a kind or a list) keeps only those;
        the iteration ends after `timeout` seconds without one (None: never). Observed values
        are left for `values()`."""
        if isinstance(kinds, str):
            kinds = [kinds]
        wanted = set(kinds) if kinds is not None else None
        while True:
            event = self._next_event(
                lambda e: e.event != "value" and (wanted is None or e.event in wanted), timeout
            )
            if event is None:
                return
            yield event

    def values(self, key=None, timeout=None):
        """Iterates over the `value` events of `observe` (each with `key`, `value`, `sample`),
        for `key` or every observed key path; ends after `timeout` seconds without one."""
        while True:
            event = self._next_event(lambda e: e.event == "value" and (key is None or e.key == key), timeout)
            if event is None:
                return
            yield event

    # ------------------------------------------------------------------ timelines

    def run_timeline(self, source, check=True, rampctl=None):
        """Runs a timeline with `rampctl batch` (on a connection of its own to this client's
        rampd): `source` is a file's path (its relative paths taken from its directory), a file
        object or an iterable of lines (str, or dicts; their relative paths taken from the
        current directory). `rampctl` is its path (default: on PATH, else beside rampd). Returns
        one `TimelineOutcome` per line rampd answered; a refused line stops the run, and with
        `check` raises `TimelineError`. A timeline with bad lines raises `TimelineError` with
        nothing sent."""
        from ._timeline import run_timeline

        return run_timeline(self.path, source, check=check, rampctl=rampctl)

    # ------------------------------------------------------------------ commands (PROTOCOL.md §5)
    # Each takes the command's fields, and `at`/`ack` (§3) and any other field as keywords.

    def ping(self, **common):
        return self.request("ping", **common)

    def version(self, **common):
        return self.request("version", **common)

    def status(self, **common):
        return self.request("status", **common)

    def play(self, path, stream=None, *, gain=None, fade_in=None, curve=None, loop=None, paused=None, queue=None,
             crossfade=None, crossfade_curve=None, skip_crossfade=None, skip_curve=None, crossfade_level=None,
             crossfade_window=None, **common):
        return self.request(
            "play", path=path, stream=stream, gain=gain, fade_in=fade_in, curve=curve, loop=loop, paused=paused,
            queue=queue, crossfade=crossfade, crossfade_curve=crossfade_curve, skip_crossfade=skip_crossfade,
            skip_curve=skip_curve, crossfade_level=crossfade_level, crossfade_window=crossfade_window, **common,
        )

    def stop(self, stream=None, *, fade=None, curve=None, **common):
        return self.request("stop", stream=stream, fade=fade, curve=curve, **common)

    def pause(self, stream=None, *, fade=None, curve=None, **common):
        return self.request("pause", stream=stream, fade=fade, curve=curve, **common)

    def resume(self, stream=None, *, fade=None, curve=None, **common):
        return self.request("resume", stream=stream, fade=fade, curve=curve, **common)

    def seek(self, stream, position, **common):
        return self.request("seek", stream=stream, position=position, **common)

    def fade(self, to, key=None, *, duration=None, curve=None, space=None, db_floor=None, continuity=None,
             name=None, from_=None, **common):
        return self.request(
            "fade", key=key, to=to, from_=from_, duration=duration, curve=curve, space=space, db_floor=db_floor,
            continuity=continuity, name=name, **common,
        )

    def fade_in(self, key=None, *, to=None, duration=None, curve=None, space=None, db_floor=None,
                continuity=None, name=None, from_=None, **common):
        return self.request(
            "fade-in", key=key, to=to, from_=from_, duration=duration, curve=curve, space=space,
            db_floor=db_floor, continuity=continuity, name=name, **common,
        )

    def fade_out(self, key=None, *, to=None, duration=None, curve=None, space=None, db_floor=None,
                 continuity=None, name=None, from_=None, then=None, **common):
        return self.request(
            "fade-out", key=key, to=to, from_=from_, duration=duration, curve=curve, space=space,
            db_floor=db_floor, continuity=continuity, name=name, then=then, **common,
        )

    def set(self, key, value, *, duration=None, curve=None, space=None, db_floor=None, continuity=None, **common):
        return self.request(
            "set", key=key, value=value, duration=duration, curve=curve, space=space, db_floor=db_floor,
            continuity=continuity, **common,
        )

    def get(self, key, **common):
        return self.request("get", key=key, **common)

    def animate(self, key, animation, *, name=None, continuity=None, **common):
        """`animation` is the protocol's animation object, as a dict (snake_case keys allowed)."""
        return self.request("animate", key=key, animation=animation, name=name, continuity=continuity, **common)

    def cancel(self, key, **common):
        return self.request("cancel", key=key, **common)

    def remove(self, key, name=None, **common):
        return self.request("remove", key=key, name=name, **common)

    def list(self, prefix=None, **common):
        return self.request("list", prefix=prefix, **common)

    def subscribe(self, events=None, **common):
        """Starts receiving events of these kinds (every kind by default); read them with
        `events()`."""
        return self.request("subscribe", events=[events] if isinstance(events, str) else events, **common)

    def unsubscribe(self, events=None, **common):
        return self.request("unsubscribe", events=[events] if isinstance(events, str) else events, **common)

    def observe(self, key, rate=None, **common):
        """Starts `value` events for `key` (at most `rate` a second); read them with `values()`."""
        return self.request("observe", key=key, rate=rate, **common)

    def unobserve(self, key=None, **common):
        return self.request("unobserve", key=key, **common)

    def batch(self, commands, **common):
        """Applies `commands` (dicts, e.g. from `rampd.command()`) on one sample, all or none."""
        return self.request("batch", commands=list(commands), **common)

    def schedules(self, **common):
        """The saved schedules, each with its next time (`due`), `repeat` and `tag`."""
        return self.request("schedules", **common)

    def unschedule(self, schedule=None, tag=None, **common):
        """Removes the saved schedule with id `schedule`, or every one tagged `tag`."""
        return self.request("unschedule", schedule=schedule, tag=tag, **common)

    def wait(self, animations=None, key=None, timeout=None, **common):
        """Returns when the animations have ended (their ids, or the results that carry them:
        `wait(r.fade(...))`), or every animation on `key`. `timeout` is rampd's (seconds): past
        it the reply is `CommandError` with code `timeout`."""
        return self.request("wait", animations=_animation_ids(animations), key=key, timeout=timeout, **common)

    # Duck rules (PROTOCOL.md §5, duck-add …).

    def duck_add(self, name, targets, *, trigger=None, threshold=None, detector=None, window=None, hysteresis=None,
                 depth=None, attack=None, attack_curve=None, hold=None, release=None, release_curve=None, **common):
        return self.request(
            "duck-add", name=name, targets=[targets] if isinstance(targets, str) else targets, trigger=trigger,
            threshold=threshold, detector=detector, window=window, hysteresis=hysteresis, depth=depth,
            attack=attack, attack_curve=attack_curve, hold=hold, release=release, release_curve=release_curve,
            **common,
        )

    def duck_remove(self, name, **common):
        return self.request("duck-remove", name=name, **common)

    def duck_list(self, **common):
        return self.request("duck-list", **common)

    def duck(self, name, **common):
        return self.request("duck", name=name, **common)

    def unduck(self, name, **common):
        return self.request("unduck", name=name, **common)

    # Queues (PROTOCOL.md §5, Queues).

    def queue_add(self, stream, paths, **common):
        return self.request("queue-add", stream=stream, paths=[paths] if isinstance(paths, str) else paths, **common)

    def queue_remove(self, stream, index, **common):
        return self.request("queue-remove", stream=stream, index=index, **common)

    def queue_clear(self, stream, **common):
        return self.request("queue-clear", stream=stream, **common)

    def queue_list(self, stream=None, **common):
        return self.request("queue-list", stream=stream, **common)

    def next(self, stream, **common):
        """Skips to the queue's next item (over the stream's `skipCrossfade`)."""
        return self.request("next", stream=stream, **common)

    def previous(self, stream, **common):
        return self.request("previous", stream=stream, **common)
