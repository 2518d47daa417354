import RampProtocol

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// How a plot draws its marks: each character cell holds a small grid of pixels.
public enum PlotStyle: String, CaseIterable, Sendable {
  /// Unicode braille, 2×4 dots per character: the finest resolution.
  case braille
  /// Unicode quadrant blocks, 2×2 per character: bolder, for fonts with poor braille.
  case blocks
  /// Plain ASCII, 1×3 per character (`.` `-` `'` and `|` for runs): for `TERM=dumb`, logs, mail.
  case ascii

  public var cellWidth: Int {
    switch self {
    case .braille, .blocks: return 2
    case .ascii: return 1
    }
  }

  public var cellHeight: Int {
    switch self {
    case .braille: return 4
    case .blocks: return 2
    case .ascii: return 3
    }
  }

  public var isASCII: Bool { self == .ascii }

  private static let quadrants: [Character] = [
    " ", "▘", "▝", "▀", "▖", "▌", "▞", "▛", "▗", "▚", "▐", "▜", "▄", "▙", "▟", "█",
  ]

  /// The character for a cell whose pixel (x, y) is set when `isSet(x, y)`, x and y counted
  /// from the cell's top-left corner.
  func glyph(_ isSet: (Int, Int) -> Bool) -> Character {
    switch self {
    case .braille:
      // Braille dot numbering: 1 2 3 7 down the left column, 4 5 6 8 down the right.
      let weights: [(Int, Int, UInt32)] = [
        (0, 0, 0x01), (0, 1, 0x02), (0, 2, 0x04), (1, 0, 0x08), (1, 1, 0x10), (1, 2, 0x20), (0, 3, 0x40),
        (1, 3, 0x80),
      ]
      var bits: UInt32 = 0
      for (x, y, weight) in weights where isSet(x, y) { bits |= weight }
      return bits == 0 ? " " : Character(Unicode.Scalar(0x2800 + bits)!)
    case .blocks:
      var bits = 0
      if isSet(0, 0) { bits |= 1 }
      if isSet(1, 0) { bits |= 2 }
      if isSet(0, 1) { bits |= 4 }
      if isSet(1, 1) { bits |= 8 }
      return Self.quadrants[bits]
    case .ascii:
      switch (isSet(0, 0), isSet(0, 1), isSet(0, 2)) {
      case (false, false, false): return " "
      case (true, false, false): return "'"
      case (false, true, false): return "-"
      case (false, false, true): return "."
      case (true, false, true): return ":"
      default: return "|"
      }
    }
  }
}

/// A grid of on/off pixels, (0, 0) at the top left.
public struct Canvas: Sendable, Equatable {
  public let width: Int
  public let height: Int
  private var pixels: [Bool]

  public init(width: Int, height: Int) {
    self.width = max(width, 0)
    self.height = max(height, 0)
    pixels = Array(repeating: false, count: self.width * self.height)
  }

  /// Reads false and ignores writes outside the grid.
  public subscript(x: Int, y: Int) -> Bool {
    get { x >= 0 && x < width && y >= 0 && y < height ? pixels[y * width + x] : false }
    set { if x >= 0 && x < width && y >= 0 && y < height { pixels[y * width + x] = newValue } }
  }

  /// Sets every pixel of column `x` from row `top` down to row `bottom`.
  public mutating func fill(column x: Int, from top: Int, to bottom: Int) {
    guard top <= bottom else { return }
    for y in top...bottom { self[x, y] = true }
  }

  /// The rows of set pixels in column `x`, top first.
  public func marks(inColumn x: Int) -> [Int] {
    (0..<height).filter { self[x, $0] }
  }

  /// The canvas as text, one string per row of `style` cells (trailing blanks kept, so every
  /// row has the same number of characters).
  public func text(style: PlotStyle) -> [String] {
    let cw = style.cellWidth
    let ch = style.cellHeight
    let columns = (width + cw - 1) / cw
    let rows = (height + ch - 1) / ch
    return (0..<rows).map { row in
      String(
        (0..<columns).map { column in
          style.glyph { dx, dy in self[column * cw + dx, row * ch + dy] }
        })
    }
  }
}

