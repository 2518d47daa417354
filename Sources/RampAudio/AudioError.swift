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
  /// The configuration key at fault, as its section names it (`element` of
  /// `mixers.<name>.element`), and the problem without the key: what a caller routes on, never
  /// the message.
  public private(set) var field: String?
  public private(set) var problem: String?

  public init(_ code: Code, _ message: String) {
    self.code = code
    self.message = message
  }

  /// An error about configuration key `section.field`; the message is `section.field: problem`.
  public init(_ code: Code, section: String, field: String, _ problem: String) {
    self.init(code, "\(section).\(field): \(problem)")
    self.field = field
    self.problem = problem
  }

  public var description: String { message }
}
