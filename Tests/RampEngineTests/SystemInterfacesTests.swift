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

  /// `range(ofText:)` finds what the standard library's `firstRange(of:)` finds, and
  /// `replacingEvery(_:with:)` makes what `replacing(_:with:)` makes, on the texts rampd searches
  /// (config lines, URLs, key paths) and their edges.
  @Test func textSearchIsTheStandardLibrarys() {
    for (text, needle) in [
      ("mqtt://broker:1883", "://"), ("[[stream]]", "]]"), ("[[a] ]]", "]]"), ("no", "://"), ("", "x"), ("x", ""),
      ("aab", "ab"), ("ab", "ab"), ("a", "ab"), ("ééé", "é"), ("e\u{301}x", "e"), ("://://", "://"),
    ] {
      #expect(text.range(ofText: needle) == text.firstRange(of: needle), "\(text) \(needle)")
    }
    for (text, old, new) in [("-6dB", Character("\u{2212}"), Character("-")), ("a/b/c", "/", "."), ("", "-", " ")] {
      #expect(text.replacingEvery(old, with: new) == text.replacing(String(old), with: String(new)), "\(text)")
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