/// The lowest and highest value that fell into one column of a plot.
public struct ColumnRange: Sendable, Equatable {
  public var low: Double
  public var high: Double

  public init(low: Double, high: Double) {
    self.low = low
    self.high = high
  }
}

/// Reduces a stream of `sampleCount` values to `columns` min/max ranges without keeping the
/// stream: each value is added once, in order, so a render loop can feed it chunk by chunk.
/// Sample i falls into column ⌊i·columns/sampleCount⌋. With fewer samples than columns, each
/// column shows the sample nearest to it instead.
public struct MinMaxDownsampler: Sendable {
  public let sampleCount: Int
  public let columns: Int
  /// How many values have been added.
  public private(set) var added = 0
  private var lows: [Double]
  private var highs: [Double]
  private var few: [Double] = []

  public init(sampleCount: Int, columns: Int) {
    precondition(sampleCount > 0 && columns > 0, "a downsampler needs at least one sample and one column")
    self.sampleCount = sampleCount
    self.columns = columns
    lows = Array(repeating: .infinity, count: columns)
    highs = Array(repeating: -.infinity, count: columns)
  }

  /// Adds the next value. NaN is counted but not drawn. Values past `sampleCount` are ignored.
  public mutating func add(_ value: Double) {
    defer { added += 1 }
    guard added < sampleCount else { return }
    if sampleCount < columns {
      few.append(value)
      return
    }
    guard !value.isNaN else { return }
    let column = added * columns / sampleCount
    if value < lows[column] { lows[column] = value }
    if value > highs[column] { highs[column] = value }
  }

  public mutating func add(contentsOf values: UnsafeBufferPointer<Double>) {
    guard sampleCount >= columns else {
      for value in values { add(value) }
      return
    }
    // A run of samples at a time, each run within one column.
    var offset = 0
    while offset < values.count, added < sampleCount {
      let column = added * columns / sampleCount
      // The first sample of the next column: the least i with i·columns/sampleCount ≥ column + 1.
      let nextColumnStart = ((column + 1) * sampleCount + columns - 1) / columns
      let run = min(nextColumnStart - added, values.count - offset, sampleCount - added)
      var low = lows[column]
      var high = highs[column]
      for index in offset..<offset + run {
        let value = values[index]
        if value < low { low = value }
        if value > high { high = value }
      }
      lows[column] = low
      highs[column] = high
      offset += run
      added += run
    }
    added += values.count - offset
  }

  public mutating func add(contentsOf values: [Double]) {
    for value in values { add(value) }
  }

  /// One range per column; nil where no (non-NaN) value fell.
  public var ranges: [ColumnRange?] {
    if sampleCount < columns {
      return (0..<columns).map { column in
        let index =
          columns == 1 ? 0 : Int((Double(column) * Double(sampleCount - 1) / Double(columns - 1)).rounded())
        guard index < few.count, !few[index].isNaN else { return nil }
        return ColumnRange(low: few[index], high: few[index])
      }
    }
    return (0..<columns).map { column in
      lows[column] <= highs[column] ? ColumnRange(low: lows[column], high: highs[column]) : nil
    }
  }
}

