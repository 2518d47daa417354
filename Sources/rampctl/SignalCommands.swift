import ArgumentParser
import Foundation
import RampAudio
import RampCLI
import RampProtocol

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
        FileHandle.standardError.write(Data("rampctl tone: interrupted; nothing was written\n".utf8))
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
      Examples:
        rampctl envelope /run/user/1000/rampd/output.wav      what the embedded output played
        rampctl envelope song.flac --width 100 --height 16
      """)

  @Argument(help: "The audio file to read.")
  var input: String

  @Option(help: "Plot width in characters.")
  var width = 72

  @Option(help: "Plot height in characters.")
  var height = 12

  @Flag(help: "Plain ASCII instead of braille dots.")
  var ascii = false

  func validate() throws {
    guard (10...1_000).contains(width) else { throw ValidationError("--width must be 10...1000, got \(width)") }
    guard (2...200).contains(height) else { throw ValidationError("--height must be 2...200, got \(height)") }
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
    let style: PlotStyle = ascii ? .ascii : .braille
    let plot = Plot(
      width: width, height: height, style: style, xRange: 0...(Double(frames) / Double(reader.sampleRate)),
      yRange: 0...1)
    var peaks = MinMaxDownsampler(sampleCount: frames, columns: plot.pixelColumns)
    let channels = reader.channels
    var buffer = [Float](repeating: 0, count: 8_192 * channels)
    var frame = [Double](repeating: 0, count: 8_192)
    while true {
      let count: Int
      do {
        count = try buffer.withUnsafeMutableBufferPointer { try reader.read(into: $0.baseAddress!, frames: 8_192) }
      } catch {
        throw fileFailure("envelope", error)
      }
      if count == 0 { break }
      for index in 0..<count {
        var peak: Float = 0
        for channel in 0..<channels { peak = max(peak, abs(buffer[index * channels + channel])) }
        frame[index] = Double(peak)
      }
      peaks.add(contentsOf: Array(frame[0..<count]))
    }
    // The envelope is the top of each column's range: the loudest sample there.
    let columns = peaks.ranges.map { $0.map { ColumnRange(low: $0.high, high: $0.high) } }
    print("Peak level of \(input) (\(reader.sampleRate) Hz, \(channels) ch):")
    for line in plot.render(columns: columns) { print(line) }
  }
}

/// A file that cannot be read or written: the reason on stderr, exit 65 as `render` does.
private func fileFailure(_ command: String, _ reason: Any) -> ExitCode {
  FileHandle.standardError.write(Data("rampctl \(command): \(reason)\n".utf8))
  return ExitCode(65)
}
