#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#elseif canImport(Darwin)
  import Darwin
#endif

/// What the tools need to know about the terminal they print to.
public enum Terminal {
  /// True when the output should stay plain ASCII: `TERM=dumb` (Emacs shells, some CI logs).
  public static func prefersASCII(environment: [String: String]) -> Bool {
    environment["TERM"] == "dumb"
  }

  /// The width of the terminal on standard output, else `$COLUMNS`, else nil (a pipe or file).
  public static func columns(environment: [String: String]) -> Int? {
    #if canImport(Glibc) || canImport(Musl) || canImport(Darwin)
      if isatty(STDOUT_FILENO) != 0 {
        var size = winsize()
        if ioctl(STDOUT_FILENO, UInt(TIOCGWINSZ), &size) == 0, size.ws_col > 0 { return Int(size.ws_col) }
      }
    #endif
    if let text = environment["COLUMNS"], let columns = Int(text), columns > 0 { return columns }
    return nil
  }
}
