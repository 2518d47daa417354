import Foundation
import RampEngine
import RampSystem
import Testing

@Suite struct SystemInterfacesTests {
  /// `directoryPart(of:)` is what `NSString.deletingLastPathComponent` gave for the paths rampd
  /// makes directories for (socket, state file, loudness cache, output).
  @Test func directoryPartIsNSStringsDeletingLastPathComponent() {
    for path in [
      "/run/rampd/socket", "/socket", "socket", "/", "", "/a/b/", "a/b", "/a//b", "//a", "relative/dir/file.wav",
      "/var/lib/rampd/state.json",
    ] {
      #expect(directoryPart(of: path) == (path as NSString).deletingLastPathComponent, "\(path)")
    }
  }

  @Test func aStartedThreadRunsUnderItsName() throws {
    let done = DispatchSemaphore(value: 0)
    nonisolated(unsafe) var name = ""
    startThread(named: "rampd-test-thread-long") {
      name = (try? String(contentsOfFile: "/proc/thread-self/comm", encoding: .utf8)) ?? ""
      done.signal()
    }
    #expect(done.wait(timeout: .now() + 5) == .success)
    #expect(name == "rampd-test-thre\n")
  }
}
