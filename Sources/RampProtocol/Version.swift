import CRampVersion

/// rampd's version, one for the daemon and its tools (Sources/CRampVersion: set by the build).
public enum RampdBuild {
  public static let version = String(cString: rampd_version())
}
