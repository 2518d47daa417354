import Foundation
import RampProtocol
import Testing

@testable import RampTestSupport

#if canImport(Glibc)
  import Glibc
#endif

/// A stop (or pause) that lands just as a seek completes is not undone by the seek's ramp back
/// in: the seek used to ramp the transport up again, replacing the stop's ramp, and the stream
/// played on, `stopping` for good.
@Suite struct SeekStopTests {
  @Test func aStopRightAfterASeekEndsTheStream() throws {
    let daemon = try DaemonProcess()
    let file = try daemon.constantFile("long", seconds: 30)
    let client = try daemon.client()
    // The window is one block wide, and when it comes depends on the decoder: stops at many
    // delays after the seek, so some land in it (without the fix, most runs caught it).
    for round in 0..<100 {
      let stream = "s\(round)"
      #expect(try client.request(["cmd": "play", "path": .string(file), "stream": .string(stream)]).isOK)
      usleep(30_000)
      try client.send(raw: #"{"id":"seek","cmd":"seek","stream":"\#(stream)","position":5}"#)
      usleep(UInt32(round % 25) * 1_500)
      try client.send(raw: #"{"id":"stop","cmd":"stop","stream":"\#(stream)","fade":0.02}"#)
      #expect(try client.reply(to: "seek").isOK)
      #expect(try client.reply(to: "stop").isOK)
    }
    let deadline = Date().addingTimeInterval(5)
    var streams = try client.request(["cmd": "status"]).result["streams"]?.arrayValue ?? []
    while !streams.isEmpty && Date() < deadline {
      usleep(50_000)
      streams = try client.request(["cmd": "status"]).result["streams"]?.arrayValue ?? []
    }
    #expect(streams.isEmpty, "still playing after their stop: \(streams.map { $0.serialized() })")
  }
}

extension LineClient {
  /// The reply with a string `id`, keeping the events read before it.
  func reply(to id: String) throws -> JSONValue {
    while true {
      let line = try readLine()
      if line["event"] != nil { continue }
      if line["id"] == .string(id) { return line }
      throw HarnessError("unexpected line \(line.serialized()) while waiting for reply \(id)")
    }
  }
}
