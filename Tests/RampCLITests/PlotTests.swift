import Testing

@testable import RampCLI

@Suite struct PlotTests {
  static func ramp(_ count: Int, from: Double = 0, to: Double = 1) -> [Double] {
    (0..<count).map { from + (to - from) * Double($0) / Double(count - 1) }
  }

  /// Every pixel column of a linear ramp's plot has a mark, and every mark is on the diagonal.
  @Test(arguments: PlotStyle.allCases)
  func linearRampPixelsAreOnTheDiagonal(_ style: PlotStyle) {
    let plot = Plot(width: 40, height: 10, style: style, yRange: 0...1)
    let canvas = plot.canvas(columns: plot.downsample(Self.ramp(4801)), yRange: 0...1)
    #expect(canvas.width == 40 * style.cellWidth && canvas.height == 10 * style.cellHeight)
    for x in 0..<canvas.width {
      let marks = canvas.marks(inColumn: x)
      #expect(!marks.isEmpty, "column \(x) is empty")
      let expected = (1 - (Double(x) + 0.5) / Double(canvas.width)) * Double(canvas.height - 1)
      for y in marks {
        #expect(abs(Double(y) - expected) <= 1, "pixel (\(x), \(y)) is off the diagonal (\(expected))")
      }
    }
  }

  /// The same in the text: each row's characters sit where the diagonal crosses that row, and
  /// the corners are marked.
  @Test(arguments: PlotStyle.allCases)
  func linearRampCharactersAreOnTheDiagonal(_ style: PlotStyle) {
    let width = 48
    let height = 12
    let plot = Plot(width: width, height: height, style: style, xRange: 0...2, yRange: 0...1)
    let lines = plot.render(Self.ramp(96001))
    #expect(lines.count == height + 2)
    let axis: Set<Character> = style == .ascii ? ["|", "+"] : ["│", "┤"]
    let area = lines.prefix(height).map { line -> [Character] in
      let characters = Array(line)
      let start = characters.firstIndex(where: axis.contains)! + 1
      return Array(characters[start...])
    }
    for (row, characters) in area.enumerated() {
      let marked = characters.indices.filter { characters[$0] != " " }
      #expect(!marked.isEmpty, "row \(row) is empty")
      for column in marked {
        // The ramp reaches row `row` (0 at the top) over columns width·(1 − (row+1)/height) …
        // width·(1 − row/height); allow one and a half characters either side for rounding
        // to pixel centres.
        let first = Double(width) * (1 - Double(row + 1) / Double(height)) - 1.5
        let last = Double(width) * (1 - Double(row) / Double(height)) + 1.5
        #expect(Double(column) >= first && Double(column) <= last, "row \(row), column \(column)")
      }
    }
    #expect(area.last?.first != " ", "the ramp starts at the bottom left")
    #expect(area.first?.count == width && area.first?.last != " ", "the ramp ends at the top right")
  }

  @Test func fallingRampIsTheOtherDiagonal() {
    let plot = Plot(width: 30, height: 8, yRange: 0...1)
    let canvas = plot.canvas(columns: plot.downsample(Self.ramp(1000, from: 1, to: 0)), yRange: 0...1)
    for x in 0..<canvas.width {
      let expected = (Double(x) + 0.5) / Double(canvas.width) * Double(canvas.height - 1)
      let marks = canvas.marks(inColumn: x)
      #expect(!marks.isEmpty && marks.allSatisfy { abs(Double($0) - expected) <= 1 }, "column \(x): \(marks)")
    }
  }

  /// A jump draws as a vertical line, not two disconnected dots.
  @Test func stepsAreJoined() {
    let values = (0..<1000).map { $0 < 500 ? 0.0 : 1.0 }
    let plot = Plot(width: 20, height: 5, yRange: 0...1)
    let canvas = plot.canvas(columns: plot.downsample(values), yRange: 0...1)
    // Every column's marks touch the previous column's, and together they cover every row.
    for x in 1..<canvas.width {
      let previous = canvas.marks(inColumn: x - 1)
      let marks = canvas.marks(inColumn: x)
      #expect(marks.min()! <= previous.max()! + 1 && marks.max()! >= previous.min()! - 1, "column \(x)")
    }
    let covered = Set((0..<canvas.width).flatMap { canvas.marks(inColumn: $0) })
    #expect(covered == Set(0..<canvas.height))
    #expect(canvas.marks(inColumn: 0) == [canvas.height - 1])
    #expect(canvas.marks(inColumn: canvas.width - 1) == [0])
  }

