import Foundation
import RampProtocol
import Testing

@testable import RampTestSupport

#if canImport(Glibc)
  import Glibc
#endif

/// The real rampd-osc in front of the real rampd (ALSA's file plugin, paced by the clock),
/// driven by liblo's `oscsend` and by OSC packets written byte by byte: what each message makes
/// rampd play is read off the recording, sample by sample.
@Suite(.serialized) struct OSCBridgeTests {
  static let rate = 48_000

  /// rampd playing a constant 0.5 in a loop, without the limiter (which would hold 0.5 lower),
  /// and rampd-osc in front of it.
  static func playingDaemon(
    name: String = #function, bridgeArguments: [String] = [], realtime: Bool = false
  ) throws -> (DaemonProcess, OSCBridgeProcess, LineClient) {
    // The render thread in real time, as the shipped unit lets it be (LimitRTPRIO=), when asked
    // and this machine allows it (as LoadTests does).
    var limit = rlimit()
    getrlimit(__rlimit_resource_t(__RLIMIT_RTPRIO.rawValue), &limit)
    let daemon = try DaemonProcess(
      name: name, limiter: "off", realtimeLimit: realtime && limit.rlim_max >= 20 ? 20 : nil)
    let client = try daemon.client()
    let file = try daemon.constantFile("half", seconds: 2, left: 0.5, right: 0.5)
    #expect(try client.request(["cmd": "play", "path": .string(file), "stream": "probe", "loop": true]).isOK)
    let bridge = try OSCBridgeProcess(socket: daemon.socket, bridgeArguments)
    return (daemon, bridge, client)
  }

  /// The left channel from `frame` on.
  static func left(_ daemon: DaemonProcess, from frame: Int = 0) throws -> ArraySlice<Float> {
    let left = try daemon.played(channel: 0)
    return left[min(frame, left.count)...]
  }

  /// Waits until `level` has been heard for 0.1 s on end, from `frame` on, and returns the frame
  /// where it began.
  @discardableResult
  static func heard(_ level: Float, in daemon: DaemonProcess, from frame: Int = 0, timeout: Double = 10) throws -> Int {
    var found: Int?
    try waitFor("\(level) to be heard", timeout: timeout) {
      let left = try Self.left(daemon, from: frame)
      var from = left.startIndex
      while let start = left[from...].firstIndex(where: { abs($0 - level) < 1e-6 }) {
        let run = left[start...].prefix(rate / 10)
        guard let other = run.firstIndex(where: { abs($0 - level) >= 1e-6 }) else {
          guard run.count == rate / 10 else { return false }
          found = start
          return true
        }
        from = other
      }
      return false
    }
    return found!
  }

  // MARK: Sets, heard

  /// `oscsend` sets master.gain at once (`/rampd/set ,sfi`: an int for a duration) and a
  /// stream's gain through its implicit action (`/rampd/streams/probe/gain ,f`): each level is
  /// heard exactly, the second reached by a ramp that never jumps.
  @Test func oscsendSetsAreHeardAtTheirLevels() throws {
    let (daemon, bridge, _) = try Self.playingDaemon()
    defer { daemon.stop() }
    let port = "\(bridge.port)"
    try Self.heard(0.5, in: daemon)
    var sent = try oscsend(["localhost", port, "/rampd/set", "sfi", "master.gain", "0.25", "0"])
    #expect(sent.status == 0, "\(sent)")
    let quarter = try Self.heard(0.125, in: daemon)
    sent = try oscsend(["localhost", port, "/rampd/streams/probe/gain", "f", "0.5"])
    #expect(sent.status == 0, "\(sent)")
    let eighth = try Self.heard(0.0625, in: daemon, from: quarter)
    let left = try Self.left(daemon, from: quarter)
    let ramp = left[quarter..<eighth]
    #expect(ramp.allSatisfy { $0 >= 0.0625 - 1e-6 && $0 <= 0.125 + 1e-6 }, "between the two levels")
    let steepest = zip(ramp, ramp.dropFirst()).map { abs($0.0 - $0.1) }.max() ?? 0
    // The implicit action: 0.25 s from 0.125 to 0.0625 on the `default` curve, whose steepest
    // slope is under 4 times its mean; a jump would be a step of 0.0625.
    #expect(steepest < 4 * 0.0625 / Float(Self.rate / 4), "a step of \(steepest): the set jumped\n\(bridge.log)")
    let moving = ramp.filter { $0 > 0.0625 + 1e-6 && $0 < 0.125 - 1e-6 }.count
    #expect(abs(moving - Self.rate / 4) < Self.rate / 100, "the ramp took \(moving) samples, not 0.25 s")
    #expect(try daemon.played(channel: 0).suffix(Self.rate / 10).allSatisfy { abs($0 - 0.0625) < 1e-6 })
  }

