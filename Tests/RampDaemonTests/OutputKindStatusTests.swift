import Foundation
import RampProtocol
import Testing

@testable import RampTestSupport

#if canImport(Glibc)
  import Glibc
#endif

/// `status.output.kind` through the daemon, and what the kind decides there: with nothing to play,
/// ALSA's `null` may stop (the output goes idle), a `file` chain never does (its recording is the
/// time line of what was played).
@Suite struct OutputKindStatusTests {
  @Test(arguments: [("rampd_e2e", "file", false), ("null", "null", true), ("plug:null", "null", true)])
  func statusNamesTheKind(device: String, kind: String, idles: Bool) throws {
    let daemon = try DaemonProcess(
      name: "kind-\(device.filter(\.isLetter))", environment: ["RAMPD_OUTPUT_DEVICE": device], pacing: "auto")
    let client = try daemon.client()
    var output = try client.request(["cmd": "status"]).result["output"]
    #expect(output?["kind"]?.stringValue == kind, "\(output?.serialized() ?? "")")
    #expect(output?["pacing"] == "clock", "\(output?.serialized() ?? "")")
    #expect(output?["rewind"] == false, "\(output?.serialized() ?? "")")
    // Long enough for the output to play out its buffer and stop, many times over.
    let deadline = Date().addingTimeInterval(idles ? 10 : 1)
    while output?["idle"] != true, Date() < deadline {
      usleep(50_000)
      output = try client.request(["cmd": "status"]).result["output"]
    }
    #expect(output?["idle"] == .bool(idles), "\(output?.serialized() ?? "")")
    #expect(daemon.stop() == 0)
  }
}
