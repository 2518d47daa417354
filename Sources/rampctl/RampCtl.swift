import ArgumentParser
import RampCLI
import RampProtocol

/// `rampctl`: the command-line client of rampd. Each subcommand lives in its own file and is
/// listed in `subcommands` below.
public struct RampCtl: ParsableCommand {
  /// The name rampctl is run by: rampd's executable runs as rampctl when it is (`rampctl` is a
  /// link to `rampd` in the package).
  public static let invokedName = "rampctl"

  static let version = RampdBuild.version

  public static let configuration = CommandConfiguration(
    commandName: invokedName,
    abstract: "Control rampd, the audio gain-ramping daemon",
    discussion: """
      rampd changes audio gain the way Core Animation changes a layer: every change is an \
      animation along a timing curve, evaluated for every sample, so nothing clicks. rampctl \
      sends it commands over its Unix socket (--socket, else $RAMPD_SOCKET, else \
      $XDG_RUNTIME_DIR/rampd/rampd.sock when not root, else /run/rampd/rampd.sock).

      Units: durations 2s, 500ms, 1m30s, 1.5 (seconds); gains 0.5, 50%, -6dB, '-inf dB'; \
      curves linear, ease-in-out, qsin, cubic-bezier(x1,y1,x2,y2), steps(n) (`rampctl curve \
      --list`); times for --at 23:00, 2026-11-21T07:30:00Z, +20m. A key path is master.gain, \
      streams.<id>.gain (or just <id>) or mixers.<name>.volume. The ramping commands and play \
      take --wait (block until what the command started has finished, with a progress bar on a \
      terminal). Every command that changes sound takes --at, and --daily, --weekdays, --days or \
      --every to repeat (`rampctl schedules` lists them; `rampctl alarm` and `rampctl sleep` are \
      built on them). `rampctl` alone shows the status.

      Global options, before or after the command (rampctl --socket PATH status, or rampctl \
      status --socket PATH), on every command that talks to rampd:
        --socket <path>   rampd's socket
        --json            rampd's reply lines as they are, refusals too (exit status 65)

      Exit status:
        0   success
        64  bad usage: unknown option, bad units, a request rampd would refuse
        65  rampd refused the command (or a batch script line is invalid, or a file could not be
            rendered or measured)
        69  rampd is unreachable: no socket, or the connection was refused
        70  protocol error: a reply rampctl did not expect
        75  a wait was interrupted (Ctrl-C) or timed out; the ramp goes on
        77  rampd does not admit this user (see [access] in its configuration)

      Examples:
        rampctl play song.flac --fade-in 3s
        rampctl fade-out --duration 10s --then stop
        rampctl set master.gain -6dB --duration 500ms --wait
        rampctl animate streams.s1.gain --keyframes 1,0.5,1 --duration 1s --repeat inf
        rampctl status
        rampctl --socket /run/rampd/rampd.sock status
        rampctl set master.gain 2 --json | jq .error.code     "out-of-range", exit 65
        rampctl watch
        rampctl curve qsin --from 1 --to 0 --duration 3s    local, no daemon needed
        rampctl loudness bed.flac jingle.wav                 local too: LUFS, LU, dBTP

      Shell completions: rampctl --generate-completion-script bash|zsh|fish.
      """,
    version: version,
    subcommands: [
      PingCommand.self, VersionCommand.self, StatusCommand.self,
      PlayCommand.self, StopCommand.self, PauseCommand.self, ResumeCommand.self, SeekCommand.self,
      FadeCommand.self, FadeInCommand.self, FadeOutCommand.self, SetCommand.self, GetCommand.self,
      AnimateCommand.self, CancelCommand.self, RemoveCommand.self, ListCommand.self,
      WatchCommand.self, ObserveCommand.self, WaitCommand.self, BatchCommand.self,
      SchedulesCommand.self, UnscheduleCommand.self, AlarmCommand.self, SleepCommand.self,
      DuckAddCommand.self, DuckListCommand.self, DuckRemoveCommand.self, DuckCommand.self, UnduckCommand.self,
      QueueCommand.self, NextCommand.self, PreviousCommand.self,
      CurveCommand.self, RenderCommand.self, ToneCommand.self, EnvelopeCommand.self, LoudnessCommand.self,
    ]
  )

  /// The global options, for `--help`, the man page and shell completions before a subcommand;
  /// `CommandLineRoute` hands them to the subcommand, so they are never read here.
  @OptionGroup(title: "Global options (before or after the command)") var global: ConnectionOptions

  /// The route first (`CommandLineRoute`: global options, `rampctl` alone, unknown commands);
  /// then negative values (`-6dB`) are made readable to ArgumentParser; see `Arguments`.
  public init() {}

  public static func main() {
    switch CommandLineRoute.route(Array(CommandLine.arguments.dropFirst())) {
    case .refuse(let message):
      Output.error(message)
      exit(withError: ExitCode(ClientFailure.ExitStatus.usage))
    case .run(let words):
      main(Arguments.prepared(words))
    }
  }
}