  /// A fader of a fixed layout (`--map /1/fader1=master.gain:-40dB..0dB:db`) sent at half way:
  /// -20 dB, heard as 0.5 · 0.1.
  @Test func aMappedFaderSetsItsKeyPathOnItsCurve() throws {
    let (daemon, bridge, _) = try Self.playingDaemon(bridgeArguments: ["--map", "/1/fader1=master.gain:-40dB..0dB:db"])
    defer { daemon.stop() }
    let peer = try UDPPeer(bridgePort: bridge.port)
    let reply = peer.exchange(OSCWire.message("/1/fader1", [.f(0.5)]))
    #expect(reply?.address == "/rampd/reply" && reply?.strings.first == "/1/fader1", "\(String(describing: reply))")
    try Self.heard(0.05, in: daemon)
    let outside = peer.exchange(OSCWire.message("/1/fader1", [.f(1.5)]))
    #expect(outside?.address == "/rampd/error" && outside?.strings.dropFirst().first == "invalid-value")
  }

  // MARK: Refusals

  /// Unknown addresses, wrong types and counts, patterns, values rampd refuses: each answered with
  /// /rampd/error naming the problem, and the next command still heard.
  @Test func refusalsAreAnsweredAndLaterCommandsStillWork() throws {
    let (daemon, bridge, _) = try Self.playingDaemon()
    defer { daemon.stop() }
    let peer = try UDPPeer(bridgePort: bridge.port)
    let cases: [([UInt8], String, String)] = [
      (OSCWire.message("/rampd/nope", [.s("x")]), "unknown-address", "no such address"),
      (OSCWire.message("/elsewhere/gain", [.f(1)]), "unknown-address", "not under /rampd/"),
      (OSCWire.message("/rampd/streams/*/gain", [.f(1)]), "unknown-address", "patterns"),
      (
        OSCWire.message("/rampd/set", [.i(3), .f(0.5)]), "invalid-arguments", "argument 1 (a key path) must be a string"
      ),
      (OSCWire.message("/rampd/master/gain", [.s("loud")]), "invalid-arguments", "must be a number"),
      (OSCWire.message("/rampd/master/gain", [.t]), "invalid-arguments", "got type T"),
      (OSCWire.message("/rampd/master/gain"), "invalid-arguments", "no arguments"),
      (OSCWire.message("/rampd/fade", [.s("master.gain"), .f(0), .f(1), .f(2)]), "invalid-arguments", ",sfff"),
      (OSCWire.message("/rampd/master/gain", [.f(.nan)]), "invalid-value", "not a finite number"),
      (OSCWire.message("/rampd/master/gain", [.f(2)]), "out-of-range", "above the maximum gain"),
      (OSCWire.message("/rampd/streams/nope/gain", [.f(0.5)]), "unknown-key-path", "nope"),
      (OSCWire.message("/rampd/stop", [.s("nope")]), "unknown-stream", "nope"),
      (OSCWire.message("/rampd/play", [.s("/no/such/file.wav")]), "file-error", "/no/such/file.wav"),
    ]
    for (packet, code, words) in cases {
      let reply = peer.exchange(packet)
      #expect(reply?.address == "/rampd/error", "\(String(describing: reply))")
      #expect(reply?.strings.count == 3 && reply?.strings[1] == code, "\(String(describing: reply))")
      #expect(reply?.strings.last?.contains(words) == true, "\(String(describing: reply)) should say \(words)")
    }
    let ping = peer.exchange(OSCWire.message("/rampd/ping"))
    #expect(ping?.address == "/rampd/reply" && ping?.strings.first == "/rampd/ping")
    let set = peer.exchange(OSCWire.message("/rampd/master/gain", [.f(0.5), .i(0)]))
    #expect(set?.address == "/rampd/reply", "\(String(describing: set))")
    let result = try JSON.parse(try #require(set?.strings.last))
    #expect(result["key"] == "master.gain" && result["value"] == 0.5)
    try Self.heard(0.25, in: daemon)
    let get = peer.exchange(OSCWire.message("/rampd/get", [.s("master/gain")]))
    #expect(try JSON.parse(try #require(get?.strings.last))["model"] == 0.5)
    #expect(bridge.process.isRunning && daemon.process.isRunning)
    #expect(bridge.log.contains("/rampd/nope ,s: unknown-address"), "refusals are logged too\n\(bridge.log)")
  }

  /// Replies to a fixed port (`--reply-port`), for senders such as `oscsend` that cannot hear on
  /// the port they send from: `oscdump` there sees the refusal of a message `oscsend` sent.
  @Test func repliesGoToTheReplyPort() throws {
    let replyPort = try FreePort.free()
    let (daemon, bridge, _) = try Self.playingDaemon(bridgeArguments: ["--reply-port", "\(replyPort)"])
    defer { daemon.stop() }
    let dump = Process()
    dump.executableURL = URL(fileURLWithPath: "/usr/bin/oscdump")
    dump.arguments = ["-L", "\(replyPort)"]
    let output = Pipe()
    let sink = LogSink()
    dump.standardOutput = output
    sink.collect(from: output)
    try dump.run()
    defer {
      // SIGKILL: a child of the test process starts with SIGTERM blocked, and oscdump keeps it so.
      kill(dump.processIdentifier, SIGKILL)
      dump.waitUntilExit()
    }
    usleep(300_000)
    _ = try oscsend(["localhost", "\(bridge.port)", "/rampd/unknown", "f", "1"])
    _ = try oscsend(["localhost", "\(bridge.port)", "/rampd/master/gain", "f", "0.5"])
    try waitFor("oscdump to print both replies, it printed: \(sink.text)") {
      sink.text.contains("/rampd/error sss \"/rampd/unknown\" \"unknown-address\"")
        && sink.text.contains("/rampd/reply ss \"/rampd/master/gain\"")
    }
  }

  /// Senders outside `--allow` are ignored: no reply, nothing done, a log line.
  @Test func sendersOutsideTheAllowListAreIgnored() throws {
    let (daemon, bridge, client) = try Self.playingDaemon(bridgeArguments: ["--allow", "10.0.0.0/8"])
    defer { daemon.stop() }
    let peer = try UDPPeer(bridgePort: bridge.port)
    #expect(peer.exchange(OSCWire.message("/rampd/master/gain", [.f(0.5)]), timeout: 1) == nil)
    #expect(try client.request(["cmd": "get", "key": "master.gain"]).result["model"] == 1)
    #expect(bridge.log.contains("not in the allowed sources"), "\(bridge.log)")
  }

  /// rampd stopped: messages are answered `unreachable`, and the bridge stays up; rampd started
  /// again on the same socket: the next message reaches it and is heard.
  @Test func outlivesRampdAndReconnects() throws {
    let (daemon, bridge, _) = try Self.playingDaemon()
    let peer = try UDPPeer(bridgePort: bridge.port)
    #expect(peer.exchange(OSCWire.message("/rampd/ping"))?.address == "/rampd/reply")
    daemon.stop()
    let refused = peer.exchange(OSCWire.message("/rampd/master/gain", [.f(0.5)]))
    #expect(refused?.strings.dropFirst().first == "unreachable", "\(String(describing: refused))")
    let again = try DaemonProcess(name: "again", limiter: "off", reusing: daemon.directory)
    defer { again.stop() }
    let file = try again.constantFile("half", seconds: 2, left: 0.5, right: 0.5)
    #expect(try again.client().request(["cmd": "play", "path": .string(file), "stream": "probe", "loop": true]).isOK)
    usleep(600_000)  // past the half second between two attempts to connect
    let set = peer.exchange(OSCWire.message("/rampd/master/gain", [.f(0.5), .f(0)]))
    #expect(set?.address == "/rampd/reply", "\(String(describing: set))\n\(bridge.log)")
    try Self.heard(0.25, in: again)
    #expect(bridge.process.isRunning)
  }

  /// Bad flags exit with 64 (EX_USAGE), naming the flag.
  @Test func badFlagsAreRefusedNamingTheFlag() throws {
    let cases: [([String], String)] = [
      (["--listen", "9000"], "--listen '9000'"),
      (["--listen", "300.0.0.1:9000"], "--listen '300.0.0.1:9000'"),
      (["--allow", "10.0.0.0/40"], "--allow '10.0.0.0/40'"),
      (["--map", "/1/fader1"], "--map '/1/fader1': no '='"),
      (["--map", "/1/fader1=master"], "is not a key path"),
      (["--map", "/1/*=master.gain"], "pattern character"),
      (["--map", "/1/f=master.gain:0..1:loud"], "no curve 'loud'"),
      (["--map", "/1/f=master.gain:0..1:db"], "the db curve needs a range above 0"),
      (["--replies", "some"], "--replies 'some'"),
      (["--reply-port", "70000"], "--reply-port 70000"),
    ]
    for (arguments, words) in cases {
      let outcome = try runProcess(Executables.rampdOSC, arguments + ["--socket", "/nonexistent/rampd.sock"])
      #expect(outcome.status == 64, "\(arguments): \(outcome)")
      #expect(outcome.stderr.contains(words), "\(arguments): \(outcome)")
    }
  }

  /// docs/rampd-osc.1 (script/man) holds every help text and renders without a warning.
  @Test func manPage() throws {
    try ManPage.checkEveryHelpText("rampd-osc", binary: Executables.rampdOSC, atLeast: 6)
    try ManPage.checkRendersWithoutWarnings("rampd-osc")
  }

  // MARK: Timetags

  /// A bundle timetagged 1.2 s ahead (at a fraction of a millisecond) lands on the sample rampd
  /// hears at that wall-clock time: a `set` scheduled on rampd's socket for half a second later
  /// by the same wall clock is heard exactly 24000 samples after it (within one), and both of its
  /// messages take effect on that one sample. Its replies come
  /// once it has taken effect. An immediate bundle (timetag 1) runs at once.
  @Test func aTimetaggedBundleLandsOnTheSampleOfItsTime() throws {
    let (daemon, bridge, client) = try Self.playingDaemon()
    defer { daemon.stop() }
    try Self.heard(0.5, in: daemon)
    let peer = try UDPPeer(bridgePort: bridge.port)
    let underrunsBefore = try client.request(["cmd": "status"]).result["output"]?["underruns"]?.int
    let due = (Date().timeIntervalSince1970 + 1.2).rounded(.down) + 0.123_45
    // Two messages in the bundle: both land on its sample (one alone would be heard at 0.25).
    peer.send(
      OSCWire.bundle(
        OSCWire.timetag(unix: due),
        [
          OSCWire.message("/rampd/set", [.s("master.gain"), .f(0.5), .f(0)]),
          OSCWire.message("/rampd/streams/probe/gain", [.f(0.5), .i(0)]),
        ]))
    let reference = try client.request([
      "cmd": "set", "key": "master.gain", "value": 0.25, "duration": 0, "at": .string(RFC3339.format(due + 0.5)),
      "ack": "scheduled",
    ])
    #expect(reference.isOK, "\(reference.serialized())")
    let reply = peer.receive(timeout: 5)
    let answered = Date().timeIntervalSince1970
    #expect(reply?.address == "/rampd/reply", "\(String(describing: reply))\n\(bridge.log)")
    #expect(peer.receive()?.address == "/rampd/reply")
    #expect(answered > due - 0.1, "answered \(due - answered) s before it was due: not when it took effect")
    let first = try Self.heard(0.125, in: daemon)
    let second = try Self.heard(0.0625, in: daemon, from: first)
    // Paced by the clock, rendering that falls behind it (an underrun, on a loaded machine
    // without real-time priority) moves what is heard against the wall clock: then only the
    // sample each lands on is checked, not their distance.
    let underrunsAfter = try client.request(["cmd": "status"]).result["output"]?["underruns"]?.int
    if underrunsAfter == underrunsBefore {
      #expect(
        abs(second - first - Self.rate / 2) <= 1, "heard \(second - first) samples apart, not 24000\n\(bridge.log)")
    } else {
      print(
        "timetag: \((underrunsAfter ?? 0) - (underrunsBefore ?? 0)) underrun(s) meanwhile; heard \(second - first) samples apart"
      )
    }
    let before = try daemon.played(channel: 0)[(first - Self.rate / 2)..<first]
    #expect(before.allSatisfy { abs($0 - 0.5) < 1e-6 }, "the bundle's two messages took effect on different samples")

    // Timetag 1: at once, both messages of the bundle.
    let immediate = OSCWire.bundle(
      OSCWire.immediately,
      [
        OSCWire.message("/rampd/master/gain", [.f(1), .f(0)]),
        OSCWire.message("/rampd/streams/probe/gain", [.f(0.5), .f(0)]),
      ])
    let sentAt = try daemon.played(channel: 0).count
    peer.send(immediate)
    #expect(peer.receive()?.address == "/rampd/reply")
    #expect(peer.receive()?.address == "/rampd/reply")
    let heardAfter = try Self.heard(0.25, in: daemon, from: sentAt)
    #expect(
      heardAfter - sentAt < Self.rate / 5, "an immediate bundle heard \(heardAfter - sentAt) samples after it was sent")
  }

  /// A bundle's messages take effect together or not at all (rampd's `batch`): when rampd-osc
  /// cannot translate one, or rampd refuses one, none is applied, that one is answered with its
  /// own refusal and the others with `bundle-refused` naming it. Whole again, the bundle is heard
  /// on one sample.
  @Test func aBundleIsAppliedWhollyOrNotAtAll() throws {
    let (daemon, bridge, client) = try Self.playingDaemon()
    defer { daemon.stop() }
    try Self.heard(0.5, in: daemon)
    let peer = try UDPPeer(bridgePort: bridge.port)
    let untranslatable = OSCWire.message("/rampd/set", [.s("master.gain")])
    let refusedByRampd = OSCWire.message("/rampd/streams/nope/gain", [.f(0.5), .f(0)])
    for (bad, code) in [(untranslatable, "invalid-arguments"), (refusedByRampd, "unknown-key-path")] {
      peer.send(
        OSCWire.bundle(
          OSCWire.immediately,
          [OSCWire.message("/rampd/master/gain", [.f(0.5), .f(0)]), bad, OSCWire.message("/rampd/ping")]))
      let replies = (0..<3).map { _ in peer.receive() }
      let texts = replies.map { $0?.strings ?? [] }
      #expect(replies.allSatisfy { $0?.address == "/rampd/error" }, "\(replies)\n\(bridge.log)")
      #expect(
        texts.map { $0.first } == [
          "/rampd/master/gain", bad == untranslatable ? "/rampd/set" : "/rampd/streams/nope/gain", "/rampd/ping",
        ])
      #expect(texts.map { $0.dropFirst().first } == ["bundle-refused", code, "bundle-refused"], "\(texts)")
      #expect(texts[0].last?.contains("refused at message 2") == true, "\(texts)")
      let model = try client.request(["cmd": "get", "key": "master.gain"])
      #expect(model.result["model"] == 1, "a refused bundle's first message was applied: \(model.serialized())")
    }
    let mark = try daemon.played(channel: 0).count
    peer.send(
      OSCWire.bundle(
        OSCWire.immediately,
        [
          OSCWire.message("/rampd/master/gain", [.f(0.25), .f(0)]),
          OSCWire.message("/rampd/streams/probe/gain", [.f(0.5), .f(0)]),
        ]))
    #expect(peer.receive()?.address == "/rampd/reply")
    #expect(peer.receive()?.address == "/rampd/reply")
    let changed = try Self.heard(0.0625, in: daemon, from: mark)
    let before = try daemon.played(channel: 0)[mark..<changed]
    #expect(
      before.allSatisfy { abs($0 - 0.5) < 1e-6 }, "the bundle's two messages took effect on different samples")
    #expect(bridge.log.contains("/rampd/set ,s: invalid-arguments"), "\(bridge.log)")
  }

  // MARK: TCP

  /// OSC 1.1 over TCP: SLIP-framed packets (a fade whose duration's bytes hold END and ESC, so
  /// both are escaped), replies SLIP-framed on the same connection; a connection sending a broken
  /// escape is closed, the others go on.
  @Test func tcpWithSLIPFraming() throws {
    let (daemon, bridge, _) = try Self.playingDaemon()
    defer { daemon.stop() }
    let tcp = try TCPPeer(bridgePort: bridge.port)
    let duration = Float(bitPattern: 0x3DDB_C0C0)  // 0.107 s; its bytes 3D DB C0 C0
    let fade = OSCWire.message("/rampd/fade", [.s("master.gain"), .f(0.25), .f(duration)])
    #expect(OSCWire.slip(fade).count == fade.count + 2 + 3, "the packet holds an ESC and two ENDs")
    tcp.send(raw: OSCWire.slip(fade))
    let reply = tcp.receive()
    #expect(reply?.address == "/rampd/reply" && reply?.strings.first == "/rampd/fade", "\(String(describing: reply))")
    let result = try JSON.parse(try #require(reply?.strings.last))
    #expect(result["duration"]?.numberValue == Double(duration), "\(result.serialized())")
    try Self.heard(0.125, in: daemon)

    // Two packets in one write, split across two writes, with END END between them.
    // (A refusal by the bridge itself may come before the reply rampd gives to an earlier message.)
    let both = OSCWire.slip(OSCWire.message("/rampd/ping")) + [0xC0] + OSCWire.slip(OSCWire.message("/rampd/nope"))
    tcp.send(raw: Array(both[..<7]))
    usleep(50_000)
    tcp.send(raw: Array(both[7...]))
    let replies = [tcp.receive(), tcp.receive()].compactMap { $0 }.sorted { $0.address > $1.address }
    #expect(replies.map(\.address) == ["/rampd/reply", "/rampd/error"], "\(replies)")
    #expect(replies.first?.strings == ["/rampd/ping", #"{"pong":true}"#])
    #expect(replies.last?.strings.dropFirst().first == "unknown-address")

    let broken = try TCPPeer(bridgePort: bridge.port)
    broken.send(raw: [0xC0, UInt8(ascii: "/"), 0xDB, 0x01, 0xC0])
    #expect(broken.closedByPeer(), "a broken escape closes the connection")
    tcp.send(raw: OSCWire.slip(OSCWire.message("/rampd/master/gain", [.f(1), .f(0)])))
    #expect(tcp.receive()?.address == "/rampd/reply")
    try Self.heard(0.5, in: daemon, from: try daemon.played(channel: 0).count - Self.rate / 50)
  }

  /// liblo's `oscsend osc.tcp://…` frames packets with their size (OSC 1.0's stream framing):
  /// taken too.
  @Test func oscsendOverTCP() throws {
    let (daemon, bridge, _) = try Self.playingDaemon()
    defer { daemon.stop() }
    let sent = try oscsend(["osc.tcp://127.0.0.1:\(bridge.port)", "/rampd/set", "sff", "master.gain", "0.25", "0"])
    #expect(sent.status == 0, "\(sent)")
    try Self.heard(0.125, in: daemon)
  }

  // MARK: Floods

  /// 20000 malformed packets (random bytes; messages cut short, with bad padding, bad type tags,
  /// non-ASCII addresses; bundles with lying sizes, nested too deep, due before their parent) and
  /// TCP connections sending garbage: rampd plays on without a gap or a change, the bridge's log
  /// stays short, and a message afterwards is still answered and heard.
  @Test func aFloodOfMalformedPacketsLeavesAudioUninterrupted() throws {
    let (daemon, bridge, client) = try Self.playingDaemon(realtime: true)
    defer { daemon.stop() }
    try Self.heard(0.5, in: daemon)
    let realtime = try client.request(["cmd": "status"]).result["output"]?["realtimePriority"] != 0
    let peer = try UDPPeer(bridgePort: bridge.port)
    var generator = SystemRandomNumberGenerator()
    let valid = OSCWire.message("/rampd/set", [.s("master.gain"), .f(0.25), .f(0)])
    func nested(_ depth: Int) -> [UInt8] {
      depth == 0 ? valid : OSCWire.bundle(OSCWire.immediately, [nested(depth - 1)])
    }
    let later = OSCWire.timetag(unix: Date().timeIntervalSince1970 + 3600)
    let earlier = OSCWire.timetag(unix: Date().timeIntervalSince1970 + 60)
    let malformed: [[UInt8]] = [
      Array(valid[..<(valid.count - 2)]),  // cut short
      Array(valid[..<12]) + Array(",sff".utf8) + Array(valid[20...]),  // type tags without their NUL
      OSCWire.padded("/rampd/set") + OSCWire.padded("sff") + Array(valid[20...]),  // no ',' before the tags
      [0x2f, 0xff, 0xfe, 0x00] + Array(valid[12...]),  // an address that is not ASCII
      OSCWire.padded("/rampd/set") + OSCWire.padded(",sfz") + Array(valid[20...]),  // an unknown type
      OSCWire.padded("#bundle") + [0, 0, 0, 0],  // no timetag
      OSCWire.bundle(OSCWire.immediately, [valid]).dropLast(4),  // an element's size beyond the end
      OSCWire.padded("#bundle") + [0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xf0] + valid,  // a negative size
      nested(12),  // nested too deep
      OSCWire.bundle(later, [OSCWire.bundle(earlier, [valid])]),  // inner due before outer
      [],
    ]
    #expect(malformed.allSatisfy { $0 != valid }, "the malformed packets differ from the valid one")
    // Underruns in 4 quiet seconds, the baseline of this (shared, loaded) machine.
    func underruns() throws -> Double {
      try client.request(["cmd": "status"]).result["output"]?["underruns"]?.numberValue ?? .nan
    }
    let rampd = daemon.process.processIdentifier
    let quietStart = try underruns()
    let quietCPU = try cpuSeconds(rampd)
    usleep(4_000_000)
    let floodStart = try underruns()
    let floodCPU = try cpuSeconds(rampd)
    let quiet = floodStart - quietStart
    let start = try daemon.played(channel: 0).count
    // 20000 packets in about 4 s, 100 every 20 ms: a flood, but one that leaves the test's own
    // machine (2 shared cores) the time to render.
    for round in 0..<20_000 {
      if round % 100 == 99 { usleep(20_000) }
      if round % 2 == 0 {
        peer.send(malformed[(round / 2) % malformed.count])
      } else {
        peer.send(
          (0..<Int.random(in: 1...512, using: &generator)).map { _ in UInt8.random(in: 0...255, using: &generator) })
      }
      if round % 5000 == 0 {
        let garbage = try TCPPeer(bridgePort: bridge.port)
        garbage.send(raw: (0..<4096).map { _ in UInt8.random(in: 0...255, using: &generator) })
      }
    }
    #expect(bridge.process.isRunning, "the bridge died\n\(bridge.log)")
    let ping = peer.exchange(OSCWire.message("/rampd/ping"), timeout: 10)
    #expect(ping?.address == "/rampd/reply", "\(String(describing: ping))")
    let end = try daemon.played(channel: 0).count
    let during = try Self.left(daemon, from: start).prefix(end - start)
    #expect(during.count > Self.rate / 10, "the flood took \(during.count) samples")
    #expect(during.allSatisfy { abs($0 - 0.5) < 1e-6 }, "the sound changed or stopped during the flood")
    // The malformed packets never reach rampd: it works no harder than when quiet (it renders
    // the same, and is sent nothing), and its output runs as it did then.
    let cpu = (quiet: floodCPU - quietCPU, flood: try cpuSeconds(rampd) - floodCPU)
    #expect(
      cpu.flood <= 1.5 * cpu.quiet + 0.1, "rampd used \(cpu.flood) s of CPU in the flood, \(cpu.quiet) s in 4 s before")
    let flood = try underruns() - floodStart
    if realtime {
      #expect(flood <= 2 * quiet + 3, "\(flood) underruns during the flood, \(quiet) in as long before it")
    } else {
      print("flood: the render thread cannot have real-time priority here; underruns not checked (\(flood))")
    }
    #expect(
      try client.request(["cmd": "get", "key": "master.gain"]).result["model"] == 1, "no malformed set got through")
    #expect(bridge.log.utf8.count < 200_000, "the log grew by \(bridge.log.utf8.count) bytes")
    #expect(bridge.log.contains("more lines like these left out"), "\(bridge.log.suffix(2000))")
    peer.send(OSCWire.message("/rampd/master/gain", [.f(0.5), .f(0)]))
    #expect(peer.receive()?.address == "/rampd/reply")
    try Self.heard(0.25, in: daemon, from: end)
  }
}

