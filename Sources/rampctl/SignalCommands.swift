import ArgumentParser
import RampAudio
import RampCLI
import RampEngine
import RampProtocol
import RampSystem

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// `rampctl tone`: a test signal written by the project itself, so the demo and a first try need
/// no audio file from anywhere.
struct ToneCommand: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "tone",
    abstract: "Write a sine tone to an audio file (a test signal for trying rampd).",
    discussion: """
      Examples:
        rampctl tone /tmp/a440.wav                     4 s of 440 Hz at -6 dB, 48 kHz stereo
        rampctl tone /tmp/low.flac --frequency 110 --duration 10s --level -12dB
      """)

  @Argument(
    help:
      "The file to write; its extension picks the format (wav, flac, ogg, ...). An existing one is replaced on success."
  )
  var output: String

  @Option(help: ArgumentHelp("Frequency in Hz.", valueName: "hz"))
  var frequency: Double = 440

  @Option(help: ArgumentHelp("Length: 4s, 500ms, 1m.", valueName: "duration"))
  var duration = "4s"

  @Option(help: ArgumentHelp("Peak level: 0.5, 50%, -6dB.", valueName: "gain"))
  var level = "-6dB"

  @Option(help: ArgumentHelp("Sample rate: 48000, 44.1k.", valueName: "rate"))
  var rate = "48k"

  func run() throws {
    let seconds: Double
    let peak: Double
    let sampleRate: Int
    do {
      seconds = try HumanUnits.duration(duration, option: "--duration")
      peak = try HumanUnits.gain(level, option: "--level")
      sampleRate = Int(try HumanUnits.sampleRate(rate, option: "--rate"))
    } catch {
      throw ValidationError("\(error)")
    }
    guard frequency > 0, frequency < Double(sampleRate) / 2 else {
      throw ValidationError("--frequency must be above 0 and below half the sample rate, got \(frequency)")
    }
    let frames = Int(seconds * Double(sampleRate))
    let writer: SoundFileWriter
    do {
      writer = try SoundFileWriter(path: output, sampleRate: sampleRate, channels: 2, encoding: .pcm16)
    } catch {
      throw fileFailure("tone", error)
    }
    // Ctrl-C stops between blocks; the writer, released unclosed, leaves no file behind.
    Interruption.catchSignals()
    var block = [Float](repeating: 0, count: 4_096 * 2)
    var done = 0
    let step = 2 * Double.pi * frequency / Double(sampleRate)
    while done < frames {
      if Interruption.happened {
        writeText("rampctl tone: interrupted; nothing was written\n", to: 2)
        throw ExitCode(ClientFailure.ExitStatus.interrupted)
      }
      let count = min(4_096, frames - done)
      for index in 0..<count {
        let value = Float(peak * sin(step * Double(done + index)))
        block[2 * index] = value
        block[2 * index + 1] = value
      }
      do {
        try block.withUnsafeBufferPointer { try writer.write($0.baseAddress!, frames: count) }
      } catch {
        throw fileFailure("tone", error)
      }
      done += count
    }
    do { try writer.close() } catch { throw fileFailure("tone", error) }
    print("\(output): \(seconds) s of \(frequency) Hz at peak \(peak), \(sampleRate) Hz stereo")
  }
}

