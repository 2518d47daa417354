import Foundation
import RampProtocol
import Testing

@testable import RampTestSupport

/// More events at once than the render thread's event queue holds: the overflow is counted and
/// announced (`events-lost`), and a `wait` whose animations ended unseen is answered, not left
/// hanging.
@Suite struct EventsLostTests {
  @Test func aFullEventQueueAnnouncesItsLossesAndReleasesWaits() throws {
    let daemon = try DaemonProcess(extraConfiguration: "[limits]\nevent-queue = 16\n")
    let client = try daemon.client()
    #expect(try client.request(["cmd": "subscribe", "events": ["events-lost"]])["ok"] == .bool(true))
    // Forty additive layers on one key path, all ending on the same sample: forty
    // `animation-finished` events in one block, more than the queue's sixteen slots.
    let layers: [JSONValue] = (0..<40).map { index in
      [
        "cmd": "animate", "key": "master.gain", "name": .string("layer\(index)"),
        "animation": ["type": "basic", "from": 0, "to": 0, "duration": 0.3, "additive": true],
      ]
    }
    #expect(try client.request(["cmd": "batch", "commands": .array(layers)])["ok"] == .bool(true))
    // Sent before they end; answered once they have, whatever was lost.
    let wait = try client.request(["cmd": "wait", "key": "master.gain"])
    let lost = try client.waitForEvent { $0["event"] == .string("events-lost") }
    let count = try #require(lost["count"]?.numberValue)
    #expect(count >= 1 && count <= 40, "\(lost.serialized())")
    #expect(wait["ok"] == .bool(false), "\(wait.serialized())")
    #expect(wait["error"]?["code"] == .string("events-lost"), "\(wait.serialized())")
    // The daemon serves on.
    #expect(try client.request(["cmd": "get", "key": "master.gain"])["ok"] == .bool(true))
  }
}
