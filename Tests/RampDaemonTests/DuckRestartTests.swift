import Foundation
import RampEngine
import RampProtocol
import Testing

@testable import RampTestSupport

/// Duck rules added at run time are kept in the state file: after a restart (even a kill -9 right
/// after the reply) `duck-list` shows them and they duck as before; removed, they are gone. A
/// configured `[[duck]]` rule wins over a saved rule of its name.
extension DuckTests {
  static let configured = """
    [[duck]]
    name = "conf"
    targets = ["master.gain"]
    depth = 3
    """

  @Test func aRuleAddedAtRunTimeSurvivesARestartAndStillDucks() throws {
    let first = try DaemonProcess(limiter: "off", extraConfiguration: Self.configured)
    let client = try first.client()
    let talk: JSONObject = [
      "name": "talk", "targets": ["streams.bed.gain"], "depth": 12, "attack": 0.1, "attackCurve": "linear",
      "hold": 0, "release": 0.1,
    ]
    var add = talk
    add["cmd"] = "duck-add"
    #expect(try client.request(add).isOK)
    // Named like the configured rule: in force now, dropped at the restart.
    let shadow = try client.request(["cmd": "duck-add", "name": "conf", "targets": ["master.gain"], "depth": 20])
    #expect(shadow.isOK && shadow.result["replaced"] == true, "\(shadow.serialized())")
    #expect(try client.request(["cmd": "duck-add", "name": "gone", "targets": ["master.gain"]]).isOK)
    #expect(try client.request(["cmd": "duck-remove", "name": "gone"]).isOK)
    // No chance to save anything more: what was acknowledged is on disk.
    first.kill()

    let second = try DaemonProcess(limiter: "off", extraConfiguration: Self.configured, reusing: first.directory)
    let again = try second.client()
    try again.request(["cmd": "subscribe", "events": ["duck-started"]])
    let rules = try #require(again.request(["cmd": "duck-list"]).result["ducks"]?.arrayValue)
    #expect(rules.map { $0["name"]?.stringValue } == ["conf", "talk"], "\(rules)")
    #expect(rules.first?["depth"] == 3, "the configuration's rule, not the saved one")
    let restored = try #require(rules.last?.objectValue)
    for (key, value) in talk { #expect(restored[key] == value, "\(key): \(String(describing: restored[key]))") }
    #expect(second.readLog().contains("saved duck rule dropped"), "the shadowed rule's drop is logged")

    let bed = try second.constantFile("bed", seconds: 3, left: 1, right: 0)
    #expect(try again.request(["cmd": "play", "path": .string(bed), "stream": "bed"]).isOK)
    usleep(200_000)
    #expect(try again.request(["cmd": "duck", "name": "talk"]).isOK)
    let started = Self.sample(try again.waitForEvent { $0["event"] == "duck-started" && $0["rule"] == "talk" })
    usleep(300_000)
    #expect(try again.request(["cmd": "duck-remove", "name": "talk"]).isOK)
    #expect(second.stop() == 0)
    let left = try second.played(channel: 0)
    try #require(started > 0 && started + 9_600 < left.count, "\(started) in \(left.count) samples")
    let depth = pow(10, -12.0 / 20)
    #expect(left[started - 1] == 1, "untouched before the attack")
    let attack = Self.misfit(left, start: started, frames: 4_800, from: 1, to: depth, curve: .linear)
    #expect(attack < 1e-6, "attack off its curve by \(attack)")
    let held = left[(started + 4_800)...(started + 9_600)].map { abs(Double($0) - depth) }.max() ?? 1
    #expect(held < 1e-6, "held off the depth by \(held)")

    // Removed before the restart: gone after it.
    let third = try DaemonProcess(limiter: "off", extraConfiguration: Self.configured, reusing: first.directory)
    let list = try third.client().request(["cmd": "duck-list"])
    #expect(list.result["ducks"]?.arrayValue?.map { $0["name"]?.stringValue } == ["conf"], "\(list.serialized())")
    #expect(third.stop() == 0)
    let state = try String(contentsOfFile: "\(first.directory)/state.json", encoding: .utf8)
    #expect(!state.contains("\"ducks\""), "\(state)")
    withExtendedLifetime(first) {}
  }

  /// A bad `ducks` entry in the state file is dropped alone with a warning quoting it (the other
  /// rules and the levels are restored); `ducks` that is not an array makes the file unusable: it
  /// is moved aside, as for any other corrupt state.
  @Test func aCorruptDuckEntryInTheStateFileIsReported() throws {
    let first = try DaemonProcess()
    #expect(first.stop() == 0)
    let path = "\(first.directory)/state.json"
    try """
    {"version":1,"savedAt":"2026-01-21T07:30:00Z","values":{"master.gain":0.5},"schedules":[],
    "ducks":[{"name":"bad","targets":["master.gain"],"depth":-6},{"name":"talk","targets":["master.gain"],"depth":6}]}
    """.write(toFile: path, atomically: true, encoding: .utf8)
    let second = try DaemonProcess(reusing: first.directory)
    let client = try second.client()
    let list = try client.request(["cmd": "duck-list"])
    #expect(list.result["ducks"]?.arrayValue?.map { $0["name"]?.stringValue } == ["talk"], "\(list.serialized())")
    #expect(try client.request(["cmd": "get", "key": "master.gain"]).result["model"] == 0.5)
    #expect(second.stop() == 0)
    #expect(second.log.contains("dropped ducks[0]: depth"), "\(second.log)")

    try """
    {"version":1,"savedAt":"2026-01-21T07:30:00Z","values":{"master.gain":0.5},"schedules":[],"ducks":{"talk":1}}
    """.write(toFile: path, atomically: true, encoding: .utf8)
    let third = try DaemonProcess(reusing: first.directory)
    let after = try third.client()
    #expect(try after.request(["cmd": "duck-list"]).result["ducks"] == [])
    #expect(try after.request(["cmd": "get", "key": "master.gain"]).result["model"] == 1, "started afresh")
    #expect(third.stop() == 0)
    #expect(third.log.contains(#""ducks" is an object, not an array"#) && third.log.contains("corrupt"), "\(third.log)")
    let aside = try FileManager.default.contentsOfDirectory(atPath: first.directory).filter {
      $0.hasPrefix("state.json.corrupt-")
    }
    #expect(aside.count == 1)
    withExtendedLifetime(first) {}
  }
  /// A rule change is saved before it is queued: one that cannot be saved (the state file's place
  /// taken by a directory with something in it) is refused and changes nothing, the rules in force
  /// included; the daemon keeps running and saves again once it can. A change the render thread
  /// refuses (a batch whose other command names no rule) leaves the saved rules as they were.
  @Test func aRuleChangeIsSavedBeforeItIsQueuedAndARefusedOneIsNotKept() throws {
    let first = try DaemonProcess()
    let client = try first.client()
    #expect(try client.request(["cmd": "duck-add", "name": "kept", "targets": ["master.gain"]]).isOK)

    let statePath = "\(first.directory)/state.json"
    try? FileManager.default.removeItem(atPath: statePath)
    try FileManager.default.createDirectory(atPath: statePath + "/in-the-way", withIntermediateDirectories: true)
    for request: JSONObject in [
      ["cmd": "duck-add", "name": "new", "targets": ["master.gain"]], ["cmd": "duck-remove", "name": "kept"],
    ] {
      let refused = try client.request(request)
      #expect(
        refused.errorCode == "internal-error"
          && refused["error"]?["message"] == "the duck rules could not be saved (see rampd's log); nothing was changed",
        "\(refused.serialized())")
    }
    let list = try client.request(["cmd": "duck-list"])
    #expect(list.result["ducks"]?.arrayValue?.map { $0["name"]?.stringValue } == ["kept"], "\(list.serialized())")

    try FileManager.default.removeItem(atPath: statePath)
    #expect(try client.request(["cmd": "duck-add", "name": "new", "targets": ["master.gain"]]).isOK)
    let batch = try client.request([
      "cmd": "batch",
      "commands": [
        ["cmd": "duck-add", "name": "refused", "targets": ["master.gain"]], ["cmd": "duck", "name": "nope"],
      ],
    ])
    #expect(batch.errorCode == "unknown-duck", "\(batch.serialized())")
    // A batch refused part-way, by what its own commands did: the rule added before the refusal
    // applied and stays saved.
    func hold(_ name: String) -> JSONObject {
      [
        "cmd": "animate", "key": "master.gain", "name": .string(name),
        "animation": ["type": "basic", "by": 0, "additive": true, "duration": 100],
      ]
    }
    for index in 0..<63 { #expect(try client.request(hold("hold\(index)")).isOK) }
    let partial = try client.request([
      "cmd": "batch",
      "commands": [
        .object(hold("last")), ["cmd": "duck-add", "name": "partial", "targets": ["master.gain"]],
        .object(hold("over")),
      ],
    ])
    #expect(
      partial.errorCode == "limit-exceeded" && partial["error"]?["field"] == "commands[2].key",
      "\(partial.serialized())")
    // At a time of its own: saved once it applied (its reply waits for that).
    let later = try client.request(["cmd": "duck-add", "name": "later", "targets": ["master.gain"], "at": 0.1])
    #expect(later.isOK, "\(later.serialized())")
    first.kill()

    let second = try DaemonProcess(reusing: first.directory)
    let rules = try second.client().request(["cmd": "duck-list"])
    #expect(
      rules.result["ducks"]?.arrayValue?.map { $0["name"]?.stringValue } == ["kept", "new", "partial", "later"],
      "\(rules.serialized())")
    #expect(second.stop() == 0)
    withExtendedLifetime(first) {}
  }
}
