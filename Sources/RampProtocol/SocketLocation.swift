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

  /// The environment variable that names the socket, for `rampd` (which listens there) and its
  /// clients (which connect there): `export RAMPD_SOCKET=…` in one shell starts and reaches the
  /// same daemon.
  public static let variable = "RAMPD_SOCKET"
  /// `socket.path` as an environment variable: an alias of `RAMPD_SOCKET`, which wins when both
  /// are set.
  public static let aliasVariable = "RAMPD_SOCKET_PATH"

  /// The socket the environment names, with the variable that named it: `$RAMPD_SOCKET`, else
  /// `$RAMPD_SOCKET_PATH`. Empty values count as unset.
  public static func environmentPath(_ environment: [String: String]) -> (variable: String, path: String)? {
    for name in [variable, aliasVariable] {
      if let value = environment[name], !value.isEmpty { return (name, value) }
    }
    return nil
  }

  /// The socket a client connects to: `option` (`--socket`), else the environment's
  /// (`environmentPath`), else the default path.
  public static func clientPath(option: String?, environment: [String: String], isRoot: Bool) -> String {
    if let option, !option.isEmpty { return option }
    return environmentPath(environment)?.path ?? defaultPath(environment: environment, isRoot: isRoot)
  }

  /// How to start the daemon that should be listening on `path`: the system service for root or
  /// the system socket, the user's service for a socket in the user's runtime directory, else
  /// `rampd` itself with that socket.
  public static func startHint(path: String, environment: [String: String], isRoot: Bool) -> String {
    let system = "/run/rampd/rampd.sock"
    if path == system || (isRoot && path == defaultPath(environment: environment, isRoot: true)) {
      return "`systemctl start rampd` (or run `rampd` as root)"
    }
    if isUserSession(environment: environment, isRoot: isRoot),
      path == defaultPath(environment: environment, isRoot: isRoot)
    {
      return "`systemctl --user start rampd` (or run `rampd`)"
    }
    return "`\(variable)=\(path) rampd`"
  }
}
