import Foundation
import RampEngine
import Testing

@testable import RampProtocol

#if canImport(Glibc)
  import Glibc
#endif

/// Mechanisms the daemon and the clients share, each written once: the engine-refusal → protocol
/// code mapping, the name rule, the schedule's due time, the Unix socket address.
@Suite struct OneMechanismTests {
  // MARK: Engine refusals

  static let expectedCodes: [EngineError.Code: ErrorCode] = [
    .invalidValue: .invalidField, .invalidTimingFunction: .invalidField, .invalidKeyPath: .invalidField,
    .invalidAnimation: .invalidField, .outOfRange: .outOfRange, .unknownKeyPath: .unknownKeyPath,
    .limitExceeded: .limitExceeded, .unknownAnimation: .unknownAnimation,
  ]

  @Test(arguments: EngineError.Code.allCases)
  func eachEngineRefusalMapsToOneCodeWhicheverPathReportsIt(code: EngineError.Code) {
    let error = EngineError(code, field: "value", "refused")
    let expected = Self.expectedCodes[code]
    #expect(expected != nil, "every engine code has its protocol code in this table")
    #expect(ErrorCode(code) == expected)
    // Applied: a command the engine refuses when it takes effect.
    #expect(ProtocolError(error).code == expected)
    #expect(ProtocolError(error, field: "to").code == expected)
    // Parsed: a request field the engine checks while it is read.
    #expect(engineError(error, field: "animation.to").code == expected)
  }

  @Test func theEngineReportsAValueOutsideARangeByItsCodeNotItsWording() throws {
    let engine = try AnimationEngine(sampleRate: 48_000)
    try engine.define("g", value: 0.5, range: 0...1)
    do {
      try engine.set("g", to: 1.5)
      Issue.record("accepted a value outside the range")
    } catch {
      #expect(error.code == .outOfRange)
      #expect(ProtocolError(error).code == .outOfRange)
      #expect(ProtocolError(error).field == "value")
    }
    // An invalid value whose message happens to say "outside" is not a range error.
    #expect(ProtocolError(EngineError(.invalidValue, field: "x", "the curve goes outside")).code == .invalidField)
  }

  // MARK: The name rule

  static let names: [(String, Bool)] = [
    ("s1", true), ("A-b_2", true), ("-", true), ("", false), ("a.b", false), ("a b", false), ("é", false),
    ("a/b", false), ("x\u{0}", false), ("Ω", false),
  ]

  @Test(arguments: names)
  func oneNameRuleForStreamsMixersAndKeyPaths(name: String, valid: Bool) {
    #expect(KeyPath.isName(name) == valid)
    // A stream id in a request.
    let play = JSONValue.object(["cmd": "play", "path": "/srv/a.wav", "stream": .string(name)]).serialized()
    #expect((refusal(play) == nil) == valid, "stream \(name.debugDescription)")
    // A key path component ('.' separates components, so a name with one is two components).
    let keyPathValid: Bool
    do {
      try KeyPath.validate("streams.\(name).gain")
      keyPathValid = true
    } catch { keyPathValid = false }
    #expect(keyPathValid == (valid || (name.contains(".") && !name.hasPrefix(".") && !name.hasSuffix("."))))
    #expect(name.split(separator: ".", omittingEmptySubsequences: false).allSatisfy(KeyPath.isName) == keyPathValid)
  }

  // MARK: Schedules

  @Test func aScheduleIsDueAtOneTime() {
    let now = 1_800_000_000.25
    #expect(Schedule.delay(2.5).due(receivedAt: now) == now + 2.5)
    #expect(Schedule.date(1_800_000_100).due(receivedAt: now) == 1_800_000_100)
    #expect(Schedule.delay(2.5).secondsUntilDue(from: now) == 2.5)
    #expect(Schedule.date(now + 60).secondsUntilDue(from: now) == 60)
    #expect(Schedule.date(now - 60).secondsUntilDue(from: now) == 0, "a past date is due now")
  }

  // MARK: Unix socket addresses

  @Test func aPathAddressCountsItsTerminatorAndAnAbstractNameDoesNot() throws {
    let offset = MemoryLayout.offset(of: \sockaddr_un.sun_path)!
    let path = try #require(UnixAddress("/run/rampd/rampd.sock"))
    #expect(Int(path.length) == offset + "/run/rampd/rampd.sock".utf8.count + 1)
    #expect(path.storage.sun_family == sa_family_t(AF_UNIX))
    let abstract = try #require(UnixAddress("@rampd-notify"))
    #expect(Int(abstract.length) == offset + "@rampd-notify".utf8.count)
    let first = withUnsafeBytes(of: abstract.storage.sun_path) { $0[0] }
    #expect(first == 0, "an abstract name starts with a NUL byte")
    let room = MemoryLayout.size(ofValue: sockaddr_un().sun_path)
    #expect(UnixAddress("/" + String(repeating: "x", count: room - 2)) != nil)
    #expect(UnixAddress("/" + String(repeating: "x", count: room - 1)) == nil, "no room for the terminator")
  }

  @Test func anAddressBindsAndConnectsARealSocket() throws {
    let path = NSTemporaryDirectory() + "rampd-address-\(getpid())-\(UInt32.random(in: 0...UInt32.max)).sock"
    defer { unlink(path) }
    let address = try #require(UnixAddress(path))
    let server = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0)
    let client = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0)
    defer {
      close(server)
      close(client)
    }
    #expect(address.bind(server) == 0)
    #expect(address.connect(client) == 0)
    let sent = Array("READY=1".utf8)
    #expect(sent.withUnsafeBytes { send(client, $0.baseAddress, $0.count, 0) } == sent.count)
    var received = [UInt8](repeating: 0, count: 64)
    let count = received.withUnsafeMutableBytes { recv(server, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
    #expect(count == sent.count)
    #expect(Array(received.prefix(max(count, 0))) == sent)
    // Nothing listens at a fresh path: connect fails with errno set, as the socket call does.
    let missing = try #require(UnixAddress(path + ".missing"))
    let stream = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
    defer { close(stream) }
    #expect(missing.connect(stream) == -1)
    #expect(errno == ENOENT)
  }
}