/// From a message sent to the sample it makes rampd play: OSC over UDP through rampd-osc, and a
/// request line on rampd's socket (the way rampctl goes), taken in turns in the same run; then
/// `oscsend` and `rampctl` themselves, each a process started per message. Printed as median and
/// p99 (`latency:` lines); checked only loosely, this machine being shared.
@Suite(.serialized) struct OSCLatencyTests {
  static let rate = 48_000

  @Test func messageToHeardSampleAgainstTheSocket() throws {
    let (daemon, bridge, client) = try OSCBridgeTests.playingDaemon()
    defer { daemon.stop() }
    try OSCBridgeTests.heard(0.5, in: daemon)
    let peer = try UDPPeer(bridgePort: bridge.port)
    let delay = try client.request(["cmd": "status"]).result["output"]?["delay"]?.numberValue ?? 0
    let hasRampctl = FileManager.default.isExecutableFile(atPath: Executables.rampctl)
    var paths = ["osc", "socket", "oscsend"] + (hasRampctl ? ["rampctl"] : [])
    var samples: [String: [Double]] = [:]
    // 50 messages each in process, 15 each through a process started per message (a debug
    // rampctl takes a third of a second to start on this machine).
    let rounds = 50
    for round in 0..<rounds * paths.count {
      let path = paths[round % paths.count]
      if ["oscsend", "rampctl"].contains(path) && samples[path, default: []].count >= 15 { continue }
      // A level of its own each time, so that its first sample is unmistakable.
      let gain = 0.2 + 0.6 * Double(round) / Double(rounds * paths.count)
      let level = Float(0.5 * Float(gain))
      let seconds = try daemon.secondsUntilHeard(level, delay: delay) {
        switch path {
        case "osc":
          peer.send(OSCWire.message("/rampd/master/gain", [.f(Float(gain)), .f(0)]))
        case "socket":
          try client.send(
            raw: JSONValue.object([
              "cmd": "set", "key": "master.gain", "value": .number(Double(Float(gain))), "duration": 0,
            ])
            .serialized())
        case "oscsend":
          _ = try oscsend(["localhost", "\(bridge.port)", "/rampd/set", "sff", "master.gain", "\(Float(gain))", "0"])
        default:
          _ = try runProcess(
            Executables.rampctl, ["--socket", daemon.socket, "set", "master.gain", "\(Float(gain))", "--duration", "0"])
        }
      }
      samples[path, default: []].append(seconds)
      usleep(30_000)
    }
    if !hasRampctl { paths.append("rampctl (not built)") }
    for path in paths {
      guard let values = samples[path] else { continue }
      print(
        "latency: \(path) to heard: \(medianAndP99(values)) (\(values.count) messages;"
          + String(format: " %.1f ms of it the device's buffer)", delay * 1000))
    }
    let osc = percentile(samples["osc"] ?? [], 0.5)
    let socket = percentile(samples["socket"] ?? [], 0.5)
    #expect(osc < socket + 0.02, "OSC's median \(osc) s against the socket's \(socket) s")
  }
}

/// A free loopback port (UDP).
enum FreePort {
  static func free() throws -> UInt16 {
    let descriptor = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
    defer { close(descriptor) }
    var address = Loopback.address(port: 0)
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) {
      $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
        bind(descriptor, $0, length) == 0 && getsockname(descriptor, $0, &length) == 0
      }
    }
    guard bound else { throw HarnessError("no free port: \(errno)") }
    return UInt16(bigEndian: address.sin_port)
  }
}
