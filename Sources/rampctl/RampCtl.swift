import ArgumentParser

/// `rampctl`: the command-line client of rampd. Each subcommand lives in its own file and is
/// listed in `subcommands` below.
@main
struct RampCtl: AsyncParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "rampctl",
    abstract: "Control rampd, the audio gain-ramping daemon",
    discussion: """
      rampd changes audio gain the way Core Animation changes a layer: every change is an \
      animation along a timing curve, evaluated for every sample, so nothing clicks.

      The commands that talk to a running rampd are still to come. `curve` is the quick-start \
      demo: it runs the same animation engine locally, with no daemon and no sound card, and \
      plots the gain it renders.

      Examples:
        rampctl curve                          ease-in-out from 0 to 1 over 1s
        rampctl curve qsin --from 1 --to 0 --duration 3s --space db
        rampctl curve --list                   every curve, with a sparkline
        rampctl curve linear --values | head   the gain of each sample, for scripts
      """,
    version: "0.1.0",
    subcommands: [CurveCommand.self, RenderCommand.self, ToneCommand.self, EnvelopeCommand.self]
  )
}
