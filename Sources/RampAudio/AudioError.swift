/// Everything the audio path refuses or fails at, with the file or device it concerns.
public struct AudioError: Error, Equatable, Sendable, CustomStringConvertible {
  public enum Code: String, Sendable {
    /// A file that cannot be opened or read (missing, unreadable, not audio, truncated, corrupt).
    case unreadableFile = "unreadable-file"
    /// A file that cannot be written (directory missing, format the extension does not name, …).
    case unwritableFile = "unwritable-file"
    /// An ALSA device that cannot be opened or configured, or that failed.
    case device = "device-error"
    /// A parameter out of range (sample rate, channels, period, format).
    case invalidParameter = "invalid-parameter"
  }

  public let code: Code
  public let message: String

  public init(_ code: Code, _ message: String) {
    self.code = code
    self.message = message
  }

  public var description: String { message }
}
