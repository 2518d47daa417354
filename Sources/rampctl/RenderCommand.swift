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
      au, ...); the same input, options and script always give the same bytes. With no \
      --encoding the output keeps the input's encoding when its format can store it; a 32-bit \
      input written to FLAC (24 bits at most) becomes pcm24, said on stderr.

      The output is written to a hidden temporary file beside it and renamed into place only \
      when the render has succeeded: an existing output is replaced atomically on success and \
      left untouched on failure or Ctrl-C (a symbolic link's target is replaced, the link \
      stays). An output that is the input itself (by any name: ./x, a symbolic link, a hard \
      link) is refused.

      --fade-in ramps streams.main.gain from 0 at the start; --fade-out ramps master.gain to 0 \
      at the end, with --curve in --space (a falling fade shape mirrors in time, like \
      ffmpeg's afade=t=out). --script applies a timeline file: one JSON request per line, \
      {"at": 5, "cmd": "fade", "key": "master.gain", "to": "-12dB", "duration": "2s", \
      "curve": "ease-in"}, with cmd one of set, fade, fade-in, fade-out; a line whose at lies \
      after the end of the input is an error.

      Examples:
        rampctl render in.wav out.wav --fade-in 2s --fade-out 3s
        rampctl render song.flac out.flac --fade-out 10s --curve qsin --space db
        rampctl render show.wav mixed.wav --script ducks.jsonl --encoding float
      """
  )

  @Argument(help: "The file to read (anything libsndfile reads).")
  var input: String

  @Argument(help: "The file to write; its extension picks the format. An existing one is replaced on success.")
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
    do { try OfflineRenderer.checkDistinct(input: input, output: output) } catch {
      throw ValidationError(error.message)
    }
    Interruption.catchSignals()
    options.isCancelled = { Interruption.happened }
    do {
      let summary = try OfflineRenderer.render(input: input, output: output, options: options)
      if let note = summary.encodingNote {
        FileHandle.standardError.write("rampctl render: \(note)\n".data(using: .utf8)!)
      }
      let seconds = Double(summary.frames) / Double(summary.sampleRate)
      FileHandle.standardError.write(
        "rendered \(summary.frames) frames (\(HumanUnits.format(duration: seconds))) at \(summary.sampleRate) Hz, \(summary.channels) channel(s), \(summary.encoding.rawValue) → \(output)\n"
          .data(using: .utf8)!)
    } catch let error as AudioError {
      FileHandle.standardError.write("rampctl render: \(error.message)\n".data(using: .utf8)!)
      throw ExitCode(ClientFailure.ExitStatus.refused)
    } catch let error as OfflineRenderer.Interrupted {
      FileHandle.standardError.write("rampctl render: \(error)\n".data(using: .utf8)!)
      throw ExitCode(ClientFailure.ExitStatus.interrupted)
    }
  }
}
