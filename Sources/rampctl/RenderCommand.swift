import ArgumentParser
import Foundation
import RampAudio
import RampCLI
import RampEngine
import RampProtocol

/// `rampctl render`: the engine and kernels of live playback, run from a file to a file.
struct RenderCommand: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "render",
    abstract: "Render a file with fades or a timeline script into another file, offline.",
    discussion: """
      The input plays as stream 'main' (key path streams.main.gain) under master.gain, through \
      the same animation engine and gain kernels rampd plays with, as fast as the disk allows. \
      The output format follows the output's extension (wav, flac, ogg, opus, aiff, caf, w64, \
      au, …); the same input, options and script always give the same bytes.

      --fade-in ramps streams.main.gain from 0 at the start; --fade-out ramps master.gain to 0 \
      at the end, with --curve in --space (a falling fade shape mirrors in time, like \
      ffmpeg's afade=t=out). --script applies a timeline file: one JSON request per line, \
      {"at": 5, "cmd": "fade", "key": "master.gain", "to": "-12dB", "duration": "2s", \
      "curve": "ease-in"}, with cmd one of set, fade, fade-in, fade-out.

      Examples:
        rampctl render in.wav out.wav --fade-in 2s --fade-out 3s
        rampctl render song.flac out.flac --fade-out 10s --curve qsin --space db
        rampctl render show.wav mixed.wav --script ducks.jsonl --encoding float
      """
  )

  @Argument(help: "The file to read (anything libsndfile reads).")
  var input: String

  @Argument(help: "The file to write; its extension picks the format.")
  var output: String

  @Option(parsing: .unconditional, help: ArgumentHelp("Fade-in length: 2s, 500ms, 1m30s, 1.5.", valueName: "duration"))
  var fadeIn: String?

  @Option(parsing: .unconditional, help: ArgumentHelp("Fade-out length, ending at the end.", valueName: "duration"))
  var fadeOut: String?

  @Option(help: ArgumentHelp("Curve of the fades (see rampctl curve --list).", valueName: "curve"))
  var curve: String = "linear"

  @Option(help: ArgumentHelp("Value space of the fades: amplitude, db, db(<floor>), power.", valueName: "space"))
  var space: String = "amplitude"

  @Option(help: ArgumentHelp("A timeline script (one JSON request per line).", valueName: "file"))
  var script: String?

  @Option(
    help: ArgumentHelp(
      "Sample encoding: float, pcm16, pcm24 or pcm32 (default: the input's, else pcm24).", valueName: "encoding"))
  var encoding: String?

  func run() throws {
    var options = RenderOptions()
    do {
      if let fadeIn { options.fadeIn = try HumanUnits.duration(fadeIn, option: "--fade-in") }
      if let fadeOut { options.fadeOut = try HumanUnits.duration(fadeOut, option: "--fade-out") }
    } catch { throw ValidationError(error.description) }
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
    if let script {
      do { options.changes = try TimelineScript.load(script) } catch { throw ValidationError("--script: \(error)") }
    }
    do {
      let summary = try OfflineRenderer.render(input: input, output: output, options: options)
      let seconds = Double(summary.frames) / Double(summary.sampleRate)
      FileHandle.standardError.write(
        "rendered \(summary.frames) frames (\(HumanUnits.format(duration: seconds))) at \(summary.sampleRate) Hz, \(summary.channels) channel(s), \(summary.encoding.rawValue) → \(output)\n"
          .data(using: .utf8)!)
    } catch let error as AudioError {
      FileHandle.standardError.write("rampctl render: \(error.message)\n".data(using: .utf8)!)
      throw ExitCode(65)
    }
  }
}