/// A terminal line plot with a labelled y axis and an x axis in seconds (or any unit):
///
///     1.00 ┤           ⢀⡠⠤⠒⠒⠉⠉
///     0.75 ┤       ⢀⡠⠊⠁
///          …
///     0.00 ┤⣀⣀⡠⠤⠊⠁
///          └┬─────────┬─────────┬
///           0s        1s        2s
///
/// Values are reduced to a min/max range per pixel column, so a spike or a jump is never lost
/// however many values there are, and neighbouring columns are joined by vertical runs so a
/// step draws as a line rather than two dots.
public struct Plot: Sendable {
  /// Character columns of the plotting area (the y labels and axis come on top).
  public var width: Int
  /// Character rows of the plotting area (the x axis and its labels come below).
  public var height: Int
  public var style: PlotStyle
  /// The values at the first and last sample, for the x axis.
  public var xRange: ClosedRange<Double>
  /// How the x labels read.
  public var xAxis: AxisFormat
  /// The values at the bottom and top edges; nil fits the data.
  public var yRange: ClosedRange<Double>?

  public init(
    width: Int, height: Int, style: PlotStyle = .braille, xRange: ClosedRange<Double> = 0...1,
    xAxis: AxisFormat = .seconds, yRange: ClosedRange<Double>? = nil
  ) {
    self.width = max(width, 1)
    self.height = max(height, 1)
    self.style = style
    self.xRange = xRange
    self.xAxis = xAxis
    self.yRange = yRange
  }

  public var pixelColumns: Int { width * style.cellWidth }
  public var pixelRows: Int { height * style.cellHeight }

  /// Plots `values`, evenly spaced across `xRange`.
  public func render(_ values: [Double]) -> [String] {
    render(columns: downsample(values))
  }

  /// Plots per-pixel-column ranges, as a `MinMaxDownsampler` with `pixelColumns` columns makes.
  public func render(columns: [ColumnRange?]) -> [String] {
    let range = resolvedYRange(columns)
    let rows = canvas(columns: columns, yRange: range).text(style: style)
    let ascii = style.isASCII

    // Y labels: nice round values, each on the row its pixel falls in.
    var labels = [String?](repeating: nil, count: height)
    let ticks = Self.ticks(range, approximateCount: yTickCount)
    for value in ticks.values {
      let row = pixelRow(value, range) / style.cellHeight
      if labels[row] == nil { labels[row] = NumberText.fixed(value == 0 ? 0 : value, decimals: ticks.decimals) }
    }
    let gutter = labels.map { $0?.count ?? 0 }.max() ?? 0

    var lines: [String] = []
    for (index, row) in rows.enumerated() {
      let label = labels[index] ?? ""
      let axis = labels[index] == nil ? (ascii ? "|" : "│") : (ascii ? "+" : "┤")
      let line = String(repeating: " ", count: gutter - label.count) + label + " " + axis + row
      lines.append(line.trimmingTrailingBlanks())
    }

    // X axis: a tick under each nice value, labels centred on their ticks where they fit.
    var axis = [Character](repeating: ascii ? "-" : "─", count: width)
    var labelLine = [Character](repeating: " ", count: width)
    var nextFree = 0
    for (value, label) in xTicks() {
      let column = xColumn(value)
      axis[column] = ascii ? "+" : "┬"
      let text = Array(label)
      let start = max(column - (text.count - 1) / 2, 0)
      guard start >= nextFree else { continue }
      if start + text.count > labelLine.count {
        labelLine += [Character](repeating: " ", count: start + text.count - labelLine.count)
      }
      for (offset, character) in text.enumerated() { labelLine[start + offset] = character }
      nextFree = start + text.count + 1
    }
    let indent = String(repeating: " ", count: gutter + 1)
    lines.append(indent + (ascii ? "+" : "└") + String(axis))
    lines.append((indent + " " + String(labelLine)).trimmingTrailingBlanks())
    return lines
  }

  /// The y values labelled: about one every three rows.
  public var yTickCount: Int { max(2, height / 3) }

