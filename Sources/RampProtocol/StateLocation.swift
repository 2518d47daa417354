/// Where a rampd program keeps its state by default: rampd its state file, rampd-web its token.
/// One rule for both, so that a system unit and a user unit of either land where systemd's
/// `StateDirectory=` puts them, and a program started by hand finds the same place.
///
/// The process facts are parameters (this module does no I/O), as in `SocketLocation`.
public enum StateLocation {
  /// systemd's `StateDirectory=` (`$STATE_DIRECTORY`, the first when several are given), else
  /// `$XDG_STATE_HOME/NAME` (then `$HOME/.local/state/NAME`) when not root, else `/var/lib/NAME`.
  public static func directory(name: String, environment: [String: String], isRoot: Bool) -> String {
    if let directory = environment["STATE_DIRECTORY"]?.split(separator: ":").first, directory.hasPrefix("/") {
      return String(directory)
    }
    if !isRoot {
      if let state = environment["XDG_STATE_HOME"], state.hasPrefix("/") { return state + "/" + name }
      if let home = environment["HOME"], home.hasPrefix("/"), home != "/" {
        return home + "/.local/state/" + name
      }
    }
    return "/var/lib/" + name
  }
}
