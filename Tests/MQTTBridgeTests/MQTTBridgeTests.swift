import Foundation
import RampProtocol
import Testing

@testable import RampTestSupport

#if canImport(Glibc)
  import Glibc
#endif

/// rampd-mqtt between a real Mosquitto 2.0 (a port and configuration of its own) and a real rampd
/// recording what it plays (ALSA's file plugin): commands published with mosquitto_pub are heard
/// in the recording; what it retains is read back with mosquitto_sub.
@Suite(.serialized) struct MQTTBridgeTests {
  /// A rampd playing a constant 1.0 (no limiter) as stream `bed`, a broker, a bridge.
  struct Box {
    let daemon: DaemonProcess
    let bridge: BridgeProcess

    init(_ box: String, broker: Broker, name: String = #function, arguments: [String] = []) throws {
      daemon = try DaemonProcess(name: name + box, limiter: "off")
      let file = try daemon.constantFile("one", seconds: 2)
      let play = try daemon.client().request(["cmd": "play", "path": .string(file), "stream": "bed", "loop": true])
      guard play.isOK else { throw HarnessError("play: \(play.serialized())") }
      bridge = try BridgeProcess(box: box, broker: broker, socket: daemon.socket, arguments: arguments)
    }
  }

  @Test func aSetPublishedIsHeardAtThatLevel() throws {
    let broker = try Broker()
    let box = try Box("k1", broker: broker)
    try broker.waitFor("rampd/k1/availability", "online")
    usleep(200_000)
    // rampctl's units, and JSON; the key path with dots in one level, or with a level for each.
    try broker.publish("rampd/k1/set/master.gain", #"{"value":"-6dB","duration":0}"#)
    try waitFor("master.gain at -6 dB") { try model("master.gain", box.daemon) == pow(10, -6.0 / 20) }
    usleep(300_000)
    try broker.publish("rampd/all/set/streams/bed/gain", "25%")
    try waitFor("bed at 25 %") { try model("streams.bed.gain", box.daemon) == 0.25 }
    // The implicit ramp (0.25 s) and then 0.3 s at the level.
    usleep(600_000)
    try broker.waitFor("rampd/k1/state/streams.bed.gain", "0.25")
    try broker.waitFor("rampd/k1/state/master.gain", HumanUnits.trimmed(pow(10, -6.0 / 20), decimals: 6))
    box.daemon.stop()
    let heard = runs(try box.daemon.played(channel: 0)).filter { $0.count >= 4_800 }.map(\.value)
    let minus6 = Float(pow(10, -6.0 / 20))
    // Full scale, then -6 dB at once (duration 0), then 25 % of that after the implicit ramp.
    #expect(heard.prefix(3) == [1, minus6, minus6 * 0.25], "steady levels heard: \(heard)\n\(box.bridge.log)")
  }

  @Test func discoveryStateAndAvailabilityAreRetained() throws {
    let broker = try Broker()
    let box = try Box("kitchen", broker: broker)
    try broker.waitFor("rampd/kitchen/availability", "online")
    try broker.waitFor("rampd/kitchen/state/master.gain", "1")
    // The stream playing before the bridge came has its entity and its state too.
    try broker.waitFor("rampd/kitchen/state/streams.bed.gain", "1")
    let configs = try broker.messages("homeassistant/+/+/config", count: 4)
    let byTopic = Dictionary(configs.map { ($0.topic, $0.payload) }) { a, _ in a }
    #expect(
      Set(byTopic.keys) == [
        "homeassistant/number/kitchen_master_gain/config", "homeassistant/number/kitchen_stream_bed_gain/config",
        "homeassistant/button/kitchen_fade_out/config", "homeassistant/button/kitchen_stop/config",
      ], "\(byTopic.keys)")
    for (topic, payload) in byTopic {
      let config = try JSON.parse(payload)
      #expect(config["unique_id"]?.stringValue?.contains("kitchen") == true, "\(topic): \(payload)")
      #expect(config["availability_topic"] == "rampd/kitchen/availability", "\(topic)")
      #expect(config["device"]?["identifiers"] == ["rampd_kitchen"], "\(topic)")
      #expect(config["command_topic"]?.stringValue?.hasPrefix("rampd/kitchen/") == true, "\(topic)")
    }
    let master = try JSON.parse(byTopic["homeassistant/number/kitchen_master_gain/config"] ?? "{}")
    #expect(master["state_topic"] == "rampd/kitchen/state/master.gain" && master["max"] == 100)

    // What Home Assistant sends: the slider's percent through its command template, a button's PRESS.
    try broker.publish("rampd/kitchen/set/master.gain", "40%")
    try broker.waitFor("rampd/kitchen/state/master.gain", "0.4")
    try broker.publish("rampd/kitchen/stop", "PRESS")
    // The stream is gone: its state and its entity are no longer retained.
    try waitFor("the bed's config removed") {
      try broker.retained("homeassistant/number/kitchen_stream_bed_gain/config") == nil
    }
    #expect(try broker.retained("rampd/kitchen/state/streams.bed.gain") == nil)

    // Killed without a word: the broker publishes its Last Will.
    box.bridge.kill()
    try broker.waitFor("rampd/kitchen/availability", "offline")
    // Back, and online again; stopped cleanly, offline said by the bridge itself.
    let again = try BridgeProcess(box: "kitchen", broker: broker, socket: box.daemon.socket)
    try broker.waitFor("rampd/kitchen/availability", "online")
    #expect(again.terminate() == 0)
    try broker.waitFor("rampd/kitchen/availability", "offline")
    #expect(again.log.contains("stopping"))
  }