  /// The x values that get a tick, with their labels: about one every twelve characters.
  public func xTicks() -> [(value: Double, label: String)] {
    let count = max(1, width / 12)
    switch xAxis {
    case .number(let unit):
      let ticks = Self.ticks(xRange, approximateCount: count)
      return ticks.values.map { ($0, HumanUnits.trimmed($0, decimals: ticks.decimals) + unit) }
    case .seconds:
      // Round numbers of the unit that suits the span: 0.25ms steps, 0.5s steps, 2m30s steps.
      let span = xRange.upperBound - xRange.lowerBound
      let scale: Double
      let suffix: String?
      switch span {
      case ..<1: (scale, suffix) = (1000, "ms")
      case ..<120: (scale, suffix) = (1, "s")
      case ..<7200: (scale, suffix) = (1 / 60.0, nil)
      default: (scale, suffix) = (1 / 3600.0, nil)
      }
      let scaled = (xRange.lowerBound * scale)...(xRange.upperBound * scale)
      let ticks = Self.ticks(scaled, approximateCount: count)
      return ticks.values.map { value in
        let seconds = value / scale
        let label =
          suffix.map { HumanUnits.trimmed(value, decimals: ticks.decimals) + $0 }
          ?? HumanUnits.format(duration: seconds)
        return (seconds, label)
      }
    }
  }

  /// `range` widened to the round values `ticks` would label at its ends, so the top and
  /// bottom rows get labels: 0...0.8123 becomes 0...1 with three ticks.
  public static func niceRange(_ range: ClosedRange<Double>, approximateCount: Int) -> ClosedRange<Double> {
    let ticks = ticks(range, approximateCount: approximateCount)
    guard ticks.values.count >= 2 else { return range }
    let step = ticks.values[1] - ticks.values[0]
    let low = (range.lowerBound / step + 1e-9).rounded(.down) * step
    let high = (range.upperBound / step - 1e-9).rounded(.up) * step
    return low...high
  }

  /// The pixels `render` draws, for tests and other front ends.
  public func canvas(columns: [ColumnRange?], yRange range: ClosedRange<Double>) -> Canvas {
    var canvas = Canvas(width: pixelColumns, height: pixelRows)
    var previous: (top: Int, bottom: Int)?
    for x in 0..<min(columns.count, pixelColumns) {
      guard let column = columns[x], column.low.isFinite, column.high.isFinite else {
        previous = nil
        continue
      }
      // A column whose values span less than a pixel gets the one pixel of their middle, so a
      // gentle slope draws one dot thick instead of doubling wherever it crosses a row boundary.
      let spanInPixels = (column.high - column.low) / (range.upperBound - range.lowerBound) * Double(pixelRows - 1)
      let own =
        spanInPixels < 1
        ? (
          top: pixelRow((column.high + column.low) / 2, range), bottom: pixelRow((column.high + column.low) / 2, range)
        )
        : (top: pixelRow(column.high, range), bottom: pixelRow(column.low, range))
      var top = own.top
      var bottom = own.bottom
      // Join to the previous column: draw the jump in this one, up to the pixel next to it.
      if let previous {
        if previous.bottom < top - 1 { top = previous.bottom + 1 }
        if previous.top > bottom + 1 { bottom = previous.top - 1 }
      }
      canvas.fill(column: x, from: top, to: bottom)
      previous = own
    }
    return canvas
  }

  /// `yRange`, or the data's extent (widened when flat so a constant still has somewhere to go).
  public func resolvedYRange(_ columns: [ColumnRange?]) -> ClosedRange<Double> {
    if let yRange, yRange.lowerBound.isFinite, yRange.upperBound.isFinite, yRange.lowerBound < yRange.upperBound {
      return yRange
    }
    let finite = columns.compactMap { $0 }.filter { $0.low.isFinite && $0.high.isFinite }
    guard let low = finite.map(\.low).min(), let high = finite.map(\.high).max() else { return 0...1 }
    if low < high { return low...high }
    return low == 0 ? 0...1 : (low - abs(low) / 2)...(high + abs(high) / 2)
  }

