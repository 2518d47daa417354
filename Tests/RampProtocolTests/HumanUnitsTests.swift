import Testing

@testable import RampProtocol

/// The problem `parse` reports, or nil when it accepts the text.
private func problem(_ parse: () throws(UnitError) -> Double) -> UnitError.Problem? {
  do {
    _ = try parse()
    return nil
  } catch {
    return error.problem
  }
}

private func isMalformed(_ problem: UnitError.Problem?) -> Bool {
  if case .malformed = problem { return true }
  return false
}

private func close(_ a: Double, _ b: Double, _ tolerance: Double = 1e-12) -> Bool {
  abs(a - b) <= tolerance * max(1, abs(b))
}

@Suite struct DurationTests {
  static let accepted: [(String, Double)] = [
    ("2s", 2), ("500ms", 0.5), ("1m30s", 90), ("1.5", 1.5), ("1h", 3600), ("0", 0), ("0s", 0), ("0ms", 0),
    ("1h2m3.5s", 3723.5), ("1h30m", 5400), ("2m", 120), ("1min", 60), ("1m30s250ms", 90.25), ("1s500ms", 1.5),
    (" 2s ", 2), ("2 s", 2), ("1m 30s", 90), ("2S", 2), ("500MS", 0.5), (".5s", 0.5), ("2.s", 2), ("+2s", 2),
    ("-0s", 0), ("1e3ms", 1), ("1e-3", 0.001), ("1.5h", 5400), ("0.25", 0.25), ("10", 10),
  ]

  @Test(arguments: accepted)
  func acceptsEveryForm(_ text: String, _ seconds: Double) throws {
    #expect(close(try HumanUnits.duration(text, option: "--duration"), seconds), "\(text)")
  }

  @Test(arguments: ["", " ", "\t"])
  func refusesEmpty(_ text: String) {
    #expect(problem { () throws(UnitError) in try HumanUnits.duration(text) } == .empty)
  }

  @Test(arguments: ["-2s", "-1.5", "-1m30s", "-500ms", "-inf", "\u{2212}2s"])
  func refusesNegative(_ text: String) {
    #expect(problem { () throws(UnitError) in try HumanUnits.duration(text) } == .negative, "\(text)")
  }

  @Test(arguments: ["nan", "NaN", "nans", "-nan", "nan ms"])
  func refusesNaN(_ text: String) {
    #expect(problem { () throws(UnitError) in try HumanUnits.duration(text) } == .notANumber, "\(text)")
  }

  @Test(arguments: ["inf", "Infinity", "+inf", "infs", "inf h", "1e400", "1e400s", "1e306h"])
  func refusesInfinite(_ text: String) {
    #expect(problem { () throws(UnitError) in try HumanUnits.duration(text) } == .infinite, "\(text)")
  }

  @Test(arguments: [
    "abc", "2x", "1m30", "30s1m", "1s1s", "1m1min", "s", "ms", "1..5s", "1 2s", "0x10", "--2s", "2s-1s", "2s!",
    "1e", "5 sec", "2 hours", ".", "+", "-",
  ])
  func refusesGarbage(_ text: String) {
    #expect(isMalformed(problem { () throws(UnitError) in try HumanUnits.duration(text) }), "\(text)")
  }

  @Test func errorsNameTheOptionAndTheProblem() {
    let cases: [(String, String)] = [
      ("-2s", "--duration: '-2s' is negative"), ("", "--duration: the value is empty"),
      ("nan", "--duration: 'nan' is not a number"), ("inf", "--duration: 'inf' is not finite"),
      ("1m30", "--duration: '1m30' is not valid ('30' has no unit"),
      ("2x", "--duration: '2x' is not valid (unknown unit 'x'"),
    ]
    for (text, prefix) in cases {
      do {
        _ = try HumanUnits.duration(text, option: "--duration")
        Issue.record("\(text) was accepted")
      } catch {
        #expect(error.description.hasPrefix(prefix), "\(error.description)")
        #expect(error.description.contains("expected a duration >= 0 such as 2s, 500ms, 1m30s"))
        #expect(error.option == "--duration" && error.input == text)
      }
    }
  }

  @Test func formatsWhatItParses() throws {
    let cases: [(Double, String)] = [
      (0, "0s"), (0.25, "250ms"), (0.0005, "0.5ms"), (2, "2s"), (1.5, "1.5s"), (90, "1m30s"), (3600, "1h"),
      (3723.5, "1h2m3.5s"), (5400, "1h30m"), (67.5, "1m7.5s"),
    ]
    for (seconds, text) in cases {
      #expect(HumanUnits.format(duration: seconds) == text)
      #expect(close(try HumanUnits.duration(text), seconds), "\(text)")
    }
  }
}

@Suite struct GainTests {
  static let accepted: [(String, Double)] = [
    ("0.5", 0.5), ("1", 1), ("0", 0), ("2", 2), (".25", 0.25), ("1e-3", 0.001), (" 0.5 ", 0.5), ("+0.5", 0.5),
    ("50%", 0.5), ("50 %", 0.5), ("100%", 1), ("0%", 0), ("12.5%", 0.125), ("200%", 2),
    ("-6dB", 0.501_187_233_627_272_3), ("-6 dB", 0.501_187_233_627_272_3), ("-6db", 0.501_187_233_627_272_3),
    ("-6DB", 0.501_187_233_627_272_3), ("0dB", 1), ("+6dB", 1.995_262_314_968_879_5), ("6dB", 1.995_262_314_968_879_5),
    ("-20dB", 0.1), ("-60 dB", 0.001), ("-inf dB", 0), ("-infdB", 0), ("-Infinity dB", 0), ("-INF DB", 0),
    ("\u{2212}6 dB", 0.501_187_233_627_272_3), ("\u{2212}inf dB", 0),
  ]