  /// The broker restarts while the bridge is away from it; a QoS 1 command published before the
  /// bridge is back is kept for its persistent session (a fixed client id, clean session off)
  /// and applied once it reconnects.
  @Test func aQoS1CommandPublishedWhileTheBridgeIsAwayIsApplied() throws {
    let broker = try Broker()
    let box = try Box("k1", broker: broker)
    try broker.waitFor("rampd/k1/availability", "online")
    broker.stop()
    try waitFor("the bridge lost the broker") { box.bridge.log.contains("lost the broker") }
    // libmosquitto tries again after 1 s, then 4 s later (its back-off, squared): the broker is
    // back between the two, and the command is published before the second.
    usleep(1_500_000)
    try broker.start()
    try broker.publish("rampd/k1/set/master.gain", #"{"value":0.3,"duration":0}"#)
    #expect(box.bridge.count("connected to the broker") == 1, "the bridge was back before the publish")
    try waitFor("master.gain at 0.3 once the bridge is back", timeout: 15) {
      try model("master.gain", box.daemon) == 0.3
    }
    #expect(box.bridge.count("connected to the broker") == 2, "\(box.bridge.log)")
    try broker.waitFor("rampd/k1/availability", "online")
  }

  /// rampd stops and starts again: the bridge says offline, keeps a command published meanwhile,
  /// reconnects by itself, says online, and sends the command.
  @Test func aCommandPublishedWhileRampdIsDownIsAppliedWhenItIsBack() throws {
    let broker = try Broker()
    let box = try Box("k1", broker: broker)
    try broker.waitFor("rampd/k1/availability", "online")
    #expect(box.daemon.stop() == 0)
    try broker.waitFor("rampd/k1/availability", "offline")
    try broker.publish("rampd/k1/set/master.gain", #"{"value":0.3,"duration":0}"#)
    usleep(500_000)
    let again = try DaemonProcess(limiter: "off", reusing: box.daemon.directory)
    try broker.waitFor("rampd/k1/availability", "online")
    try waitFor("master.gain at 0.3 once rampd is back") { try model("master.gain", again) == 0.3 }
    #expect(box.bridge.count("connected to rampd") == 2, "\(box.bridge.log)")
  }

  /// Bad payloads are answered on rampd/<box>/error and logged; the bridge and rampd go on, and
  /// the stream plays throughout.
  @Test func badPayloadsAreAnsweredOnTheErrorTopic() throws {
    let broker = try Broker()
    // A command left retained on the broker reaches the bridge, flagged retained, when it
    // subscribes: it is refused, since it would run again at every reconnection.
    try broker.publish("rampd/k1/set/master.gain", "0.1", retain: true)
    let box = try Box("k1", broker: broker)
    try broker.waitFor("rampd/k1/availability", "online")
    try waitFor("the retained command refused") {
      box.bridge.log.contains("refused rampd/k1/set/master.gain '0.1': bad-request: a retained command")
    }
    let cases: [(topic: String, payload: String, code: String, field: String?)] = [
      ("set/master.gain", "loud", "invalid-field", "value"),
      ("set/master.gain", "nan", "invalid-field", "value"),
      ("set/master.gain", "1e999", "invalid-field", "value"),
      ("set/master.gain", "5", "out-of-range", "value"),
      ("set/master.gain", "-3", "invalid-field", "value"),
      ("set/streams.nope.gain", "0.5", "unknown-key-path", "key"),
      ("set/master..gain", "0.5", "invalid-field", "key"),
      ("set/master.gain", #"{"value":0.5,"durtion":1}"#, "unknown-field", "durtion"),
      ("set/master.gain", #"{"value":0.5"#, "bad-json", nil),
      ("set/master.gain", #"{"value":0.5,"at":"yesterday"}"#, "invalid-field", "at"),
      ("set/master.gain", #"{"value":0.5,"at":1e300}"#, "invalid-field", "at"),
      ("fade-out", "soon", "invalid-field", "duration"),
      ("set", "0.5", "invalid-field", "key"),
      ("play", "", "missing-field", "path"),
      ("previous", "PRESS", "missing-field", "stream"),
      ("duck/talk", "maybe", "invalid-field", "state"),
      ("duck/talk", #"{"at":"+1s"}"#, "missing-field", "state"),
      ("duck/nope", "ON", "unknown-duck", "name"),
      ("set/master.gain", String(repeating: "1", count: 5000), "line-too-long", nil),
    ]
    // A subscriber waiting before anything is published.
    let listener = Process()
    listener.executableURL = URL(fileURLWithPath: MosquittoTools.subscribe)
    listener.arguments = [
      "-h", "127.0.0.1", "-p", "\(broker.port)", "-t", "rampd/k1/error", "-C", "\(cases.count)", "-W", "20",
    ]
    let output = Pipe()
    listener.standardOutput = output
    try withSignalsUnblocked { try listener.run() }
    usleep(300_000)
    for (topic, payload, _, _) in cases { try broker.publish("rampd/k1/\(topic)", payload) }
    let received = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    listener.waitUntilExit()
    let errors = try received.split(separator: "\n").map { try JSON.parse(String($0)) }
    #expect(errors.count == cases.count, "\(received)\n\(box.bridge.log)")
    // Refused here or by rampd (whose replies come a moment later): matched by topic and payload.
    for expected in cases {
      let error = errors.first {
        $0["topic"]?.stringValue == "rampd/k1/\(expected.topic)"
          && $0["payload"]?.stringValue == String(expected.payload.prefix(256))
      }
      #expect(
        error?["code"]?.stringValue == expected.code && error?["field"]?.stringValue == expected.field,
        "\(expected) → \(error?.serialized() ?? "no error")")
    }
    // A flood: 3000 bad payloads in one connection. The errors published are held to 20 a second,
    // the rest logged; a good command after it is applied.
    let flood = try mosquittoTool(
      MosquittoTools.publish,
      ["-h", "127.0.0.1", "-p", "\(broker.port)", "-q", "1", "-t", "rampd/k1/set/master.gain", "-l"],
      stdin: String(repeating: "loud\n", count: 3000))
    #expect(flood.status == 0, "\(flood)")
    try broker.publish("rampd/k1/set/master.gain", #"{"value":0.5,"duration":0}"#)
    try waitFor("master.gain at 0.5 after the flood", timeout: 20) { try model("master.gain", box.daemon) == 0.5 }
    // Each one delivered is logged. Mosquitto queues at most 1000 QoS 1 messages for a client
    // (max_queued_messages) and drops the rest of a flood the bridge has not taken yet.
    var logged = -1
    try waitFor("the refusals logged") {
      let now = box.bridge.count("refused rampd/k1/set/master.gain 'loud'")
      defer { logged = now }
      usleep(200_000)
      return now == logged
    }
    #expect(logged > 1000 && logged <= 3001, "\(logged) refusals logged")
    #expect(box.bridge.process.isRunning)
    #expect(box.daemon.process.isRunning)
    try broker.waitFor("rampd/k1/availability", "online")
    box.daemon.stop()
    // Uninterrupted: from the first full-scale sample to the last at half, only those two.
    let left = try box.daemon.played(channel: 0)
    let first = try #require(left.firstIndex(of: 1))
    let last = try #require(left.lastIndex(of: 0.5))
    let heard = runs(Array(left[first...last])).map(\.value)
    #expect(heard == [1, 0.5], "levels heard: \(heard.prefix(10))")
  }

  /// A duck rule is a Home Assistant switch: its config retained (for a rule added while the
  /// bridge runs, too), ON holds the rule down and OFF lets it go, as duck-list and the recording
  /// show, its state retained; a rule removed takes its switch away.
  @Test func aDuckSwitchHoldsTheRuleDown() throws {
    let broker = try Broker()
    let box = try Box("k1", broker: broker)
    try broker.waitFor("rampd/k1/availability", "online")
    let client = try box.daemon.client()
    let add = try client.request([
      "cmd": "duck-add", "name": "talk", "targets": ["master.gain"], "depth": 6, "attack": 0.05, "release": 0.05,
    ])
    #expect(add.isOK, "\(add.serialized())")
    // Added after the bridge asked at its connection: seen at its next look (every 5 s).
    let topic = "homeassistant/switch/k1_duck_talk/config"
    try waitFor("the switch's config", timeout: 10) { try broker.retained(topic) != nil }
    let config = try JSON.parse(try #require(try broker.retained(topic)))
    #expect(config["command_topic"] == "rampd/k1/duck/talk" && config["state_topic"] == "rampd/k1/state/duck/talk")
    #expect(config["payload_on"] == "ON" && config["payload_off"] == "OFF", "\(config.serialized())")
    #expect(config["unique_id"] == "rampd_k1_duck_talk" && config["availability_topic"] == "rampd/k1/availability")
    try broker.waitFor("rampd/k1/state/duck/talk", "OFF")
    usleep(300_000)

    func held() throws -> Bool? {
      let list = try client.request(["cmd": "duck-list"])
      return list.result["ducks"]?.arrayValue?.first { $0["name"] == "talk" }?["manual"]?.boolValue
    }
    // What Home Assistant sends: the switch's payload_on, then payload_off.
    try broker.publish("rampd/k1/duck/talk", "ON")
    try broker.waitFor("rampd/k1/state/duck/talk", "ON")
    #expect(try held() == true)
    usleep(500_000)
    try broker.publish("rampd/k1/duck/talk", "OFF")
    try broker.waitFor("rampd/k1/state/duck/talk", "OFF")
    #expect(try held() == false)
    usleep(500_000)

    #expect(try client.request(["cmd": "duck-remove", "name": "talk"]).isOK)
    try waitFor("the switch removed", timeout: 10) { try broker.retained(topic) == nil }
    #expect(try broker.retained("rampd/k1/state/duck/talk") == nil)
    box.daemon.stop()
    // Full scale, 6 dB down while held, full scale again.
    let heard = runs(try box.daemon.played(channel: 0)).filter { $0.count >= 4_800 }.map(\.value)
    let down = Float(pow(10, -6.0 / 20))
    #expect(heard.count == 3, "steady levels heard: \(heard)\n\(box.bridge.log)")
    if heard.count == 3 {
      #expect(heard[0] == 1 && abs(heard[1] - down) < 1e-6 && heard[2] == 1, "steady levels heard: \(heard)")
    }
  }

  /// A queue stream gets Home Assistant buttons for next and previous, which publish the stream's
  /// name on rampd/<box>/next and previous: the queue skips (queue-list says which item plays,
  /// the recording hears it), and the buttons go when the stream ends.
  @Test func queueButtonsSkip() throws {
    let broker = try Broker()
    let box = try Box("k1", broker: broker)
    try broker.waitFor("rampd/k1/availability", "online")
    let client = try box.daemon.client()
    // The bed at half, so that the sums stay within full scale.
    #expect(try client.request(["cmd": "set", "key": "streams.bed.gain", "value": 0.5, "duration": 0]).isOK)
    let first = try box.daemon.constantFile("quarter", seconds: 20, left: 0.25, right: 0.25)
    let second = try box.daemon.constantFile("half", seconds: 20, left: 0.5, right: 0.5)
    let play = try client.request([
      "cmd": "play", "path": .string(first), "stream": "music", "queue": [.string(second)],
    ])
    #expect(play.isOK, "\(play.serialized())")
    var buttons: [String: JSONValue] = [:]
    for command in ["next", "previous"] {
      let topic = "homeassistant/button/k1_stream_music_\(command)/config"
      try waitFor("the \(command) button") { try broker.retained(topic) != nil }
      buttons[command] = try JSON.parse(try #require(try broker.retained(topic)))
      #expect(buttons[command]?["command_topic"]?.stringValue == "rampd/k1/\(command)", "\(topic)")
      #expect(buttons[command]?["payload_press"] == "music", "\(topic)")
    }
    // The bed plays no queue: no buttons for it.
    #expect(try broker.retained("homeassistant/button/k1_stream_bed_next/config") == nil)

    func current() throws -> Double? {
      try client.request(["cmd": "queue-list", "stream": "music"]).result["queue"]?["current"]?.numberValue
    }
    #expect(try current() == 0)
    usleep(500_000)
    // What Home Assistant sends on a press: the button's command topic and payload_press.
    for (command, index) in [("next", 1.0), ("previous", 0.0)] {
      try broker.publish(
        try #require(buttons[command]?["command_topic"]?.stringValue),
        try #require(buttons[command]?["payload_press"]?.stringValue))
      try waitFor("\(command): item \(index)") { try current() == index }
      usleep(500_000)
    }
    #expect(try client.request(["cmd": "stop", "stream": "music"]).isOK)
    for command in ["next", "previous"] {
      try waitFor("the \(command) button removed") {
        try broker.retained("homeassistant/button/k1_stream_music_\(command)/config") == nil
      }
    }
    usleep(300_000)
    box.daemon.stop()
    // With the bed at half: the first item, the second (next), the first again (previous), the
    // bed alone (before them, the bed may have played too briefly at full or at half to count).
    let heard = runs(try box.daemon.played(channel: 0)).filter { $0.count >= 4_800 }.map(\.value)
    #expect(
      Array(heard.drop { $0 == 1 || $0 == 0.5 }) == [0.75, 1, 0.75, 0.5],
      "steady levels heard: \(heard)\n\(box.bridge.log)")
  }

  /// docs/rampd-mqtt.1 (script/man) holds every help text and renders without a warning.
  @Test func manPage() throws {
    try ManPage.checkEveryHelpText("rampd-mqtt", binary: Executables.rampdMQTT, atLeast: 12)
    try ManPage.checkRendersWithoutWarnings("rampd-mqtt")
  }
}

/// A fleet: two rampd on this machine, each with its own bridge, one broker. One publish on
/// rampd/all with a wall-clock `at` fades both, and their recordings start the fade on the same
/// wall-clock instant; one box's bridge killed and restarted meanwhile changes nothing of that.
extension MQTTBridgeTests {
  @Suite struct Fleet {
    /// When each recording's frames were written: its size, looked at every 0.2 ms.
    final class GrowthWatch: @unchecked Sendable {
      private let lock = NSLock()
      private var stopped = false
      private var seen: [[(time: Double, frames: Int)]]
      private let paths: [String]

      init(_ paths: [String]) {
        self.paths = paths
        seen = paths.map { _ in [] }
        Thread { [self] in
          while !lock.withLock({ stopped }) {
            for (index, path) in paths.enumerated() {
              var info = stat()
              guard stat(path, &info) == 0 else { continue }
              let frames = Int(info.st_size) / 8
              let now = Date().timeIntervalSince1970
              lock.withLock {
                // Only the first time each size is seen: when that write landed, within a look.
                if seen[index].last?.frames != frames { seen[index].append((now, frames)) }
              }
            }
            usleep(200)
          }
        }.start()
      }

      func stop() -> [[(time: Double, frames: Int)]] {
        lock.withLock {
          stopped = true
          return seen
        }
      }

      /// The wall-clock time frame `frame` was written, from the writes of the second around it
      /// (24000 frames either side), each moved along the clock (48000 frames a second) to that
      /// frame: the earliest. A write is seen late (a look every 0.2 ms, a loaded machine), never
      /// early, so the earliest is when they landed; only near ones count, since a render thread
      /// that fell behind elsewhere starts its clock afresh there.
      static func time(of frame: Int, in writes: [(time: Double, frames: Int)]) -> Double? {
        let near = writes.filter { abs($0.frames - frame) <= 24_000 }
        guard near.count >= 10 else { return nil }
        return near.map { $0.time + Double(frame - $0.frames) / 48_000 }.min()
      }
    }

    @Test func aGroupCommandWithAtFadesEveryBoxOnTheSameInstant() throws {
      let broker = try Broker()
      let a = try Box("room-a", broker: broker)
      let b = try Box("room-b", broker: broker)
      try broker.waitFor("rampd/room-a/availability", "online")
      try broker.waitFor("rampd/room-b/availability", "online")
      let watch = GrowthWatch([a.daemon.recording, b.daemon.recording])
      usleep(1_000_000)
      let due = ((Date().timeIntervalSince1970 + 1.5) * 1000).rounded() / 1000
      try broker.publish(
        "rampd/all/fade/master.gain", #"{"to":0.5,"duration":1,"curve":"linear","at":"\#(RFC3339.format(due))"}"#)
      // Saved by both rampd; then room-b's bridge dies and comes back before the fade is due.
      for box in [a, b] {
        try waitFor("the fade scheduled") {
          try box.daemon.client().request(["cmd": "status"]).result["scheduled"]?.arrayValue?.count == 1
        }
      }
      b.bridge.kill()
      try broker.waitFor("rampd/room-b/availability", "offline")
      let restarted: BridgeProcess
      do { restarted = try BridgeProcess(box: "room-b", broker: broker, socket: b.daemon.socket) } catch {
        throw HarnessError("\(error)\nbroker: \(broker.log.suffix(3000))\nrampd b: \(b.daemon.log.suffix(2000))")
      }
      try broker.waitFor("rampd/room-b/availability", "online")
      #expect(Date().timeIntervalSince1970 < due - 0.1, "the restart took until the fade was due")
      usleep(UInt32(max(0, due + 1.3 - Date().timeIntervalSince1970) * 1e6))
      let writes = watch.stop()
      a.daemon.stop()
      b.daemon.stop()
      var instants: [Double] = []
      for (index, box) in [a, b].enumerated() {
        let left = try box.daemon.played(channel: 0)
        let first = try #require(left.firstIndex(of: 1))
        let change = try #require(left[first...].firstIndex { $0 < 1 })
        // Played on throughout, the bridge's death included: full scale up to the fade, a linear
        // fade to half over a second.
        #expect(left[first..<change].allSatisfy { $0 == 1 }, "box \(index) interrupted")
        #expect(abs(left[change + 24_000] - 0.75) < 1e-3, "box \(index): \(left[change + 24_000]) half-way")
        let written = try #require(GrowthWatch.time(of: change, in: writes[index]))
        instants.append(written)
        // Written about when it is heard (ALSA's null, paced by the clock, keeps no delay of its
        // own): within a buffer, where `at` ignored would be 1.5 s early. A loaded machine writes
        // both late alike, which `apart` below cancels.
        #expect(abs(written - due) < 0.025, "box \(index) faded \((written - due) * 1000) ms from its at")
        print("box \(index): fade starts at frame \(change), written \((written - due) * 1000) ms from its at")
      }
      let apart = abs(instants[0] - instants[1])
      print("the two fades start \(apart * 1000) ms apart")
      // Both rampd write a buffer (20 ms) ahead of what is heard, so the write times are the heard
      // times less the same delay.
      #expect(apart < 0.001, "the fades start \(apart * 1000) ms apart")
      #expect(restarted.process.isRunning)
    }
  }
}

extension MQTTBridgeTests {
  /// Latency: from a publish to rampd applying it (its `animation-started` event, read by a
  /// subscribed connection), against the same request sent on rampd's socket, in the same run.
  /// What is heard follows by the output's delay (`status` output.delay), the same for both.
  @Suite(.serialized) struct Latency {
    @Test func publishToAppliedAgainstTheSocket() throws {
      let broker = try Broker()
      let box = try Box("k1", broker: broker)
      try broker.waitFor("rampd/k1/availability", "online")
      let watcher = try box.daemon.client()
      try watcher.request(["cmd": "subscribe", "events": ["animation-started"]])
      let publisher = try LinePublisher(broker: broker, topic: "rampd/k1/fade/master.gain")
      let direct = try box.daemon.client()
      var lastID = 0
      func applied(after start: Date) throws -> Double {
        let event = try watcher.waitForEvent(timeout: 5) { ($0["id"]?.int ?? 0) > lastID }
        lastID = event["id"]?.int ?? lastID
        return Date().timeIntervalSince(start)
      }
      var mqtt: [Double] = []
      var socket: [Double] = []
      // The first round waits for mosquitto_pub to connect: not counted.
      for round in 0..<101 {
        let target = round % 2 == 0 ? "0.5" : "0.6"
        var start = Date()
        publisher.publish(target)
        let viaBroker = try applied(after: start)
        if round > 0 { mqtt.append(viaBroker) }
        usleep(20_000)
        start = Date()
        try direct.send(raw: #"{"cmd":"fade","key":"master.gain","to":\#(target),"duration":1}"#)
        let viaSocket = try applied(after: start)
        if round > 0 { socket.append(viaSocket) }
        _ = try direct.readLine()
        usleep(20_000)
      }
      try publisher.finish()
      print(
        "publish → applied: MQTT \(medianAndP99(mqtt)); rampd's socket \(medianAndP99(socket)) (\(mqtt.count) each)")
      // A broker hop and a bridge add a few milliseconds, not a block's worth of waiting each.
      #expect(percentile(mqtt, 0.5) < 0.05, "MQTT median \(percentile(mqtt, 0.5))")
    }

    /// Latency to the ear: from a publish (`mosquitto_pub`, started once) to the first sample of
    /// its level heard, against the same `set` on rampd's socket, alternating, in the same run;
    /// each a level of its own. The device's buffer (`status` output.delay) is in both.
    @Test func publishToHeardAgainstTheSocket() throws {
      let broker = try Broker()
      let box = try Box("k2", broker: broker)
      try broker.waitFor("rampd/k2/availability", "online")
      let direct = try box.daemon.client()
      let delay = try direct.request(["cmd": "status"]).result["output"]?["delay"]?.numberValue ?? 0
      let publisher = try LinePublisher(broker: broker, topic: "rampd/k2/set/master.gain")
      var mqtt: [Double] = []
      var socket: [Double] = []
      let rounds = 30
      // Round 0 waits for mosquitto_pub to connect: not counted.
      for round in 0...(2 * rounds) {
        let gain = Float(0.2 + 0.6 * Double(round) / Double(2 * rounds + 1))
        let viaBroker = round % 2 == 0
        let seconds = try box.daemon.secondsUntilHeard(gain, delay: delay) {
          if viaBroker {
            publisher.publish("{\"value\":\(gain),\"duration\":0}")
          } else {
            try direct.send(raw: #"{"cmd":"set","key":"master.gain","value":\#(gain),"duration":0}"#)
          }
        }
        if !viaBroker { _ = try direct.readLine() }
        if round > 0 {
          if viaBroker { mqtt.append(seconds) } else { socket.append(seconds) }
        }
        usleep(30_000)
      }
      try publisher.finish()
      print(
        "latency: publish to heard: MQTT \(medianAndP99(mqtt)); rampd's socket \(medianAndP99(socket))"
          + " (\(mqtt.count) and \(socket.count);" + String(format: " %.1f ms of it the device's buffer)", delay * 1000)
      )
      #expect(
        percentile(mqtt, 0.5) < percentile(socket, 0.5) + 0.02,
        "MQTT's median \(percentile(mqtt, 0.5)) s against the socket's \(percentile(socket, 0.5)) s")
    }
  }
}
