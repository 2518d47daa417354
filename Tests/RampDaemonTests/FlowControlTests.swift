import Foundation
import RampProtocol
import Testing

@testable import RampTestSupport

#if canImport(Glibc)
  import Glibc
#endif

/// A client that floods requests and never reads its replies holds a bounded share of the daemon:
/// rampd stops reading it, the kernel's buffers fill, its writes block; everyone else is served
/// and the music plays on.
@Suite struct FlowControlTests {
  @Test func aFloodThatIsNeverReadIsPausedNotBuffered() throws {
    let daemon = try DaemonProcess()
    let file = try daemon.constantFile("bed", seconds: 30, left: 0.5, right: 0.5)
    let other = try daemon.client()
    #expect(try other.request(["cmd": "play", "path": .string(file), "stream": "bed"])["ok"] == .bool(true))
    #expect(try other.request(["cmd": "subscribe", "events": ["underrun"]])["ok"] == .bool(true))
    let before = try residentKilobytes(of: daemon.process.processIdentifier)

    let flooder = try daemon.client()
    let line = Array(#"{"cmd":"get","key":"master.gain","id":1}"#.utf8) + [UInt8(ascii: "\n")]
    let chunk = [UInt8]((0..<2000).flatMap { _ in line })
    _ = fcntl(flooder.descriptor, F_SETFL, fcntl(flooder.descriptor, F_GETFL) | O_NONBLOCK)
    var accepted = 0
    var lastProgress = Date()
    // Write until the daemon has stopped taking requests for a second, or 100 MB went in.
    while Date().timeIntervalSince(lastProgress) < 1, accepted < 100_000_000 {
      // Whole lines only: a partial write goes on where it stopped.
      let offset = accepted % chunk.count
      let sent = chunk[offset...].withUnsafeBytes {
        send(flooder.descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL))
      }
      if sent > 0 {
        accepted += sent
        lastProgress = Date()
      } else {
        usleep(5_000)
      }
    }
    let requests = accepted / line.count
    #expect(accepted < 100_000_000, "rampd stopped reading the flood (took \(requests) requests)")

    // Everyone else is served promptly while the flood waits.
    let asked = Date()
    #expect(try other.request(["cmd": "ping"])["ok"] == .bool(true))
    #expect(Date().timeIntervalSince(asked) < 1)
    let after = try residentKilobytes(of: daemon.process.processIdentifier)
    #expect(after - before < 40_000, "memory grew by \(after - before) kB for \(requests) unread requests")
    // The stream's decoder kept up (output lateness on a loaded test machine is not the flood's
    // doing, so `status.output.underruns` is not asked here).
    let status = try other.request(["cmd": "status"])["result"]
    #expect(status?["streams"]?.arrayValue?.count == 1)
    #expect(other.events.filter { $0["event"] == .string("underrun") }.isEmpty, "\(other.events)")

    // Reading resumes when the client reads: every request it got in is answered, in order.
    _ = fcntl(flooder.descriptor, F_SETFL, fcntl(flooder.descriptor, F_GETFL) & ~O_NONBLOCK)
    var answered = 0
    while answered < requests {
      guard let reply = try? flooder.readLine() else {
        Issue.record("no reply \(answered) of \(requests)")
        break
      }
      guard reply["ok"] == .bool(true) else {
        Issue.record("reply \(answered): \(reply)")
        break
      }
      answered += 1
    }
    #expect(answered == requests)
  }
}

/// VmRSS of a process, in kB.
func residentKilobytes(of pid: Int32) throws -> Int {
  let status = try String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)
  guard let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") }),
    let value = Int(line.split(separator: " ", omittingEmptySubsequences: true)[1])
  else { throw HarnessError("no VmRSS for \(pid)") }
  return value
}