  @Test(arguments: accepted)
  func acceptsEveryForm(_ text: String, _ amplitude: Double) throws {
    #expect(close(try HumanUnits.gain(text, option: "--to"), amplitude), "\(text)")
  }

  @Test(arguments: ["", "  "])
  func refusesEmpty(_ text: String) {
    #expect(problem { () throws(UnitError) in try HumanUnits.gain(text) } == .empty)
  }

  @Test(arguments: ["-0.5", "-1", "-50%", "-inf", "-1e-9"])
  func refusesNegative(_ text: String) {
    #expect(problem { () throws(UnitError) in try HumanUnits.gain(text) } == .negative, "\(text)")
  }

  @Test(arguments: ["nan", "NaN", "nan%", "nan dB", "-nan dB"])
  func refusesNaN(_ text: String) {
    #expect(problem { () throws(UnitError) in try HumanUnits.gain(text) } == .notANumber, "\(text)")
  }

  @Test(arguments: ["inf", "+inf", "infinity", "inf%", "inf dB", "+inf dB", "1e400", "1e400%", "10000dB"])
  func refusesInfinite(_ text: String) {
    #expect(problem { () throws(UnitError) in try HumanUnits.gain(text) } == .infinite, "\(text)")
  }

  @Test(arguments: ["abc", "dB", "%", "0.5x", "6 d B", "0x1p-1", "50%%", "--6dB", "half", "1/2", "0.5 0.5", "db-6"])
  func refusesGarbage(_ text: String) {
    #expect(isMalformed(problem { () throws(UnitError) in try HumanUnits.gain(text) }), "\(text)")
  }

  @Test func errorsNameTheOptionAndTheProblem() {
    let cases: [(String, String)] = [
      ("-0.5", "--from: '-0.5' is negative"), ("", "--from: the value is empty"),
      ("nan", "--from: 'nan' is not a number"), ("+inf dB", "--from: '+inf dB' is not finite"),
      ("abc", "--from: 'abc' is not valid"),
    ]
    for (text, prefix) in cases {
      do {
        _ = try HumanUnits.gain(text, option: "--from")
        Issue.record("\(text) was accepted")
      } catch {
        #expect(error.description.hasPrefix(prefix), "\(error.description)")
        #expect(error.description.contains("expected a gain >= 0 such as 0.5, 50%, -6dB or -inf dB"))
      }
    }
  }

  @Test func formatsDecibelsAndGains() {
    #expect(HumanUnits.format(decibels: 0) == "-inf dB")
    #expect(HumanUnits.format(decibels: 1) == "0.00 dB")
    #expect(HumanUnits.format(decibels: 0.5) == "-6.02 dB")
    #expect(HumanUnits.format(decibels: 2) == "+6.02 dB")
    #expect(HumanUnits.format(decibels: 0.999_999_9) == "0.00 dB")
    #expect(HumanUnits.format(gain: 0) == "0")
    #expect(HumanUnits.format(gain: 0.5) == "0.5")
    #expect(HumanUnits.format(gain: 0.129_162_3) == "0.129162")
    #expect(HumanUnits.format(gain: 1) == "1")
  }
}

@Suite struct SampleRateTests {
  @Test(arguments: [
    ("48000", 48000.0), ("48k", 48000), ("48K", 48000), ("44.1kHz", 44100), ("44.1 kHz", 44100), ("48000Hz", 48000),
    ("48000 hz", 48000), ("96 k", 96000), ("0.5", 0.5),
  ])
  func acceptsEveryForm(_ text: String, _ hertz: Double) throws {
    #expect(close(try HumanUnits.sampleRate(text, option: "--rate"), hertz), "\(text)")
  }

  @Test func refusesWhatIsNotARate() {
    let cases: [(String, UnitError.Problem)] = [
      ("", .empty), ("0", .zero), ("0k", .zero), ("-48000", .negative), ("nan", .notANumber), ("inf", .infinite),
      ("1e308k", .infinite),
    ]
    for (text, expected) in cases {
      #expect(problem { () throws(UnitError) in try HumanUnits.sampleRate(text) } == expected, "\(text)")
    }
    for text in ["x", "kHz", "48x", "48 kk", "hz"] {
      #expect(isMalformed(problem { () throws(UnitError) in try HumanUnits.sampleRate(text) }), "\(text)")
    }
  }
}

@Suite struct LoudnessTargetTests {
  @Test(arguments: [
    ("-18LUFS", -18.0), ("-18 LUFS", -18), ("-23lufs", -23), ("\u{2212}16LUFS", -16), ("-5LUFS", -5),
    ("-60LUFS", -60), ("-18.5LUFS", -18.5),
  ])
  func acceptsEveryForm(_ text: String, _ lufs: Double) throws {
    #expect(try HumanUnits.loudness(text, option: "--loudness") == lufs, "\(text)")
  }

  /// The unit is required, the range enforced, and each refusal says which.
  @Test func refusesWhatIsNotATarget() {
    let cases: [(String, UnitError.Problem)] = [
      ("", .empty), ("5", .malformed("no unit: write LUFS after the number")),
      ("-18", .malformed("no unit: write LUFS after the number")), ("-18dB", .malformed("no LUFS unit")),
      ("LUFS", .malformed("no number before LUFS")), ("nanLUFS", .notANumber), ("-infLUFS", .infinite),
      ("+3LUFS", .outOfRange("above the maximum, -5 LUFS")), ("-4LUFS", .outOfRange("above the maximum, -5 LUFS")),
      ("-61LUFS", .outOfRange("below the minimum, -60 LUFS")),
    ]
    for (text, expected) in cases {
      #expect(problem { () throws(UnitError) in try HumanUnits.loudness(text) } == expected, "\(text)")
    }
  }
}
