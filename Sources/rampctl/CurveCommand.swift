import ArgumentParser
import FoundationEssentials
import RampCLI
import RampEngine
import RampProtocol

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// `rampctl curve`: renders one ramp with a real `AnimationEngine`, sample by sample, and
/// plots it, prints it per sample (`--values`) or lists the curves (`--list`).
struct CurveCommand: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "curve",
    abstract: "Plot the per-sample gain of a ramp, as the animation engine renders it.",
    discussion: """
      Defines a gain property at --from, changes it to --to in a transaction of --duration \
      with the given curve and value space, exactly as rampd does for a fade, and renders \
      every sample of the ramp at --rate. Prints the ramp, a plot of the gain (min and max of \
      the samples in each column, so nothing is lost), and the gain at 0, 25, 50, 75 and 100% \
      of the ramp in amplitude and in dB.

      Gains: 0.5, 50%, -6dB, -inf dB (silence). Durations: 2s, 500ms, 1m30s, 1h, or a bare \
      number of seconds (1.5). Value spaces: amplitude (straight in amplitude), db (straight \
      in dB down to a -60 dB floor, then silence), db(-80) (another floor), power (equal power).

      Examples:
        rampctl curve
        rampctl curve ease-in-out --from 0 --to 1 --duration 2s
        rampctl curve qsin --from 1 --to 0 --duration 3s --space db
        rampctl curve 'cubic-bezier(0.1,0.7,0.1,1)' --from -20dB --to 0dB
        rampctl curve 'steps(4,jump-none)' --to 80% --width 40 --height 8
        rampctl curve linear --duration 10ms --rate 8k --values
        rampctl curve --list
      """
  )

  enum StyleChoice: String, ExpressibleByArgument, CaseIterable {
    case braille, blocks, ascii
  }

  @Argument(
    help: ArgumentHelp(
      "The timing curve: a name such as ease-in-out or qsin (see --list), cubic-bezier(x1,y1,x2,y2) or "
        + "steps(n[,position]).", valueName: "curve"))
  var curve: String = "ease-in-out"

  // `.unconditional`: a value may start with a minus sign (-6dB, -inf dB, -2s) and still be a value.
  @Option(
    parsing: .unconditional, help: ArgumentHelp("Gain at the start: 0.5, 50%, -6dB or '-inf dB'.", valueName: "gain"))
  var from: String = "0"

  @Option(
    parsing: .unconditional, help: ArgumentHelp("Gain at the end: 0.5, 50%, -6dB or '-inf dB'.", valueName: "gain"))
  var to: String = "1"

  @Option(
    parsing: .unconditional,
    help: ArgumentHelp("Length of the ramp: 2s, 500ms, 1m30s, 1h or seconds (1.5).", valueName: "duration"))
  var duration: String = "1s"

  @Option(
    help: ArgumentHelp(
      "The space the ramp is a straight line in: amplitude, db, db(<floor>) or power.", valueName: "space"))
  var space: String = "amplitude"

  @Option(
    parsing: .unconditional, help: ArgumentHelp("Sample rate of the engine: 48000, 48k, 44.1kHz.", valueName: "hz"))
  var rate: String = "48000"

  @Option(help: ArgumentHelp("Plot width in characters (default: fit the terminal, 64 when not a terminal)."))
  var width: Int?

  @Option(help: ArgumentHelp("Plot height in characters."))
  var height: Int = 12

  @Option(help: ArgumentHelp("How to draw: braille, blocks or ascii (default: braille, ascii when TERM=dumb)."))
  var style: StyleChoice?

  @Flag(help: "Plain ASCII output: the same as --style ascii.")
  var ascii = false

  @Flag(help: "Instead of the plot, print 'index<TAB>seconds<TAB>gain' for every sample.")
  var values = false

  @Flag(help: "List every accepted curve with a description and a sparkline.")
  var list = false

  /// The most samples one invocation renders (about 33 days at 48 kHz).
  static let maximumSamples = 1 << 37

  /// The ramp the options describe, every value checked.
  struct Ramp {
    var curve: TimingFunction
    var from: Double
    var to: Double
    var duration: Double
    var space: ValueSpace
    var rate: Double
    /// duration·rate + 1: the first sample through the one at which the ramp ends.
    var samples: Int

    func seconds(_ index: Int) -> Double { Double(index) / rate }
  }

  func validate() throws {
    if list {
      if values { throw ValidationError("--list and --values cannot be combined") }
      return
    }
    _ = try ramp()
    if let width, !(8...2000).contains(width) {
      throw ValidationError("--width: must be from 8 to 2000 characters, got \(width)")
    }
    if !(2...500).contains(height) {
      throw ValidationError("--height: must be from 2 to 500 characters, got \(height)")
    }
    if ascii, let style, style != .ascii {
      throw ValidationError("--ascii and --style \(style.rawValue) contradict each other")
    }
  }

  func ramp() throws -> Ramp {
    let curve: TimingFunction
    let space: ValueSpace
    do {
      curve = try TimingFunction(parsing: self.curve)
      space = try ValueSpace(parsing: self.space)
    } catch {
      throw ValidationError(error.description)
    }
    do {
      let from = try HumanUnits.gain(self.from, option: "--from")
      let to = try HumanUnits.gain(self.to, option: "--to")
      let duration = try HumanUnits.duration(self.duration, option: "--duration")
      let rate = try HumanUnits.sampleRate(self.rate, option: "--rate")
      let steps = (duration * rate).rounded()
      guard steps < Double(Self.maximumSamples) else {
        throw ValidationError(
          "--duration: \(HumanUnits.format(duration: duration)) at \(HumanUnits.format(sampleRate: rate)) is "
            + "\(steps) samples; the most one run renders is \(Self.maximumSamples)")
      }
      return Ramp(
        curve: curve, from: from, to: to, duration: duration, space: space, rate: rate, samples: Int(steps) + 1)
    } catch let error as UnitError {
      throw ValidationError(error.description)
    }
  }

  var plotStyle: PlotStyle {
    if ascii { return .ascii }
    switch style {
    case .braille: return .braille
    case .blocks: return .blocks
    case .ascii: return .ascii
    case nil: return Terminal.prefersASCII(environment: ProcessInfo.processInfo.environment) ? .ascii : .braille
    }
  }

  func run() throws {
    if list {
      printCurveList(ascii: plotStyle.isASCII)
      return
    }
    let ramp = try ramp()
    if values {
      try printValues(ramp)
    } else {
      try printPlot(ramp)
    }
  }

  // MARK: Rendering

  /// Renders the ramp with a real engine, as rampd's render thread would: a block at the
  /// engine's clock, then `advance`. Hands each block to `body` with the index of its first sample.
  /// Returns the completion reports the engine queued.
  @discardableResult
  static func render(
    _ ramp: Ramp, chunk: Int = 48_000, _ body: (UnsafeBufferPointer<Double>, Int) throws -> Void
  ) throws -> [CompletionReport] {
    let engine = try AnimationEngine(sampleRate: ramp.rate)
    let keyPath = "master.gain"
    let handle = try engine.define(keyPath, value: ramp.from, range: 0...max(ramp.from, ramp.to, 1))
    try engine.set(
      keyPath, to: ramp.to,
      transaction: Transaction(duration: ramp.duration, timingFunction: ramp.curve, valueSpace: ramp.space))

    let buffer = UnsafeMutablePointer<Double>.allocate(capacity: chunk)
    defer { buffer.deallocate() }
    var done = 0
    while done < ramp.samples {
      let count = min(chunk, ramp.samples - done)
      engine.render(handle, start: engine.now, count: count, into: buffer)
      try body(UnsafeBufferPointer(start: buffer, count: count), done)
      engine.advance(by: count)
      done += count
    }
    var reports: [CompletionReport] = []
    engine.drainCompletions { reports.append($0) }
    return reports
  }

  private func printValues(_ ramp: Ramp) throws {
    var out = TextBuffer(capacity: 1 << 17)
    try Self.render(ramp) { block, first in
      for (offset, gain) in block.enumerated() {
        let index = first + offset
        out.append(index)
        out.append(byte: 0x09)
        out.append(fixed: ramp.seconds(index), decimals: 9)
        out.append(byte: 0x09)
        out.append(fixed: gain, decimals: 9)
        out.append(byte: 0x0A)
        if out.count >= 1 << 16 { try out.flush() }
      }
    }
    try out.flush()
  }

  private func printPlot(_ ramp: Ramp) throws {
    let style = plotStyle
    let environment = ProcessInfo.processInfo.environment
    let plotWidth = width ?? Terminal.columns(environment: environment).map { min(max($0 - 10, 20), 100) } ?? 64
    var plot = Plot(width: plotWidth, height: height, style: style, xRange: 0...ramp.duration)
    var downsampler = MinMaxDownsampler(sampleCount: ramp.samples, columns: plot.pixelColumns)
    let fractions = [0.0, 0.25, 0.5, 0.75, 1.0]
    let probes = fractions.map { Int(($0 * Double(ramp.samples - 1)).rounded()) }
    var probed = [Double](repeating: .nan, count: probes.count)
    let reports = try Self.render(ramp) { block, first in
      downsampler.add(contentsOf: block)
      for (slot, index) in probes.enumerated() where (first..<first + block.count).contains(index) {
        probed[slot] = block[index - first]
      }
    }
    let columns = downsampler.ranges
    let highest = columns.compactMap { $0?.high }.max() ?? 0
    plot.yRange = Plot.niceRange(0...max(highest, ramp.from, ramp.to, 1e-9), approximateCount: plot.yTickCount)

    let arrow = style.isASCII ? "->" : "→"
    print(
      "\(ramp.curve) ramp, \(Self.describe(gain: ramp.from)) \(arrow) \(Self.describe(gain: ramp.to)) "
        + "over \(HumanUnits.format(duration: ramp.duration)) in \(ramp.space) space: "
        + "\(ramp.samples) sample\(ramp.samples == 1 ? "" : "s") rendered at \(HumanUnits.format(sampleRate: ramp.rate))"
    )
    print()
    for line in plot.render(columns: columns) { print(line) }
    print()

    let rows = zip(fractions, zip(probes, probed)).map { fraction, probe in
      [
        "\(Int(fraction * 100))%", HumanUnits.format(duration: ramp.seconds(probe.0)),
        String(probe.0), HumanUnits.format(gain: probe.1), HumanUnits.format(decibels: probe.1),
      ]
    }
    for line in Self.table(header: ["ramp", "time", "sample", "gain", "dB"], rows: rows) { print(line) }

    if let report = reports.first(where: \.finished) {
      print()
      print(
        "The engine finished the animation at sample \(report.sample) "
          + "(\(HumanUnits.format(duration: ramp.seconds(Int(report.sample))))); the gain holds at "
          + "\(HumanUnits.format(gain: ramp.to)) after it.")
    } else if ramp.duration == 0 {
      print()
      print("A duration of 0 changes the gain at once: no animation runs.")
    }
  }

  /// `0.5 (-6.02 dB)`
  static func describe(gain: Double) -> String {
    "\(HumanUnits.format(gain: gain)) (\(HumanUnits.format(decibels: gain)))"
  }

  /// Right-aligned columns, two spaces apart, indented by two.
  static func table(header: [String], rows: [[String]]) -> [String] {
    let all = [header] + rows
    let widths = header.indices.map { column in all.map { $0[column].count }.max() ?? 0 }
    return all.map { row in
      "  "
        + row.enumerated().map { column, cell in
          String(repeating: " ", count: widths[column] - cell.count) + cell
        }.joined(separator: "  ")
    }
  }

  // MARK: --list

  static let examples: [String: String] = [
    "cubic-bezier(x1,y1,x2,y2)": "cubic-bezier(0.1,0.7,0.1,1)",
    "steps(n[,position])": "steps(4)",
  ]

  static let descriptions: [String: String] = [
    "linear": "constant speed: a straight line in the value space",
    "ease-in": "starts slowly, ends at full speed; cubic-bezier(0.42,0,1,1)",
    "ease-out": "starts at full speed, slows into the end; cubic-bezier(0,0,0.58,1)",
    "ease-in-out": "slow at both ends; cubic-bezier(0.42,0,0.58,1)",
    "default": "Core Animation's default: quick, then gentle; cubic-bezier(0.25,0.1,0.25,1)",
    "ease": "CSS's name for default",
    "step-start": "jumps to the end value at once; steps(1,jump-start)",
    "step-end": "holds the start value, jumps at the end; steps(1,jump-end)",
    "cubic-bezier(x1,y1,x2,y2)": "any CSS cubic Bezier, x1 and x2 in [0,1]; shown: cubic-bezier(0.1,0.7,0.1,1)",
    "steps(n[,position])": "n jumps; position jump-start, jump-end (default), jump-none, jump-both; shown: steps(4)",
    "tri": "triangular: linear",
    "qsin": "quarter of a sine wave",
    "iqsin": "inverted quarter of a sine wave",
    "esin": "exponential sine wave",
    "hsin": "half of a sine wave",
    "ihsin": "inverted half of a sine wave",
    "exp": "exponential: from -100 dB, straight in dB",
    "log": "logarithmic: 1 + 0.2*log10(x)",
    "par": "parabola: 1 - sqrt(1 - x)",
    "ipar": "inverted parabola: 1 - (1 - x)^2",
    "qua": "quadratic: x^2",
    "cub": "cubic: x^3",
    "squ": "square root: sqrt(x)",
    "cbr": "cubic root: cbrt(x)",
    "dese": "double-exponential seat",
    "desi": "double-exponential sigmoid",
    "losi": "logistic sigmoid",
    "sinc": "sine cardinal",
    "isinc": "inverted sine cardinal",
  ]

  private func printCurveList(ascii: Bool) {
    let names = TimingFunction.names
    let nameWidth = names.map(\.count).max() ?? 0
    print("Curves for `rampctl curve <curve>` (the sparkline is a rising ramp, time left to right):")
    print()
    for name in names {
      let example = Self.examples[name] ?? name
      let sparkline: String
      if let curve = try? TimingFunction(parsing: example) {
        let points = (0..<16).map { curve.value(at: Double($0) / 15) }
        sparkline = Sparkline.render(points, range: 0...1, ascii: ascii)
      } else {
        sparkline = String(repeating: " ", count: 16)
      }
      let padding = String(repeating: " ", count: nameWidth - name.count)
      print("  \(name)\(padding)  \(sparkline)  \(Self.descriptions[name] ?? "")")
    }
    print()
    print("Names are case-insensitive. tri to isinc are ffmpeg's afade curves; on a falling ramp they")
    print("mirror in time as afade=t=out does, while Beziers and steps apply to progress either way.")
  }
}
