#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#elseif canImport(Darwin)
  import Darwin
#endif

/// Numbers as C's `printf` writes them (`%.2f`, `%+.2f`, `%g`), through the C library: the
/// same digits `String(format:)` gave, without Foundation's internationalisation (and ICU's
/// data) linked in. For bulk output without allocation, see RampCLI's `TextBuffer`.
public enum NumberText {
  /// `value` with exactly `decimals` decimals (`%.Nf`), rounded as `printf` rounds:
  /// `fixed(-6.0206, decimals: 2)` is `-6.02`; with `sign`, a positive value has a `+` (`%+.Nf`).
  public static func fixed(_ value: Double, decimals: Int, sign: Bool = false) -> String {
    printed(value, format: sign ? "%+.*f" : "%.*f", precision: min(max(decimals, 0), 40))
  }

  /// `%g`: at most six significant digits, without trailing zeros (`-1`, `0.5`, `1e-07`).
  public static func general(_ value: Double) -> String {
    printed(value, format: "%.*g", precision: 6)
  }

  private static func printed(_ value: Double, format: String, precision: Int) -> String {
    // A double's `%f` is at most 309 digits before the point, 40 after it here.
    withUnsafeTemporaryAllocation(of: CChar.self, capacity: 384) { buffer in
      let count = withVaList([Int32(precision), value]) { vsnprintf(buffer.baseAddress!, buffer.count, format, $0) }
      return String(
        decoding: UnsafeRawBufferPointer(start: buffer.baseAddress!, count: max(0, Int(count))), as: UTF8.self)
    }
  }
}
