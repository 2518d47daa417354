import CAllocationGuard
import Foundation
import Logging
import NIOPosix
import RampEngine
import RampProtocol
import Synchronization
import Testing

@testable import RampAudio
@testable import RampDaemon
@testable import RampTestSupport

/// The render thread applies commands without allocating or freeing: counted, not assumed (see
/// Sources/CAllocationGuard). Requests go through the controller as a connection's would (parsed,
/// prepared and submitted on this thread, uncounted); the render thread's part (committing the
/// commands, rendering the blocks, writing them to the device, streams leaving the mix) runs on
/// this thread too, and is counted; replies and events are then handed out (uncounted).
@Suite struct CommandCommitAllocationTests {
  /// A connection that keeps its replies.
  final class Collector: Client, @unchecked Sendable {
    let replies = Mutex<[JSONValue]>([])
    func reply(_ line: JSONValue, sequence: Int) { replies.withLock { $0.append(line) } }
    func event(_ line: String) {}
    var awaitsNoOtherReply: Bool { false }
    var confinedToMediaRoots: Bool { false }
  }

  /// A controller over a player writing to ALSA `null`; requests reach it as a connection's
  /// would (parsed, then handled on the controller's loop, which the calling thread waits for).
  final class Session {
    let player: Player
    let controller: Controller
    private let loopGroup: MultiThreadedEventLoopGroup
    let logger: Logger
    let client = Collector()
    /// A block's worth of the render thread's buffers.
    let buffers: RenderBuffers
    private(set) var sequence = 0

    /// The render thread's part of a round, as its loop does it, counted in `count`: the commands
    /// taken, then `blocks` blocks rendered and written and the finished streams let go. Then,
    /// uncounted, the replies and events go out and what was retired is freed.
    func renderRound(blocks: Int, _ count: RenderThreadCount) throws {
      count.work { player.renderer.applyPendingCommands() }
      for _ in 0..<blocks {
        while player.renderer.streamsBehind(frames: buffers.frames) { usleep(100) }
        try count.work {
          player.renderer.renderBlock(buffers)
          try player.renderer.writeToDevice(buffers.mix, frames: buffers.frames)
          player.renderer.finishStreams()
        }
      }
      deliverEvents()
      player.link.reapRetired()
    }

    /// A session whose daemon allows `streams` streams.
    convenience init(streams: Int, label: String) throws {
      var configuration = DaemonConfiguration()
      configuration.limits.streams = streams
      try self.init(configuration, label: label)
    }

    init(_ configuration: DaemonConfiguration, label: String, persistence: Persistence? = nil) throws {
      player = try Player(
        output: OutputConfiguration(
          device: "null", format: .float32, periodTime: 0.005, bufferTime: 0.02, pacing: .device),
        declick: configuration.declick, maxGain: configuration.maxGain)
      logger = Logger(label: label, factory: { _ in SwiftLogNoOpLogHandler() })
      let (control, loopGroup) = ControlLoop.standalone()
      self.loopGroup = loopGroup
      controller = Controller(
        player: player, configuration: configuration, persistence: persistence, control: control, logger: logger)
      buffers = RenderBuffers(frames: player.output.periodFrames, channels: player.output.channels)
    }

    deinit {
      buffers.deallocate()
      try? loopGroup.syncShutdownGracefully()
    }

    /// Hands out what the render thread posted, on the controller's loop.
    func deliverEvents() {
      let controller = controller
      _ = try? controller.control.run { controller.deliverEvents() }
    }

    func send(_ line: String) {
      let (_, parsed) = Request.parse(line: line)
      guard case .success(let request) = parsed else {
        Issue.record("\(line) does not parse: \(parsed)")
        return
      }
      sequence += 1
      let (controller, client, sequence) = (controller, client, sequence)
      _ = try? controller.control.run { controller.handle(request, from: client, sequence: sequence) }
    }
  }

  /// Allocations and frees made by the render thread's part of a test (`work`), counted once
  /// `counting` is on (after the rounds that fill the runtime's caches).
  final class RenderThreadCount {
    var allocated = 0
    var freed = 0
    var counting = false

    /// Expects that nothing was allocated or freed while counting.
    func expectNone(sourceLocation: SourceLocation = #_sourceLocation) {
      #expect(allocated == 0, "\(allocated) allocations on the render thread", sourceLocation: sourceLocation)
      #expect(freed == 0, "\(freed) frees on the render thread", sourceLocation: sourceLocation)
    }

