import Foundation
import RampProtocol
import Testing

@testable import RampTestSupport

/// The control side runs on one event loop; what waits for the disk runs off it and comes back.
/// A `play` that measures a file's loudness first (a 3-minute FLAC, uncached: about a second in a
/// debug build) holds up neither the loop nor another connection, while the same connection's next
/// request waits for it and takes effect after it.
@Suite struct ControlLoopTests {
  @Test func measuringAFileHoldsUpOnlyItsOwnConnection() throws {
    let daemon = try DaemonProcess(limiter: "off")
    defer { _ = daemon.stop() }
    let path = "\(daemon.directory)/long.flac"
    let sox = try #require(SystemTool.path("sox"), "sox is not installed (script/setup installs it)")
    let made = try runProcess(
      sox, ["-R", "-n", "-r", "48000", "-c", "2", "-b", "16", path, "synth", "180", "pinknoise", "vol", "0.5"])
    #expect(made.status == 0, "\(made)")
    let measuring = try daemon.client()
    let other = try daemon.client()

    // Sent together, without waiting: the set names the stream the play starts, so it fails
    // unless it is handled after the play is handed to the player.
    let sent = Date()
    try measuring.send(
      raw: JSONValue.object([
        "cmd": "play", "path": .string(path), "stream": "long", "loudness": "-23LUFS", "id": 1,
      ]).serialized())
    try measuring.send(
      raw: JSONValue.object(["cmd": "set", "key": "streams.long.gain", "value": 0.5, "id": 2]).serialized())

    // Meanwhile another connection is answered as usual.
    var roundTrips: [Double] = []
    for index in 0..<10 {
      let start = Date()
      let reply = try other.request(["cmd": "set", "key": "master.gain", "value": .number(0.9 - Double(index) / 100)])
      roundTrips.append(Date().timeIntervalSince(start))
      #expect(reply.isOK, "\(reply.serialized())")
      usleep(10_000)
    }
    let otherDone = Date()

    let play = try measuring.reply(to: 1)
    let playDone = Date()
    let set = try measuring.reply(to: 2)
    #expect(play.isOK, "\(play.serialized())")
    #expect(play.result["loudness"] != nil, "the play measured the file: \(play.serialized())")
    #expect(set.isOK, "the set waited for the play: \(set.serialized())")
    // The measurement outlasted the other connection's ten requests, which were not held up: each
    // took a fraction of it (a loop that measured the file itself answers one of them only once
    // the measurement is over).
    let measured = playDone.timeIntervalSince(sent)
    #expect(playDone > otherDone, "the play took \(measured) s")
    #expect(roundTrips.max()! < measured / 4, "round trips while a file was measured for \(measured) s: \(roundTrips)")
    let status = try other.request(["cmd": "status"])
    let stream = status.result["streams"]?.arrayValue?.first { $0["stream"] == "long" }
    #expect(stream?["gain"]?["model"] == 0.5, "\(status.serialized())")
  }
}