  @Test func labelsBothAxes() {
    let plot = Plot(width: 64, height: 12, xRange: 0...2, yRange: 0...1)
    let lines = plot.render(Self.ramp(1000))
    #expect(lines[0].hasPrefix("1.00 ┤"))
    #expect(lines[11].hasPrefix("0.00 ┤"))
    #expect(lines.prefix(12).filter { $0.contains("┤") }.count == 5)  // 0, 0.25, 0.5, 0.75, 1
    #expect(lines[12].hasPrefix("     └┬"))
    let labels = lines[13].split(separator: " ").map(String.init)
    #expect(labels.first == "0s" && labels.last == "2s" && labels.contains("1s"))
    #expect(plot.xTicks().map(\.label) == ["0s", "0.5s", "1s", "1.5s", "2s"])
  }

  @Test func timeAxisPicksItsUnit() {
    #expect(Plot(width: 40, height: 4, xRange: 0...0.001).xTicks().map(\.label) == ["0ms", "0.5ms", "1ms"])
    #expect(Plot(width: 40, height: 4, xRange: 0...90).xTicks().map(\.label) == ["0s", "50s"])
    #expect(Plot(width: 60, height: 4, xRange: 0...10800).xTicks().map(\.label) == ["0s", "1h", "2h", "3h"])
    #expect(Plot(width: 60, height: 4, xRange: 0...600).xTicks().map(\.label) == ["0s", "2m", "4m", "6m", "8m", "10m"])
  }

  @Test func asciiStaysASCII() {
    let lines = Plot(width: 30, height: 6, style: .ascii, xRange: 0...1, yRange: 0...1).render(Self.ramp(500))
    #expect(lines.allSatisfy { $0.unicodeScalars.allSatisfy(\.isASCII) })
  }

  @Test func ticksAreRound() {
    let quarter = Plot.ticks(0...1, approximateCount: 4)
    #expect(quarter.values == [0, 0.25, 0.5, 0.75, 1] && quarter.decimals == 2)
    let tens = Plot.ticks(0...95, approximateCount: 4)
    #expect(tens.values == [0, 25, 50, 75] && tens.decimals == 0)
    #expect(Plot.niceRange(0...0.8123, approximateCount: 3) == 0...1)
    #expect(Plot.niceRange(0...1, approximateCount: 4) == 0...1)
  }

  @Test func downsamplingKeepsExtremesWhateverTheChunking() {
    var values = Self.ramp(10007)
    values[5003] = 7  // a one-sample spike
    var oneByOne = MinMaxDownsampler(sampleCount: values.count, columns: 37)
    for value in values { oneByOne.add(value) }
    var chunked = MinMaxDownsampler(sampleCount: values.count, columns: 37)
    values.withUnsafeBufferPointer { buffer in
      var start = 0
      for size in [1, 999, 3, 4096, 5000] where start < buffer.count {
        let end = min(start + size, buffer.count)
        chunked.add(contentsOf: UnsafeBufferPointer(rebasing: buffer[start..<end]))
        start = end
      }
    }
    #expect(oneByOne.ranges == chunked.ranges)
    #expect(chunked.ranges.compactMap { $0?.high }.max() == 7)
    #expect(chunked.ranges.first??.low == 0 && chunked.ranges.last??.high == 1)
    #expect(chunked.ranges.allSatisfy { $0 != nil })
  }

  @Test func fewerSamplesThanColumnsStillFillTheWidth() {
    var downsampler = MinMaxDownsampler(sampleCount: 3, columns: 9)
    for value in [0.0, 0.5, 1] { downsampler.add(value) }
    #expect(downsampler.ranges.map { $0?.low } == [0, 0, 0.5, 0.5, 0.5, 0.5, 1, 1, 1])
  }

  @Test func sparklines() {
    #expect(Sparkline.render(Self.ramp(8)) == "▁▂▃▄▅▆▇█")
    #expect(Sparkline.render(Self.ramp(5), ascii: true) == "_.-~^")
    #expect(Sparkline.render([2, -1, .nan], range: 0...1) == "█▁ ")
  }

  @Test func dumbTerminalsGetASCII() {
    #expect(Terminal.prefersASCII(environment: ["TERM": "dumb"]))
    #expect(!Terminal.prefersASCII(environment: ["TERM": "xterm-256color"]))
    #expect(!Terminal.prefersASCII(environment: [:]))
  }
}
