import ArgumentParser
import RampAudio
import RampCLI
import RampDaemon
import RampEngine
import RampProtocol
import RampSystem

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// `rampctl render`: rampd's own player and command handling, run from a timeline to a file.
struct RenderCommand: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "render",
    abstract: "Render a file with fades, or a whole timeline, into another file, offline.",
    discussion: """
      rampd's own player renders it: the timeline's requests go through the daemon's command \
      handling into the same render loop and mix (transport ramps, resampling, channel mapping, \
      the master's true-peak limiter) rampd plays with, against an output that writes a file as fast as the disk \
      allows, on a virtual clock. The same input, options and timeline always give the same \
      bytes, and the same audio rampd plays live.

      The input plays as stream 'main' (key paths streams.main.gain, .transport, .pan) from its \
      first sample, at full level. The output's rate and channels are the input's (else those of \
      the first file the timeline plays); its format follows its extension (wav, flac, ogg, opus, \
      aiff, caf, w64, au, ...). With no --encoding it keeps the input's encoding when its format \
      can store it; a 32-bit input written to FLAC (24 bits at most) becomes pcm24, said on \
      stderr. With no --duration the render lasts until the last stream ends and the last \
      animation settles (an endless repeat does not count); a line whose at lies after that \
      is an error.

      The output is written to a hidden temporary file beside it and renamed into place only \
      when the render has succeeded: an existing output is replaced atomically on success and \
      left untouched on failure or Ctrl-C (a symbolic link's target is replaced, the link \
      stays). An output that is the input, or a file the timeline plays (by any name: ./x, a \
      symbolic link, a hard link), is refused.

      --fade-in ramps streams.main.gain from 0 at the start; --fade-out ramps master.gain to 0 \
      at the end (of the input, or of --duration), with --curve in --space (a falling fade \
      shape mirrors in time, like ffmpeg's afade=t=out).

      --loudness normalises the whole render to a loudness (EBU R 128), as ffmpeg's two-pass \
      loudnorm is used for podcasts: the show is rendered once into a measurement \
      (libebur128, as rampctl loudness measures: integrated loudness and true peak), then \
      rendered again into the output with every sample multiplied by one constant gain, \
      target minus measured loudness, lowered so that the true peak stays under the ceiling, \
      playback.loudness-ceiling of --config (-1 dBTP by default), as play --loudness is. The \
      gain is constant: the render's dynamics, fades and ducks keep their shapes. The gain \
      applied is said on stderr, with "limited by the ceiling" when the ceiling lowered it. A \
      render with no integrated loudness (silent, or shorter than 0.4 s) is written at its \
      own level (gain 0 dB), and stderr says so. Since the show is rendered twice, it takes \
      about twice as long.

      The master's true-peak limiter applies as in rampd (output.limiter of --config, on at \
      -1 dBTP by default): what would pass the ceiling is turned down smoothly, what stays \
      under it is written bit for bit, and the file starts on the show's first sample (the \
      limiter's latency is left out). stderr says what it did ("limiter: -1 dBTP, engaged 3 \
      times"). --no-limiter leaves it out: the mix is clamped to [-1, 1].

      --script applies a timeline: the file rampctl batch runs against rampd, one protocol \
      request per line (PROTOCOL.md), each with an optional "at" in seconds from the start \
      (2.5, "1m30s", "+10s"), applied on that exact sample. Gains may be written "-6dB" or "50%" \
      and durations "2s"; a relative file path is taken from the timeline's directory. A \
      render runs play (more files as streams, with every play option), \
      stop, pause, resume, seek, fade, fade-in, fade-out, set, animate (every kind), cancel, \
      remove and batch; a command that needs a live daemon (status, wait, subscribe, observe, \
      get, list, ...), a clock-time "at" or a "repeat" is refused, naming its line.

      Example timeline (show.jsonl):
        {"cmd": "play", "path": "bed.flac", "stream": "bed"}
        {"at": 5, "cmd": "play", "path": "jingle.wav", "stream": "jingle", "gain": "-3dB"}
        {"at": 5, "cmd": "fade", "key": "streams.bed.gain", "to": "-12dB", "duration": "1s"}
        {"at": 9, "cmd": "animate", "key": "streams.bed.pan", "animation": {"type": "spring", "to": 0.5}}

      Examples:
        rampctl render in.wav out.wav --fade-in 2s --fade-out 3s
        rampctl render song.flac out.flac --fade-out 10s --curve qsin --space db
        rampctl render show.wav mixed.wav --script ducks.jsonl --encoding float
        rampctl render mixed.wav --script show.jsonl
        rampctl render episode.wav podcast.flac --loudness -16LUFS
      """
  )

  @Argument(
    help: ArgumentHelp(
      "The input (anything libsndfile reads), then the output, whose extension picks the format. With "
        + "one file, it is the output, and the timeline plays what it holds.",
      valueName: "file"))
  var files: [String] = []

  @Option(parsing: .unconditional, help: ArgumentHelp("Fade-in length: 2s, 500ms, 1m30s, 1.5.", valueName: "duration"))
  var fadeIn: String?

  @Option(parsing: .unconditional, help: ArgumentHelp("Fade-out length, ending at the end.", valueName: "duration"))
  var fadeOut: String?

  @Option(help: ArgumentHelp("Curve of the fades (see rampctl curve --list).", valueName: "curve"))
  var curve: String = "linear"

  @Option(help: ArgumentHelp("Value space of the fades: amplitude, db, db(<floor>), power.", valueName: "space"))
  var space: String = "amplitude"

  @Option(help: ArgumentHelp("A timeline (one protocol request per line, as rampctl batch reads).", valueName: "file"))
  var script: String?

  @Option(
    parsing: .unconditional,
    help: ArgumentHelp("Length of the output (default: until the show ends).", valueName: "duration"))
  var duration: String?

  @Option(
    help: ArgumentHelp(
      "Sample encoding: float, pcm16, pcm24 or pcm32 (default: the input's, else pcm24).", valueName: "encoding"))
  var encoding: String?

  @Option(
    parsing: .unconditional,
    help: ArgumentHelp(
      "Normalise the whole render to this loudness: -16LUFS, one constant gain held under the true-peak "
        + "ceiling (playback.loudness-ceiling); off: none (the default).", valueName: "LUFS"))
  var loudness: String?

  @Option(
    help: ArgumentHelp(
      "A rampd configuration file whose defaults the timeline runs with (fade curve, implicit transaction, "
        + "gain.max, declick, fade.db-floor) and whose [[duck]] rules act on it, as rampd would; default: "
        + "rampd's built-in defaults.", valueName: "file"))
  var config: String?

  @Flag(
    help: ArgumentHelp(
      "Leave the master's true-peak limiter out (output.limiter, on at -1 dBTP by default): the mix is "
        + "clamped to [-1, 1] instead."))
  var noLimiter = false

  func validate() throws {
    guard (1...2).contains(files.count) else {
      throw ValidationError("expected an input and an output file, or only an output file with --script")
    }
    if files.count == 1 && script == nil {
      throw ValidationError("with no input file, --script must give a timeline that plays one")
    }
  }

  func run() throws {
    let input = files.count == 2 ? files[0] : nil
    let output = files[files.count - 1]
    var options = ShowOptions(input: input, output: output)
    do {
      if let fadeIn { options.fadeIn = try HumanUnits.duration(fadeIn, option: "--fade-in") }
      if let fadeOut { options.fadeOut = try HumanUnits.duration(fadeOut, option: "--fade-out") }
      if let duration { options.duration = try HumanUnits.duration(duration, option: "--duration") }
    } catch { throw ValidationError(error.description) }
    if case .target(let lufs)? = try Parse.loudness(loudness, "--loudness") { options.loudness = lufs }
    do { options.curve = try TimingFunction(parsing: curve) } catch { throw ValidationError("--curve: \(error)") }
    do { options.valueSpace = try ValueSpace(parsing: space) } catch {
      throw ValidationError("--space: \(error.message)")
    }
    if let encoding {
      guard let parsed = SampleEncoding(rawValue: encoding) else {
        throw ValidationError(
          "--encoding: '\(encoding)' is not one of \(SampleEncoding.allCases.map(\.rawValue).joined(separator: ", "))")
      }
      options.encoding = parsed
    }
    if let config {
      do {
        options.configuration = try DaemonConfiguration.load(file: config, environment: [:], overrides: [:])
      } catch { throw ValidationError("--config: \(error)") }
    }
    if noLimiter { options.configuration.output.limiter.enabled = false }
    if let input {
      do { try SoundFileSink.checkDistinct(input: input, output: output) } catch {
        throw ValidationError(error.message)
      }
    }
    Interruption.catchSignals()
    options.isCancelled = { Interruption.happened }
    func fail(_ message: String, _ status: Int32 = ClientFailure.ExitStatus.refused) -> ExitCode {
      writeText("rampctl render: \(message)\n", to: 2)
      return ExitCode(status)
    }
    do {
      if let script {
        options.timeline = try Timeline.load(
          script, options: ParseOptions(decibelFloor: options.configuration.fades.decibelFloor))
        try OfflineShow.check(options.timeline)
      }
      let summary = try OfflineShow.render(options)
      if let note = summary.encodingNote {
        writeText("rampctl render: \(note)\n", to: 2)
      }
      if let trim = summary.normalisation {
        writeText("rampctl render: \(Self.describe(trim))\n", to: 2)
      }
      writeText("rampctl render: \(Self.describe(summary.limiter))\n", to: 2)
      let seconds = Double(summary.frames) / Double(summary.sampleRate)
      writeText(
        "rendered \(summary.frames) frames (\(HumanUnits.format(duration: seconds))) at \(summary.sampleRate) Hz, \(summary.channels) channel(s), \(summary.encoding.rawValue) → \(output)\n",
        to: 2)
    } catch let failure as Timeline.Failure {
      for message in failure.messages {
        writeText("rampctl render: \(message)\n", to: 2)
      }
      throw ExitCode(ClientFailure.ExitStatus.refused)
    } catch let error as AudioError {
      throw fail(error.message)
    } catch let error as OfflineShow.Failure {
      throw fail(error.description)
    } catch let error as OfflineShow.Interrupted {
      throw fail(error.description, ClientFailure.ExitStatus.interrupted)
    }
  }

  /// What the limiter did: `limiter: -1 dBTP, engaged 3 times` (or `never engaged`), `limiter: off`.
  static func describe(_ limiter: LimiterReport?) -> String {
    guard let limiter else { return "limiter: off" }
    let ceiling = "limiter: \(JSONValue.format(limiter.settings.ceilingDecibels)) dBTP"
    switch limiter.engagements {
    case 0: return ceiling + ", never engaged"
    case 1: return ceiling + ", engaged once"
    default: return ceiling + ", engaged \(limiter.engagements) times"
    }
  }

  /// The gain `--loudness` applied and why: `loudness -23.1 LUFS, true peak -4.2 dBTP: gain
  /// +7.10 dB → -16 LUFS`.
  static func describe(_ trim: LoudnessTrim) -> String {
    let loudness = trim.loudness
    let peak = loudness.truePeak.isFinite ? NumberText.fixed(loudness.truePeak, decimals: 2) + " dBTP" : "-inf dBTP"
    let gain = NumberText.fixed(trim.decibels == 0 ? 0 : trim.decibels, decimals: 2, sign: true) + " dB"
    if let reason = loudness.unmeasured {
      let why = reason == .tooShort ? "shorter than 0.4 s" : "silent: nothing reaches -70 LUFS"
      return "the render has no integrated loudness (\(why)); left at its own level, gain \(gain)"
    }
    let measured =
      "measured \(HumanUnits.format(loudness: (loudness.integrated * 100).rounded() / 100)), true peak \(peak)"
    let result = HumanUnits.format(loudness: (trim.result * 100).rounded() / 100)
    if trim.limited {
      return "\(measured); gain \(gain) → \(result), limited by the \(NumberText.general(trim.target.ceiling)) dBTP "
        + "ceiling (\(HumanUnits.format(loudness: trim.target.loudness)) asked)"
    }
    return "\(measured); gain \(gain) → \(result)"
  }
}