    func work(_ body: () throws -> Void) rethrows {
      // The test library's hooks on thrown errors allocate; rampd has none.
      if counting { rampd_set_aside_throw_hooks() }
      defer { if counting { rampd_restore_throw_hooks() } }
      let allocations = rampd_allocations_on_this_thread()
      let frees = rampd_frees_on_this_thread()
      try body()
      if counting {
        allocated += rampd_allocations_on_this_thread() - allocations
        freed += rampd_frees_on_this_thread() - frees
      }
    }
  }

  /// A directory of a test's own for its files, removed with it (keep it alive to the test's end).
  final class Scratch {
    let directory: String

    init(_ name: String) throws {
      directory = FileManager.default.temporaryDirectory.appendingPathComponent("rampd-\(name)-\(getpid())").path
      try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    }

    deinit { try? FileManager.default.removeItem(atPath: directory) }

    /// `<name>.wav` in it: a stereo float tone of `seconds` at 48 kHz.
    func tone(_ name: String, seconds: Double) throws -> String {
      let path = "\(directory)/\(name).wav"
      try CommandCommitAllocationTests.writeTone(path, seconds: seconds)
      return path
    }
  }

  /// A stereo float tone of `seconds` at 48 kHz.
  static func writeTone(_ path: String, seconds: Double) throws {
    let writer = try SoundFileWriter(path: path, sampleRate: 48_000, channels: 2, encoding: .float)
    let frames = Int(seconds * 48_000)
    let buffer = (0..<frames * 2).map { Float(sin(Double($0 / 2) / 25) * 0.3) }
    try buffer.withUnsafeBufferPointer { try writer.write($0.baseAddress!, frames: frames) }
    try writer.close()
  }

