import FoundationEssentials
import RampProtocol

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// Why a conversation with rampd did not end well, and which exit status says so.
///
/// The statuses are sysexits(3) values, so shell scripts can tell "try again later" from "fix
/// the command": they are documented in `rampctl --help` and rampctl(1).
public enum ClientFailure: Error, Equatable, Sendable, CustomStringConvertible {
  /// No daemon at the socket (missing, refused, not a socket) or it went away mid-conversation.
  case unreachable(path: String, reason: String)
  /// rampd answered `ok: false`.
  case refused(ProtocolError)
  /// rampd said something this client cannot make sense of.
  case protocolViolation(String)
  /// Ctrl-C while waiting.
  case interrupted
  /// Nothing came within the time allowed.
  case timedOut(String)
  /// rampd does not admit this user (`permission-denied` instead of the greeting).
  case notPermitted(path: String, error: ProtocolError)

  public enum ExitStatus {
    public static let success: Int32 = 0
    /// EX_USAGE: bad arguments or units (ArgumentParser's own status for validation errors).
    public static let usage: Int32 = 64
    /// EX_DATAERR: rampd refused the command (or a script line is not a valid request).
    public static let refused: Int32 = 65
    /// EX_UNAVAILABLE: no rampd at the socket.
    public static let unreachable: Int32 = 69
    /// EX_SOFTWARE: a reply this client did not expect.
    public static let protocolError: Int32 = 70
    /// EX_TEMPFAIL: a wait was interrupted (Ctrl-C) or timed out; the ramp itself goes on.
    public static let interrupted: Int32 = 75
    /// EX_NOPERM: rampd does not admit this user.
    public static let notPermitted: Int32 = 77
  }

  public var exitStatus: Int32 {
    switch self {
    case .unreachable: return ExitStatus.unreachable
    // A wait that times out is refused with `timeout`: nothing is wrong with the command.
    case .refused(let error): return error.code == .timeout ? ExitStatus.interrupted : ExitStatus.refused
    case .protocolViolation: return ExitStatus.protocolError
    case .interrupted, .timedOut: return ExitStatus.interrupted
    case .notPermitted: return ExitStatus.notPermitted
    }
  }

  /// The line printed after `rampctl: ` on standard error.
  public var description: String {
    switch self {
    case .unreachable(let path, let reason):
      return """
        cannot reach rampd at \(path): \(reason)
        Is rampd running? Start it with \(
          SocketLocation.startHint(path: path, environment: ProcessInfo.processInfo.environment, isRoot: geteuid() == 0)
        ), or give its socket with --socket or RAMPD_SOCKET.
        """
    case .refused(let error):
      return Self.describe(error)
    case .protocolViolation(let message):
      return "protocol error: \(message)"
    case .interrupted:
      return "interrupted; what was started goes on in rampd"
    case .timedOut(let message):
      return "timed out: \(message)"
    case .notPermitted(let path, let error):
      return """
        rampd at \(path) does not admit this user: \(error.message)
        Its administrator can add the user or one of its groups to [access] in rampd's configuration.
        """
    }
  }

  /// `<code>: <message>`, with the field when the message does not already start with it.
  public static func describe(_ error: ProtocolError) -> String { error.summary }
}
