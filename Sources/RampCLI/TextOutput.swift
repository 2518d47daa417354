import RampEngine
import RampSystem

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#elseif canImport(Darwin)
  import Darwin
#endif

/// Bytes of text built without `String` interpolation or `String(format:)`, for output that
/// runs to millions of lines (`rampctl curve --values`). Numbers are printed in fixed point.
public struct TextBuffer: Sendable {
  public private(set) var bytes: [UInt8] = []

  public init(capacity: Int = 0) { bytes.reserveCapacity(capacity) }

  public var count: Int { bytes.count }
  public var text: String { String(decoding: bytes, as: UTF8.self) }

  public mutating func removeAll() { bytes.removeAll(keepingCapacity: true) }

  public mutating func append(_ text: String) { bytes.append(contentsOf: text.utf8) }

  public mutating func append(byte: UInt8) { bytes.append(byte) }

  public mutating func append(_ value: Int) {
    if value < 0 {
      bytes.append(0x2D)
      append(digitsOf: value.magnitude)
    } else {
      append(digitsOf: UInt(value))
    }
  }

  private mutating func append(digitsOf value: UInt) {
    var divisor: UInt = 1
    while value / divisor >= 10 { divisor *= 10 }
    while divisor > 0 {
      bytes.append(0x30 + UInt8(value / divisor % 10))
      divisor /= 10
    }
  }

  /// `value` rounded to `decimals` (0 to 18) decimals, always with exactly that many: `0.500000000`.
  /// Non-finite values print as `nan`, `inf`, `-inf`.
  public mutating func append(fixed value: Double, decimals: Int) {
    let decimals = min(max(decimals, 0), 18)
    guard value.isFinite else {
      append(value.isNaN ? "nan" : (value < 0 ? "-inf" : "inf"))
      return
    }
    var magnitude = abs(value)
    var scale: UInt64 = 1
    for _ in 0..<decimals { scale *= 10 }
    // Beyond 2^53 a double has no fraction left; keep clear of UInt64's limit as well.
    guard magnitude < 9.0e15 else {
      append(String(value))
      return
    }
    var whole = UInt64(magnitude.rounded(.down))
    magnitude -= Double(whole)
    var fraction = UInt64((magnitude * Double(scale)).rounded())
    if fraction >= scale {
      fraction -= scale
      whole += 1
    }
    if value < 0 && (whole != 0 || fraction != 0) { bytes.append(0x2D) }
    append(digitsOf: UInt(whole))
    guard decimals > 0 else { return }
    bytes.append(0x2E)
    var divisor = scale / 10
    while divisor > 0 {
      bytes.append(0x30 + UInt8(fraction / divisor % 10))
      divisor /= 10
    }
  }
}

/// An error writing to a file descriptor, with the C `errno`.
public struct WriteError: Error, CustomStringConvertible, Sendable {
  public let code: Int32
  public var description: String { "write failed: \(String(cString: strerror(code)))" }
}

extension TextBuffer {
  /// Writes the buffer to `descriptor` (default: standard output) in full, retrying on
  /// interruption, and empties it.
  public mutating func flush(to descriptor: Int32 = 1) throws(WriteError) {
    let failure = writeAll(&bytes, to: descriptor)
    removeAll()
    if failure != 0 { throw WriteError(code: failure) }
  }
}