  /// Every kind of command, a thousand times each (after a few rounds that fill the runtime's
  /// caches): play, set (animated and instant), fade, animate (basic, keyframe, spring, group,
  /// additive), cancel, remove (by name and all), batch, stop and seek, and on a queue stream
  /// next, previous, queue-add and stop; with blocks written to an ALSA device, streams ending, seeks
  /// landing, queue items following one another and crossfading in between (where a quiet tail
  /// begins, too). 0 allocations and
  /// 0 frees.
  @Test func applyingCommandsAllocatesAndFreesNothingOnTheRenderThread() throws {
    let scratch = try Scratch("commit")
    defer { withExtendedLifetime(scratch) {} }
    func tone(_ name: String, seconds: Double) throws -> String { try scratch.tone(name, seconds: seconds) }
    let bed = try tone("bed", seconds: 2)
    let jingle = try tone("jingle", seconds: 2)

    var configuration = DaemonConfiguration()
    // Loudness measurements are cached next to the state file: in the scratch directory.
    configuration.state.path = "\(scratch.directory)/state.json"
    // Persisted model values are read after each command that may change them.
    let storeLogger = Logger(label: "commit-test-store", factory: { _ in SwiftLogNoOpLogHandler() })
    let store = StateStore(path: "\(scratch.directory)/state.json", logger: storeLogger)
    let saver = StateSaver(store: store, logger: storeLogger)
    defer { saver.close() }
    let session = try Session(
      configuration, label: "commit-test", persistence: Persistence(saver: saver, restored: PersistentState()))
    let controller = session.controller
    let client = session.client
    var sequence: Int { session.sequence }
    func send(_ line: String) { session.send(line) }

    let count = RenderThreadCount()

    // Loudness-normalised streams too: their trims are applied under every gain.
    send(#"{"cmd":"play","path":"\#(bed)","stream":"bed","loop":true,"loudness":"-18LUFS"}"#)
    let short = try tone("short", seconds: 0.05)
    send(
      #"{"cmd":"play","path":"\#(short)","stream":"q","queue":["\#(jingle)","\#(short)"],"loop":true,"crossfade":0.01,"skipCrossfade":0.01,"crossfadeLevel":0,"crossfadeWindow":0.02,"loudness":-20}"#
    )
    let warmUp = 5
    let rounds = 1000
    for round in 0..<(warmUp + rounds) {
      count.counting = round >= warmUp
      let even = round % 2 == 0
      send(
        #"{"cmd":"play","path":"\#(jingle)","stream":"p\#(round)"\#(even ? #","fadeIn":0.02"# : #","loudness":-23"#)}"#)
      send(#"{"cmd":"set","key":"streams.bed.gain","value":\#(even ? 0.7 : 0.8),"duration":0.05}"#)
      send(#"{"cmd":"set","key":"master.gain","value":\#(even ? 0.9 : 1),"duration":0}"#)
      send(#"{"cmd":"fade","key":"streams.p\#(round).gain","to":0.5,"duration":0.1}"#)
      send(
        #"{"cmd":"animate","key":"streams.bed.pan","name":"sweep","animation":{"type":"basic","to":0.3,"duration":0.2}}"#
      )
      send(
        #"{"cmd":"animate","key":"streams.bed.gain","name":"kf","animation":{"type":"keyframe","values":[0.5,0.8,0.6],"duration":0.3}}"#
      )
      send(
        #"{"cmd":"animate","key":"master.gain","name":"spring","animation":{"type":"spring","to":0.9,"duration":0.3,"bounce":0.2}}"#
      )
      send(
        #"{"cmd":"animate","key":"master.gain","name":"group","animation":{"type":"group","duration":0.2,"animations":[{"type":"basic","keyPath":"streams.bed.pan","to":-0.2},{"type":"basic","to":0.8}]}}"#
      )
      send(
        #"{"cmd":"animate","key":"master.gain","name":"lfo","animation":{"type":"keyframe","values":[0,-0.2,0],"duration":0.05,"additive":true,"repeatCount":"inf"}}"#
      )
      send(#"{"cmd":"cancel","key":"streams.bed.pan"}"#)
      send(#"{"cmd":"remove","key":"master.gain","name":"lfo"}"#)
      send(#"{"cmd":"remove","key":"streams.bed.gain"}"#)
      send(
        #"{"cmd":"batch","commands":[{"cmd":"set","key":"streams.p\#(round).gain","value":0.6},{"cmd":"fade","key":"master.gain","to":1,"duration":0.05}\#(even ? #",{"cmd":"seek","stream":"bed","position":0.25}"# : "")]}"#
      )
      if round > 0 { send(#"{"cmd":"stop","stream":"p\#(round - 1)"}"#) }
      if !even { send(#"{"cmd":"seek","stream":"bed","position":\#(Double(round % 3) * 0.5)}"#) }
      if round % 40 == 1 { send(#"{"cmd":"next","stream":"q"}"#) }
      if round % 80 == 3 { send(#"{"cmd":"previous","stream":"q"}"#) }
      if round % 200 == 7 { send(#"{"cmd":"queue-add","stream":"q","paths":["\#(short)"]}"#) }
      // A queue stream stopped mid-crossfade: its items end with it.
      if round % 100 == 50 {
        send(#"{"cmd":"play","path":"\#(short)","stream":"r","queue":["\#(jingle)"],"crossfade":0.04}"#)
      }
      if round % 100 == 51 { send(#"{"cmd":"stop","stream":"r"}"#) }

      // Enough blocks for the last round's stream to ramp out and leave the mix.
      try session.renderRound(blocks: 4, count)
    }

    let replies = client.replies.withLock { $0 }
    let refused = replies.filter { $0["ok"] != .bool(true) }
    #expect(replies.count == sequence, "\(replies.count) replies to \(sequence) requests")
    #expect(refused.isEmpty, "\(refused.prefix(3))")
    // Every stream but the last one and the bed ramped out and left the mix.
    #expect(controller.playingStreams == ["bed", "q", "p\(warmUp + rounds - 1)"], "\(controller.playingStreams)")
    count.expectNone()
  }

  /// Queries, duck commands and refusals, a thousand times each: get, list (all and by prefix),
  /// status, duck-add (new, and replacing a rule), duck, unduck, duck-remove, duck-list; and
  /// commands refused on the render thread: an unknown stream (stop, seek), a seek past the end, a
  /// value outside its property's range, an unknown duck rule (duck, duck-remove), the stream limit
  /// and the duck rule limit, an unknown key path (alone, and in a batch); `wait` (on a key path
  /// at rest, on an unknown animation, on one in flight, on an unknown key path). The render thread copies plain values; the replies and errors are
  /// built off it, the rules it lets go of freed off it. 0 allocations and 0 frees.
  @Test func queriesDuckCommandsAndRefusalsAllocateAndFreeNothingOnTheRenderThread() throws {
    let scratch = try Scratch("query")
    defer { withExtendedLifetime(scratch) {} }
    let path = try scratch.tone("tone", seconds: 2)

    var configuration = DaemonConfiguration()
    configuration.limits.streams = 2
    // `bed` is loudness-normalised (status copies its trim): measured into the scratch directory.
    configuration.state.path = "\(scratch.directory)/state.json"
    let session = try Session(configuration, label: "query-test")
    let player = session.player
    let controller = session.controller
    let client = session.client
    func send(_ line: String) { session.send(line) }

    let count = RenderThreadCount()

    send(#"{"cmd":"play","path":"\#(path)","stream":"bed","loop":true,"loudness":"-18LUFS"}"#)
    send(#"{"cmd":"play","path":"\#(path)","stream":"other","loop":true}"#)
    send(
      #"{"cmd":"animate","key":"streams.bed.pan","name":"sweep","animation":{"type":"basic","to":0.3,"duration":100}}"#)
    // Room for one rule more than `tmp` and `talk`: `extra` finds the limit reached.
    for index in 0..<(DuckLayer.capacity - 2) {
      send(#"{"cmd":"duck-add","name":"fill\#(index)","targets":["streams.nobody.gain"]}"#)
    }
    player.renderer.applyPendingCommands()
    session.deliverEvents()
    let setUp = client.replies.withLock { $0 }
    #expect(setUp.count == session.sequence && setUp.allSatisfy { $0["ok"] == .bool(true) }, "\(setUp.suffix(2))")
    client.replies.withLock { $0.removeAll() }
    let first = session.sequence

    let warmUp = 5
    let rounds = 1000
    for round in 0..<(warmUp + rounds) {
      count.counting = round >= warmUp
      let depth = round % 2 == 0 ? 6 : 9
      send(#"{"cmd":"get","key":"master.gain"}"#)
      send(#"{"cmd":"list"}"#)
      send(#"{"cmd":"list","prefix":"streams.bed"}"#)
      send(
        #"{"cmd":"duck-add","name":"talk","targets":["master.gain","streams.bed.gain"],"depth":\#(depth),"attack":0.005,"release":0.005,"hold":0}"#
      )
      send(#"{"cmd":"duck-add","name":"tmp","targets":["streams.other.gain"],"trigger":"nobody"}"#)
      send(#"{"cmd":"duck-add","name":"extra","targets":["master.gain"]}"#)
      send(#"{"cmd":"duck","name":"talk"}"#)
      send(#"{"cmd":"status"}"#)
      send(#"{"cmd":"duck-list"}"#)
      send(#"{"cmd":"unduck","name":"talk"}"#)
      send(#"{"cmd":"duck-remove","name":"tmp"}"#)
      send(#"{"cmd":"duck","name":"nope"}"#)
      send(#"{"cmd":"duck-remove","name":"nope"}"#)
      send(#"{"cmd":"stop","stream":"nope"}"#)
      send(#"{"cmd":"seek","stream":"nope","position":1}"#)
      send(#"{"cmd":"seek","stream":"bed","position":100}"#)
      send(#"{"cmd":"set","key":"streams.bed.pan","value":2}"#)
      send(#"{"cmd":"play","path":"\#(path)","stream":"third"}"#)
      send(#"{"cmd":"set","key":"master.gian","value":0.5}"#)
      send(#"{"cmd":"batch","commands":[{"cmd":"get","key":"master.gain"},{"cmd":"get","key":"streams.bd.gain"}]}"#)
      send(#"{"cmd":"wait","key":"master.gain"}"#)
      send(#"{"cmd":"wait","animations":[999999]}"#)
      send(#"{"cmd":"wait","key":"streams.bed.pan"}"#)
      send(#"{"cmd":"wait","key":"master.gian"}"#)

      // Enough blocks for the removed rule to leave the layer.
      try session.renderRound(blocks: 4, count)
    }

    let replies = client.replies.withLock { $0 }
    // Each round's wait for the sweep is still waiting.
    let waiting = warmUp + rounds
    #expect(
      replies.count == session.sequence - first - waiting,
      "\(replies.count) replies to \(session.sequence - first) requests, \(waiting) waiting")
    let perRound = replies.count / (warmUp + rounds)
    // The last round's replies, in order, as a client reads them.
    let last = Array(replies.suffix(perRound))
    func result(_ index: Int) -> JSONValue { last[index]["result"] ?? .null }
    func error(_ index: Int) -> (String?, String?, String?) {
      let error = last[index]["error"]
      return (error?["code"]?.stringValue, error?["field"]?.stringValue, error?["message"]?.stringValue)
    }
    #expect(result(0)["key"] == "master.gain" && result(0)["range"]?.arrayValue?.count == 2, "\(last[0])")
    let keys = result(1)["properties"]?.arrayValue?.compactMap { $0["key"]?.stringValue }
    #expect(
      keys == ["master.gain", "streams.bed.gain", "streams.bed.pan", "streams.other.gain", "streams.other.pan"],
      "\(String(describing: keys))")
    let bed = result(2)["properties"]?.arrayValue
    #expect(bed?.compactMap { $0["key"]?.stringValue } == ["streams.bed.gain", "streams.bed.pan"], "\(last[2])")
    #expect(bed?.last?["animations"]?.arrayValue?.first?["name"] == "sweep", "\(last[2])")
    #expect(result(3) == ["rule": "talk", "replaced": true], "\(last[3])")
    #expect(result(4) == ["rule": "tmp", "replaced": false], "\(last[4])")
    #expect(
      error(5) == ("limit-exceeded", "name", "\(DuckLayer.capacity) duck rules exist, the most allowed"), "\(last[5])")
    #expect(result(6)["rule"] == "talk" && result(6)["sample"] != nil, "\(last[6])")
    let ducks = result(7)["ducks"]?.arrayValue ?? []
    #expect(result(7)["streams"]?.arrayValue?.count == 2, "\(last[7])")
    #expect(ducks.count == DuckLayer.capacity, "\(ducks.count) rules in status")
    let talk = ducks.first { $0["name"] == "talk" }
    // `duck` acts at the next block, and the round's `unduck` comes before it: never ducked.
    #expect(
      talk?["manual"] == true && talk?["depth"] == 6 && talk?["phase"] == "idle" && talk?["level"] == 1,
      "\(String(describing: talk))")
    #expect(result(8)["ducks"] == result(7)["ducks"], "duck-list shows the rules as status does")
    // Applied together, between two blocks: at one sample.
    #expect(result(9)["rule"] == "talk" && result(9)["sample"] == result(7)["sample"], "\(last[9])")
    #expect(result(6)["sample"] == result(7)["sample"] && result(0)["sample"] == result(7)["sample"], "\(last[6])")
    #expect(result(10) == ["rule": "tmp"], "\(last[10])")
    #expect(error(11) == ("unknown-duck", "name", "no duck rule 'nope'"), "\(last[11])")
    #expect(error(12) == ("unknown-duck", "name", "no duck rule 'nope'"), "\(last[12])")
    #expect(error(13) == ("unknown-stream", "stream", "no stream 'nope' is playing"), "\(last[13])")
    #expect(error(14) == ("unknown-stream", "stream", "no stream 'nope' is playing"), "\(last[14])")
    #expect(
      error(15) == (
        "out-of-range", "position", "position: 100 s is past the end of stream 'bed', whose file is 2 s long"
      ),
      "\(last[15])")
    #expect(error(16) == ("out-of-range", "value", "2 is outside streams.bed.pan's range -1...1"), "\(last[16])")
    #expect(
      last[16]["error"]?["bound"] == "property-range" && last[16]["error"]?["value"] == 2
        && last[16]["error"]?["detail"] == "is outside streams.bed.pan's range -1...1", "\(last[16])")
    #expect(
      error(17) == ("limit-exceeded", "stream", "2 streams are playing, the most allowed (limits.streams)"),
      "\(last[17])")
    #expect(
      error(18) == ("unknown-key-path", "key", "no property 'master.gian' (did you mean master.gain?)"), "\(last[18])")
    #expect(
      error(19)
        == (
          "unknown-key-path", "commands[1].key",
          "no property 'streams.bd.gain' (no stream 'bd' is playing; did you mean streams.bed.gain?)"
        ), "\(last[19])")
    // Nothing to wait for: answered at once. The sweep, in flight for 100 s, answers in the end.
    #expect(result(20) == ["animations": []] && result(21) == ["animations": []], "\(last[20]) \(last[21])")
    #expect(
      error(22) == ("unknown-key-path", "key", "no property 'master.gian' (did you mean master.gain?)"), "\(last[22])")
    // Every round answered alike.
    let codes = replies.map { $0["error"]?["code"]?.stringValue ?? "ok" }
    for round in 0..<(warmUp + rounds) {
      let these = Array(codes[(round * perRound)..<((round + 1) * perRound)])
      guard these == last.map({ $0["error"]?["code"]?.stringValue ?? "ok" }) else {
        Issue.record("round \(round) answered \(these)")
        break
      }
    }
    #expect(controller.playingStreams == ["bed", "other"], "\(controller.playingStreams)")
    count.expectNone()
  }

  /// Commands the engine refuses, a thousand times each: a 65th animation on one key path (alone,
  /// and after a change in a batch, which then does not apply), a dB-space fade whose start,
  /// resolved from the value heard, is negative, the removal of an animation that is not there, a
  /// group whose child names a key path nothing defines: all refused before anything applies. And
  /// a batch whose first animation fills a key path so that its second is refused as it applies
  /// (the first stays). The render thread records the engine's reason as plain values; the error
  /// is put in words off it. 0 allocations and 0 frees.
  @Test func engineRefusalsAllocateAndFreeNothingOnTheRenderThread() throws {
    let scratch = try Scratch("refusal")
    defer { withExtendedLifetime(scratch) {} }
    let path = try scratch.tone("tone", seconds: 2)

    let session = try Session(DaemonConfiguration(), label: "refusal-test")
    let player = session.player
    let client = session.client
    func send(_ line: String) { session.send(line) }
    let limit = player.renderCapacity.animationsPerKeyPath
    /// An additive animation that changes nothing, for a long time.
    func hold(_ key: String, _ name: String) -> String {
      #"{"cmd":"animate","key":"\#(key)","name":"\#(name)","animation":{"type":"basic","by":0,"additive":true,"duration":1000}}"#
    }

    send(#"{"cmd":"play","path":"\#(path)","stream":"bed","loop":true}"#)
    send(#"{"cmd":"set","key":"streams.bed.pan","value":-0.5,"duration":0}"#)
    for index in 0..<limit { send(hold("master.gain", "hold\(index)")) }
    for index in 0..<(limit - 1) { send(hold("streams.bed.pan", "hold\(index)")) }
    player.renderer.applyPendingCommands()
    session.deliverEvents()
    let setUp = client.replies.withLock { $0 }
    #expect(setUp.count == session.sequence && setUp.allSatisfy { $0["ok"] == .bool(true) }, "\(setUp.suffix(2))")
    client.replies.withLock { $0.removeAll() }

    let count = RenderThreadCount()
    let warmUp = 5
    let rounds = 1000
    let extra =
      #"{"cmd":"animate","key":"master.gain","name":"extra","animation":{"type":"basic","to":0.5,"duration":1}}"#
    for round in 0..<(warmUp + rounds) {
      count.counting = round >= warmUp
      send(extra)
      let gain = round % 2 == 0 ? 0.5 : 0.25
      send(
        #"{"cmd":"batch","commands":[{"cmd":"set","key":"streams.bed.gain","value":\#(gain),"duration":0},\#(extra)]}"#)
      send(#"{"cmd":"fade","key":"streams.bed.pan","to":0.5,"duration":1,"space":"db"}"#)
      send(#"{"cmd":"remove","key":"streams.bed.gain","name":"nope"}"#)
      send(
        #"{"cmd":"animate","key":"streams.bed.gain","name":"group","animation":{"type":"group","duration":1,"animations":[{"type":"basic","to":0.5},{"type":"basic","keyPath":"streams.nobody.gain","to":0.5}]}}"#
      )
      send(#"{"cmd":"batch","commands":[\#(hold("streams.bed.pan", "last")),\#(hold("streams.bed.pan", "over"))]}"#)
      send(#"{"cmd":"remove","key":"streams.bed.pan","name":"last"}"#)
      try session.renderRound(blocks: 2, count)
    }

    let replies = client.replies.withLock { $0 }
    let perRound = 7
    #expect(replies.count == (warmUp + rounds) * perRound, "\(replies.count) replies")
    func error(_ reply: JSONValue) -> (String?, String?, String?) {
      let error = reply["error"]
      return (error?["code"]?.stringValue, error?["field"]?.stringValue, error?["message"]?.stringValue)
    }
    let full = "master.gain already has \(limit) animations, the most allowed"
    let expected: [(String?, String?, String?)] = [
      ("limit-exceeded", "key", full),
      ("limit-exceeded", "commands[1].key", full),
      ("invalid-field", "space", "db needs non-negative values, got -0.5 and 0.5"),
      ("unknown-animation", "name", "no animation 'nope' on streams.bed.gain"),
      ("unknown-key-path", "animation.animations[1].keyPath", "no property 'streams.nobody.gain'"),
      (
        "limit-exceeded", "commands[1].key", "streams.bed.pan already has \(limit) animations, the most allowed"
      ),
      (nil, nil, nil),
    ]
    for round in 0..<(warmUp + rounds) {
      let these = replies[(round * perRound)..<((round + 1) * perRound)].map(error)
      guard these.elementsEqual(expected, by: ==) else {
        Issue.record("round \(round) answered \(these)")
        break
      }
    }
    let engine = player.state.engine
    // Refused before it applied: the batch's change did not apply, the fade did not set its target.
    #expect(try engine.model("streams.bed.gain") == 1)
    #expect(try engine.model("streams.bed.pan") == -0.5 && engine.presentation("streams.bed.pan") == -0.5)
    #expect(try engine.animations(on: "master.gain").count == limit)
    // Each round's `last` applied, then was removed.
    #expect(try engine.animations(on: "streams.bed.pan").map(\.key) == (0..<(limit - 1)).map { "hold\($0)" })
    count.expectNone()
  }

  /// More streams than the render thread once had room for, each with animations, so that a
  /// `list` finds more than it first reserves: the streams join, play, are listed (the list read
  /// again with room for what it found), shown by `status` and by a `list` in a batch with a
  /// change (which reserves room for everything at once), and stopped. First with 30 streams (to
  /// fill the runtime's caches: its tables then hold no more than those), then counted with 100:
  /// 0 allocations and 0 frees.
  @Test func manyStreamsAndTheirListAllocateAndFreeNothingOnTheRenderThread() throws {
    let scratch = try Scratch("many")
    defer { withExtendedLifetime(scratch) {} }
    let path = try scratch.tone("tone", seconds: 1)
    let session = try Session(streams: Player.streamCapacity, label: "many-test")
    let client = session.client
    func send(_ line: String) { session.send(line) }
    let count = RenderThreadCount()
    for streams in [30, 100] {
      count.counting = streams == 100
      for index in 0..<streams {
        send(#"{"cmd":"play","path":"\#(path)","stream":"s\#(index)","loop":true}"#)
        send(
          #"{"cmd":"animate","key":"streams.s\#(index).pan","name":"sway","animation":{"type":"basic","to":0.2,"duration":100}}"#
        )
        send(
          #"{"cmd":"animate","key":"streams.s\#(index).gain","name":"hold","animation":{"type":"basic","by":0,"additive":true,"duration":100}}"#
        )
      }
      try session.renderRound(blocks: 2, count)
      client.replies.withLock { $0.removeAll() }
      send(#"{"cmd":"list"}"#)
      // Read once, cut short, queued again with room for what it found, read again.
      try session.renderRound(blocks: 1, count)
      try session.renderRound(blocks: 1, count)
      send(#"{"cmd":"status"}"#)
      send(
        #"{"cmd":"batch","commands":[{"cmd":"list","prefix":"streams"},{"cmd":"set","key":"master.gain","value":0.5}]}"#
      )
      // At a sample of its own: read once, with room for everything.
      send(#"{"cmd":"list","at":0}"#)
      try session.renderRound(blocks: 1, count)
      // Reads only, one of them cut short: all read again, none of them twice.
      send(#"{"cmd":"batch","commands":[{"cmd":"status"},{"cmd":"list"},{"cmd":"duck-list"}]}"#)
      try session.renderRound(blocks: 1, count)
      try session.renderRound(blocks: 1, count)
      let replies = client.replies.withLock { $0 }
      #expect(replies.count == 5 && replies.allSatisfy { $0["ok"] == .bool(true) }, "\(replies.map { $0["error"] })")
      let scheduled = replies[3]["result"]?["properties"]?.arrayValue ?? []
      #expect(scheduled.count == 1 + 2 * streams, "\(scheduled.count) properties listed at a sample")
      let reads = replies[4]["result"]?["results"]?.arrayValue ?? []
      #expect(reads.first?["streams"]?.arrayValue?.count == streams, "status in a batch read again")
      #expect(reads.dropFirst().first?["properties"]?.arrayValue?.count == 1 + 2 * streams, "list in a batch")
      let listed = replies.first?["result"]?["properties"]?.arrayValue ?? []
      #expect(listed.count == 1 + 2 * streams, "\(listed.count) properties listed")
      let names = listed.flatMap { $0["animations"]?.arrayValue ?? [] }.compactMap { $0["name"]?.stringValue }
      #expect(names.count == 2 * streams && Set(names) == ["sway", "hold"], "\(names.count) animations listed")
      #expect(replies.dropFirst().first?["result"]?["streams"]?.arrayValue?.count == streams)
      let inBatch = replies[2]["result"]?["results"]?.arrayValue?.first?["properties"]?.arrayValue ?? []
      #expect(inBatch.count == 2 * streams, "\(inBatch.count) properties listed in the batch")

      send(#"{"cmd":"stop","fade":0.01}"#)
      send(#"{"cmd":"set","key":"master.gain","value":1,"duration":0}"#)
      for _ in 0..<20 where !session.controller.playingStreams.isEmpty {
        try session.renderRound(blocks: 2, count)
      }
      #expect(session.controller.playingStreams.isEmpty, "\(session.controller.playingStreams.count) still playing")
      client.replies.withLock { $0.removeAll() }
    }
    count.expectNone()
  }

  /// A reload that lowers `limits.streams` below what already plays: a pause, resume and stop of
  /// every stream still find a ramp prepared for each one. 0 allocations and 0 frees.
  @Test func aTransportOfMoreStreamsThanTheLimitAllocatesNothing() throws {
    let scratch = try Scratch("ceiling")
    defer { withExtendedLifetime(scratch) {} }
    let path = try scratch.tone("tone", seconds: 2)

    var configuration = DaemonConfiguration()
    configuration.limits.streams = 8
    let session = try Session(configuration, label: "ceiling-test")
    let player = session.player
    let controller = session.controller
    let client = session.client
    func send(_ line: String) { session.send(line) }
    for index in 0..<8 { send(#"{"cmd":"play","path":"\#(path)","stream":"s\#(index)","loop":true}"#) }
    player.renderer.applyPendingCommands()
    configuration.limits.streams = 2
    controller.live.replace(with: configuration)

    let buffers = session.buffers
    let frames = buffers.frames
    let count = RenderThreadCount()
    for round in 0..<50 {
      send(#"{"cmd":"pause","fade":0.01}"#)
      send(#"{"cmd":"resume","fade":0.01}"#)
      count.counting = round >= 5
      count.work {
        player.renderer.applyPendingCommands()
        for _ in 0..<2 {
          while player.renderer.streamsBehind(frames: frames) { usleep(100) }
          player.renderer.renderBlock(buffers)
        }
      }
      session.deliverEvents()
      player.link.reapRetired()
    }
    let replies = client.replies.withLock { $0 }
    #expect(replies.count == session.sequence && replies.allSatisfy { $0["ok"] == .bool(true) }, "\(replies.suffix(2))")
    // Each pause and resume acted on all eight.
    #expect(replies.last?["result"]?["streams"]?.arrayValue?.count == 8, "\(String(describing: replies.last))")
    count.expectNone()
  }

  /// What only reads changes no sound, so on a device that rewinds it rewinds nothing
  /// (`RenderCommand.changesSound`); a batch changes sound if one of its commands does.
  @Test func readsChangeNoSoundAndChangesDo() throws {
    let session = try Session(DaemonConfiguration(), label: "changes-sound")
    func operation(_ line: String) throws -> RampDaemon.Operation {
      let (_, parsed) = Request.parse(line: line)
      return try session.controller.preparation.prepare(try parsed.get().command)
    }
    /// A batch's ticket, as the session makes one.
    func ticket(_ lines: [String]) throws -> DaemonTicket {
      var operations: [RampDaemon.Operation] = []
      for line in lines { operations.append(try operation(line)) }
      return DaemonTicket(
        operations, player: session.player, fieldPrefix: "commands", rampKey: nil, persistedKeys: [],
        deliver: { _ in })
    }
    let get = #"{"cmd":"get","key":"master.gain"}"#
    let set = #"{"cmd":"set","key":"master.gain","value":0.5}"#
    for line in [#"{"cmd":"ping"}"#, get, #"{"cmd":"list"}"#, #"{"cmd":"status"}"#, #"{"cmd":"duck-list"}"#] {
      #expect(try !operation(line).changesSound, "\(line)")
    }
    for line in [
      set, #"{"cmd":"fade","to":0,"duration":1}"#,
      #"{"cmd":"duck-add","name":"d","targets":["master.gain"],"depth":6}"#,
    ] {
      #expect(try operation(line).changesSound, "\(line)")
    }
    #expect(try !ticket([get, #"{"cmd":"status"}"#]).changesSound)
    #expect(try ticket([get, set]).changesSound)
  }
}
