/// Where the daemon's socket is by default. One rule for both sides, so that `rampd` and
/// `rampctl` started by the same user in the same environment meet without being told a path.
///
/// The process facts are parameters (this module does no I/O): callers pass their environment
/// and whether they run as root (`geteuid() == 0`).
public enum SocketLocation {
  /// `$XDG_RUNTIME_DIR/rampd` when not root and `XDG_RUNTIME_DIR` is an absolute path (a user
  /// session), else `/run/rampd` (a system service).
  public static func runtimeDirectory(environment: [String: String], isRoot: Bool) -> String {
    if isUserSession(environment: environment, isRoot: isRoot), let runtime = environment["XDG_RUNTIME_DIR"] {
      return (runtime.hasSuffix("/") ? String(runtime.dropLast()) : runtime) + "/rampd"
    }
    return "/run/rampd"
  }

  /// Whether a process with this environment runs in a user's session (not root, with an
  /// absolute `XDG_RUNTIME_DIR`) rather than as a system service.
  public static func isUserSession(environment: [String: String], isRoot: Bool) -> Bool {
    !isRoot && environment["XDG_RUNTIME_DIR"]?.hasPrefix("/") == true
  }

  /// The socket a daemon with no `socket.path` listens on.
  public static func defaultPath(environment: [String: String], isRoot: Bool) -> String {
    runtimeDirectory(environment: environment, isRoot: isRoot) + "/rampd.sock"
  }

  /// The environment variable clients read for the socket path. `rampd` itself ignores it (its
  /// own is `RAMPD_SOCKET_PATH`, the `socket.path` key), so one shell can export both.
  public static let clientVariable = "RAMPD_SOCKET"
  /// `socket.path` as an environment variable of `rampd`; clients honour it too, after theirs.
  public static let daemonVariable = "RAMPD_SOCKET_PATH"

  /// The socket a client connects to: `option` (`--socket`), else `$RAMPD_SOCKET`, else
  /// `$RAMPD_SOCKET_PATH`, else the default path. Empty values count as unset.
  public static func clientPath(option: String?, environment: [String: String], isRoot: Bool) -> String {
    for candidate in [option, environment[clientVariable], environment[daemonVariable]] {
      if let candidate, !candidate.isEmpty { return candidate }
    }
    return defaultPath(environment: environment, isRoot: isRoot)
  }
}