/// `rampctl envelope`: the peak level of a recording over time, plotted in the terminal: what a
/// fade did to what was actually played.
struct EnvelopeCommand: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "envelope",
    abstract: "Plot the peak level of an audio file over time.",
    discussion: """
      --from and --to choose a part of the file (times from its start), so that a short ramp in \
      a long file gets the whole width; --db plots the level in dBFS down to \(Int(floor)) dB, \
      where quiet passages and the tail of a fade show.

      Examples:
        rampctl envelope /run/user/1000/rampd/output.wav      what the embedded output played
        rampctl envelope song.flac --width 100 --height 16
        rampctl envelope output.wav --from 1m02s --to 1m05s --db     a duck, in dB
      """)

  /// The bottom of the --db scale: anything quieter is drawn there.
  static let floor = -60.0

  @Argument(help: "The audio file to read.")
  var input: String

  @Option(help: "Plot width in characters.")
  var width = 72

  @Option(help: "Plot height in characters.")
  var height = 12

  @Flag(help: "Plain ASCII instead of braille dots.")
  var ascii = false

  @Option(help: ArgumentHelp("Start here, a time from the file's start: 1m30s, 90s (default: 0).", valueName: "time"))
  var from: String?

  @Option(help: ArgumentHelp("End here, a time from the file's start (default: the end).", valueName: "time"))
  var to: String?

  @Flag(help: "The level in dBFS (0 dB at the top, -60 dB and below at the bottom) instead of amplitude.")
  var db = false

  func validate() throws {
    guard (10...1_000).contains(width) else { throw ValidationError("--width must be 10...1000, got \(width)") }
    guard (2...200).contains(height) else { throw ValidationError("--height must be 2...200, got \(height)") }
    _ = try times()
  }

  /// --from and --to in seconds, checked against each other.
  func times() throws -> (from: Double?, to: Double?) {
    let start = try Parse.duration(from, "--from")
    let end = try Parse.duration(to, "--to")
    if let start, let end, end <= start {
      throw ValidationError(
        "--to \(HumanUnits.format(duration: end)) must come after --from \(HumanUnits.format(duration: start))")
    }
    return (start, end)
  }

  /// The frames the plot covers, in a file of `frames` frames at `rate`: a window that starts at
  /// or after the end, or ends after it, is refused, naming the option and the file's length.
  static func window(from: Double?, to: Double?, frames: Int, rate: Int, input: String) throws -> Range<Int> {
    let length = Double(frames) / Double(rate)
    let lengthText = HumanUnits.format(duration: length)
    let first = Int(((from ?? 0) * Double(rate)).rounded())
    guard first < frames else {
      throw ValidationError(
        "--from \(HumanUnits.format(duration: from ?? 0)) is not before the end of \(input) (\(lengthText) long)")
    }
    guard let to else { return first..<frames }
    let last = Int((to * Double(rate)).rounded())
    guard last <= frames else {
      throw ValidationError("--to \(HumanUnits.format(duration: to)) is past the end of \(input) (\(lengthText) long)")
    }
    return first..<max(last, first + 1)
  }

  func run() throws {
    let reader: SoundFileReader
    do {
      reader = try SoundFileReader(path: input)
    } catch {
      throw fileFailure("envelope", error)
    }
    let frames = Int(reader.frames)
    guard frames > 0 else { throw fileFailure("envelope", "\(input) holds no audio") }
    let (from, to) = try times()
    let window: Range<Int>
    do {
      window = try Self.window(from: from, to: to, frames: frames, rate: reader.sampleRate, input: input)
    } catch let error as ValidationError {
      writeText("rampctl envelope: \(error.message)\n", to: 2)
      throw ExitCode.validationFailure
    }
    let rate = Double(reader.sampleRate)
    let style: PlotStyle = ascii ? .ascii : .braille
    let plot = Plot(
      width: width, height: height, style: style,
      xRange: (Double(window.lowerBound) / rate)...(Double(window.upperBound) / rate),
      yRange: db ? Self.floor...0 : 0...1)
    var peaks = MinMaxDownsampler(sampleCount: window.count, columns: plot.pixelColumns)
    let channels = reader.channels
    var buffer = [Float](repeating: 0, count: 8_192 * channels)
    var frame = [Double](repeating: 0, count: 8_192)
    var left = window.count
    do {
      if window.lowerBound > 0 { try reader.seek(toFrame: Int64(window.lowerBound)) }
      while left > 0 {
        let count = try buffer.withUnsafeMutableBufferPointer {
          try reader.read(into: $0.baseAddress!, frames: min(8_192, left))
        }
        if count == 0 { break }
        for index in 0..<count {
          var peak: Float = 0
          for channel in 0..<channels { peak = max(peak, abs(buffer[index * channels + channel])) }
          frame[index] = Double(peak)
        }
        peaks.add(contentsOf: Array(frame[0..<count]))
        left -= count
      }
    } catch {
      throw fileFailure("envelope", error)
    }
    // The envelope is the top of each column's range: the loudest sample there (in dB, the
    // loudest is still the highest).
    let scale = db ? ValueSpace.decibels(floor: Self.floor) : .amplitude
    let level = { (peak: Double) in scale.encode(peak) }
    let columns = peaks.ranges.map { $0.map { ColumnRange(low: level($0.high), high: level($0.high)) } }
    var title = "Peak level\(db ? " in dBFS" : "") of \(input) (\(reader.sampleRate) Hz, \(channels) ch"
    if window != 0..<frames {
      title +=
        ", \(HumanUnits.format(duration: plot.xRange.lowerBound)) to \(HumanUnits.format(duration: plot.xRange.upperBound))"
    }
    print(title + "):")
    for line in plot.render(columns: columns) { print(line) }
  }
}

/// A file that cannot be read or written: the reason on stderr, exit 65 as `render` does.
private func fileFailure(_ command: String, _ reason: Any) -> ExitCode {
  writeText("rampctl \(command): \(reason)\n", to: 2)
  return ExitCode(65)
}