  /// The min/max columns of evenly spaced `values` at this plot's resolution.
  public func downsample(_ values: [Double]) -> [ColumnRange?] {
    guard !values.isEmpty else { return Array(repeating: nil, count: pixelColumns) }
    var downsampler = MinMaxDownsampler(sampleCount: values.count, columns: pixelColumns)
    downsampler.add(contentsOf: values)
    return downsampler.ranges
  }

  /// The pixel row of `value`: 0 for the top of `range`, `pixelRows − 1` for the bottom.
  public func pixelRow(_ value: Double, _ range: ClosedRange<Double>) -> Int {
    let span = range.upperBound - range.lowerBound
    guard span > 0, value.isFinite else { return pixelRows - 1 }
    let fraction = (range.upperBound - value) / span
    let row = (fraction * Double(pixelRows - 1)).rounded()
    return Int(min(max(row, 0), Double(pixelRows - 1)))
  }

  /// The character column an x value falls in.
  func xColumn(_ value: Double) -> Int {
    let span = xRange.upperBound - xRange.lowerBound
    guard span > 0 else { return 0 }
    let column = ((value - xRange.lowerBound) / span * Double(width)).rounded(.down)
    return Int(min(max(column, 0), Double(width - 1)))
  }

  /// Round values (multiples of 1, 2, 2.5 or 5 × 10ⁿ) spanning `range`, about `approximateCount`
  /// steps apart, and the decimals that print them exactly.
  public static func ticks(_ range: ClosedRange<Double>, approximateCount: Int) -> (values: [Double], decimals: Int) {
    let low = range.lowerBound
    let high = range.upperBound
    guard low.isFinite, high.isFinite else { return ([], 0) }
    let span = high - low
    guard span > 0 else { return ([low], 3) }
    let raw = span / Double(max(approximateCount, 1))
    let exponent = (log10(raw)).rounded(.down)
    let mantissa = raw / pow(10, exponent)
    let nice: Double = mantissa <= 1 ? 1 : mantissa <= 2 ? 2 : mantissa <= 2.5 ? 2.5 : mantissa <= 5 ? 5 : 10
    let step = nice * pow(10, exponent)
    let stepExponent = Int((log10(step) + 1e-9).rounded(.down))
    let decimals = max(0, -stepExponent + (nice == 2.5 ? 1 : 0))
    var values: [Double] = []
    var index = (low / step - 1e-9).rounded(.up)
    while index * step <= high + step * 1e-9, values.count < 1000 {
      let value = index * step
      values.append(abs(value) < step * 1e-9 ? 0 : value)
      index += 1
    }
    return (values, decimals)
  }
}

/// How an axis labels its values.
public enum AxisFormat: Sendable, Equatable {
  /// Seconds, labelled in ms, s, or minutes and hours (`1m30s`) as the span suits.
  case seconds
  /// Plain numbers with `unit` appended.
  case number(unit: String)
}

/// A one-line chart of values: `▁▂▃▅▇█` (or `_.-~^` in ASCII).
public enum Sparkline {
  static let bars: [Character] = ["▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"]
  static let asciiBars: [Character] = ["_", ".", "-", "~", "^"]

  /// One character per value; `range` (default: the values' extent) maps to the lowest and
  /// highest bar, values outside it are clamped, NaN is a blank.
  public static func render(_ values: [Double], range: ClosedRange<Double>? = nil, ascii: Bool = false) -> String {
    let levels = ascii ? asciiBars : bars
    let finite = values.filter(\.isFinite)
    let low = range?.lowerBound ?? finite.min() ?? 0
    let high = range?.upperBound ?? finite.max() ?? 1
    let span = high - low
    return String(
      values.map { value -> Character in
        guard value.isFinite else { return " " }
        guard span > 0 else { return levels[levels.count / 2] }
        let fraction = min(max((value - low) / span, 0), 1)
        return levels[Int((fraction * Double(levels.count - 1)).rounded())]
      })
  }
}

extension String {
  func trimmingTrailingBlanks() -> String {
    var text = self
    while text.last == " " { text.removeLast() }
    return text
  }
}
