import Foundation

#if canImport(Glibc)
  import Glibc
#endif

/// Waits until `condition` holds (every 10 ms), failing after `timeout` seconds with `what`.
func waitFor(_ what: @autoclosure () -> String, timeout: Double = 10, _ condition: () throws -> Bool) throws {
  let deadline = Date().addingTimeInterval(timeout)
  while try !condition() {
    guard Date() < deadline else { throw HarnessError("timed out waiting for \(what())") }
    usleep(10_000)
  }
}

/// The p-th quantile (0…1) of `values` by nearest rank; NaN when there are none.
func percentile(_ values: [Double], _ p: Double) -> Double {
  guard !values.isEmpty else { return .nan }
  let sorted = values.sorted()
  return sorted[min(sorted.count - 1, Int((Double(sorted.count - 1) * p).rounded()))]
}

/// Median and 99th percentile in milliseconds, as the latency lines print them.
func medianAndP99(_ values: [Double]) -> String {
  String(format: "median %.1f ms, p99 %.1f ms", percentile(values, 0.5) * 1000, percentile(values, 0.99) * 1000)
}

extension DaemonProcess {
  /// Seconds from `send` to the first frame of `level` (left channel) heard: the frames the
  /// device took (ALSA's file plugin records as it plays) from the send until that frame, plus
  /// `delay`, what the device holds not yet heard (`status` output.delay). A level of its own for
  /// each measurement makes its first frame unmistakable.
  func secondsUntilHeard(_ level: Float, delay: Double, rate: Int = 48_000, send: () throws -> Void) throws -> Double {
    var info = stat()
    stat(recording, &info)
    let frame = Int(info.st_size) / 8
    try send()
    var heardAt = 0
    try waitFor("\(level) to be heard") {
      let left = try played(channel: 0)
      guard let index = left[min(frame, left.count)...].firstIndex(where: { abs($0 - level) < 1e-6 }) else {
        return false
      }
      heardAt = index
      return true
    }
    return Double(heardAt - frame) / Double(rate) + delay
  }
}
