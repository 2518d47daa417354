import Testing

@testable import RampCLI

@Suite struct TextBufferTests {
  @Test func printsFixedPoint() {
    let cases: [(Double, Int, String)] = [
      (0, 9, "0.000000000"), (0.5, 9, "0.500000000"), (1, 9, "1.000000000"), (1.0 / 48000, 9, "0.000020833"),
      (0.999_999_999_9, 9, "1.000000000"), (-0.25, 3, "-0.250"), (-1e-12, 9, "0.000000000"), (123.456, 2, "123.46"),
      (7, 0, "7"), (.nan, 3, "nan"), (-.infinity, 3, "-inf"), (2_000.000_5, 3, "2000.001"),
    ]
    for (value, decimals, text) in cases {
      var buffer = TextBuffer()
      buffer.append(fixed: value, decimals: decimals)
      #expect(buffer.text == text, "\(value)")
    }
  }

  @Test func printsIntegersAndText() {
    var buffer = TextBuffer()
    for value in [0, 7, 12345, -42, Int.max] {
      buffer.append(value)
      buffer.append(byte: 0x09)
    }
    buffer.append("end")
    #expect(buffer.text == "0\t7\t12345\t-42\t\(Int.max)\tend")
  }
}
