import ArgumentParser
import Foundation
import RampAudio
import RampDaemon
import RampProtocol
import Testing

@testable import RampCtlCommands

/// Human units are read by one parser (`HumanUnits`, in RampProtocol): a value written in the
/// daemon's configuration file and the same text given to a rampctl flag mean the same thing.
@Suite struct SharedUnitsTests {
  func configuration(_ toml: String) throws -> DaemonConfiguration {
    try DaemonConfiguration.parse(toml: toml, source: "test")
  }

  func request(_ words: String...) throws -> Request {
    let command = try RampCtl.parseAsRoot(Arguments.prepared(words))
    return try #require(command as? any DaemonCommand).request()
  }

  @Test(arguments: [("500ms", 0.5), ("1m30s", 90), ("2s", 2), ("10ms", 0.01), ("1.5", 1.5), ("1h 2m", 3720)])
  func durationsReadTheSameInTheConfigurationAndOnTheCommandLine(text: String, seconds: Double) throws {
    let configured = try configuration("[fade]\nduration = \"\(text)\"").fades.duration
    let flagged = try request("pause", "--fade", text)
    #expect(configured == seconds)
    #expect(flagged == Request(.pause(Transport(fade: seconds))))
    #expect(try HumanUnits.duration(text) == seconds)
  }

  @Test func decibelsReadTheSameInTheConfigurationAndOnTheCommandLine() throws {
    let amplitude = pow(10, -6.0 / 20)
    // gain.max is a level in dB; --gain is an amplitude that may be written in dB.
    let configured = try configuration("[gain]\nmax = \"-6dB\"")
    #expect(configured.maxGainDecibels == -6)
    #expect(configured.maxGain == amplitude)
    #expect(
      try request("play", "/srv/a.wav", "--gain", "-6dB") == Request(.play(Play(path: "/srv/a.wav", gain: amplitude))))
    #expect(try HumanUnits.decibels("-6 dB") == -6)
    #expect(try configuration("[fade]\ndb-floor = \"-6 DB\"").fades.decibelFloor == -6)
  }

  @Test func percentIsAGainOnTheCommandLineAndRefusedWhereTheConfigurationWantsDecibels() throws {
    #expect(try request("play", "/srv/a.wav", "--gain", "50%") == Request(.play(Play(path: "/srv/a.wav", gain: 0.5))))
    #expect(try HumanUnits.gain("50%") == 0.5)
    #expect(throws: ConfigurationError.self) { try configuration("[gain]\nmax = \"50%\"") }
  }

  @Test func sampleRatesReadTheSameInTheConfigurationAndOnTheCommandLine() throws {
    #expect(try configuration("[output]\nrate = \"48k\"").output.sampleRate == 48_000)
    #expect(try configuration("[output]\nrate = \"44.1kHz\"").output.sampleRate == 44_100)
    // rampctl tone --rate writes a file at the rate it read.
    let path = NSTemporaryDirectory() + "rampctl-units-\(UUID().uuidString).wav"
    defer { try? FileManager.default.removeItem(atPath: path) }
    let tone = try #require(
      try RampCtl.parseAsRoot(["tone", path, "--rate", "48k", "--duration", "10ms"]) as? ToneCommand)
    try tone.run()
    let reader = try SoundFileReader(path: path)
    #expect(reader.sampleRate == 48_000)
    #expect(reader.frames == 480)
  }

  @Test func malformedValuesAreRefusedInBothPlaces() {
    for text in ["1m30", "30s1m", "2d", "nan", "-2s"] {
      #expect(throws: ConfigurationError.self) { try configuration("[fade]\nduration = \"\(text)\"") }
      #expect(throws: (any Error).self) { try request("pause", "--fade", text) }
    }
  }
}
