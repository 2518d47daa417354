"""Timeline files, run by `rampctl batch`: rampd's one reader of the timeline language, so a
timeline means the same from Python as from rampctl (units, relative paths, lines sharing an
`at`, what a line may not hold, the stop at the first refusal)."""

import json
import os
import shutil
import subprocess

from ._client import CommandError, Error, Record


class TimelineError(Error):
    """A timeline that could not run (`problems`: rampctl's messages, each bad line as
    `file:line: message`; nothing was sent, `outcomes` is empty), or whose run stopped at a line
    rampd refused (`problems`: that line and what was not applied; `outcomes`: every line
    answered, the refused one last)."""

    def __init__(self, problems, outcomes=()):
        super().__init__("\n".join(problems))
        self.problems = problems
        self.outcomes = list(outcomes)


class TimelineOutcome:
    """One line of a timeline that rampd answered: `label` (`file:line`, `<stdin>:line` for lines
    not read from a file), `cmd`, and `result` (a Record) or `error` (a `CommandError`, its
    `field` named within the line)."""

    def __init__(self, label, cmd, result=None, error=None):
        self.label = label
        self.cmd = cmd
        self.result = result
        self.error = error

    @property
    def ok(self):
        return self.error is None

    def __repr__(self):
        outcome = f"error={self.error}" if self.error else f"result={self.result!r}"
        return f"TimelineOutcome({self.label}, {self.cmd}, {outcome})"


def find_rampctl(rampctl=None):
    """The rampctl to run: `rampctl` when given (a path, or a name on PATH), else `rampctl` on
    PATH, else the one beside the `rampd` on PATH (symbolic links followed)."""
    if rampctl is not None:
        found = shutil.which(os.fspath(rampctl))
        if found is None:
            raise Error(f"rampctl: {os.fspath(rampctl)} is not an executable file")
        return found
    found = shutil.which("rampctl")
    if found is not None:
        return found
    daemon = shutil.which("rampd")
    if daemon is not None:
        beside = os.path.join(os.path.dirname(os.path.realpath(daemon)), "rampctl")
        if os.access(beside, os.X_OK):
            return beside
    raise Error("rampctl: not on PATH, nor beside rampd; give its path (run_timeline(..., rampctl=PATH))")


def _target(source):
    """(rampctl's file argument, standard input) for a path, a file object or an iterable of
    lines (str, or dict: a request object)."""
    if isinstance(source, (str, os.PathLike)):
        return os.fspath(source), None
    lines = source.read().split("\n") if hasattr(source, "read") else list(source)
    text = "\n".join(json.dumps(line) if isinstance(line, dict) else str(line) for line in lines)
    return "-", text + "\n"


def run_timeline(socket_path, source, check=True, rampctl=None):
    """Runs `source` with `rampctl batch` against the rampd at `socket_path`; returns one
    `TimelineOutcome` per line answered (see `Client.run_timeline`)."""
    target, text = _target(source)
    command = [find_rampctl(rampctl), "batch", target, "--socket", socket_path, "--json"]
    done = subprocess.run(command, input=text, capture_output=True, text=True)
    outcomes = []
    for line in done.stdout.splitlines():
        if not line.strip():
            continue
        answer = json.loads(line, object_hook=Record)
        if answer.get("ok") is True:
            outcomes.append(TimelineOutcome(answer["line"], answer["cmd"], result=answer.get("result") or Record()))
        else:
            error = answer.get("error") or Record()
            outcomes.append(
                TimelineOutcome(
                    answer["line"], answer["cmd"],
                    error=CommandError(
                        error.get("code", "internal-error"), error.get("message", ""), error.get("field"), None,
                        answer,
                    ),
                )
            )
    problems = [line.removeprefix("rampctl: ") for line in done.stderr.splitlines() if line.strip()]
    refused = any(not outcome.ok for outcome in outcomes)
    if done.returncode == 0:
        return outcomes
    if done.returncode == 65 and refused:
        if check:
            raise TimelineError(problems, outcomes)
        return outcomes
    if done.returncode == 65:
        raise TimelineError(problems)
    raise Error(f"rampctl batch exited {done.returncode}: " + ("\n".join(problems) or "no message"))
