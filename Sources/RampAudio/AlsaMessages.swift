import CALSA
import Synchronization

/// alsa-lib's own error messages. alsa-lib prints them on standard error as it goes
/// (`ALSA lib confmisc.c:855:(parse_card) cannot find card '0'`, eight lines of them for a
/// default device on a machine without a sound card), before rampd can say in its own words what
/// failed; routed, they go where the process says instead (rampd: its log, at debug level).
public enum AlsaMessages {
  private static let sink = Mutex<(@Sendable (String) -> Void)?>(nil)

  /// Sends each message alsa-lib reports to `handler`, as one line
  /// (`confmisc.c:855:(parse_card) cannot find card '0'`), instead of printing it; nil gives them
  /// back to alsa-lib, which prints them. Call it before opening a device.
  public static func route(to handler: (@Sendable (String) -> Void)?) {
    sink.withLock { $0 = handler }
    _ = rampd_alsa_route_errors(handler == nil ? nil : deliver)
  }

  /// Drops alsa-lib's messages on the calling thread (the render thread, where putting one in
  /// words would allocate and lock). Set from this file, whose handler `route` installs: the flag
  /// is a thread-local in CALSA's header, and each object file that uses it has its own copy (a
  /// debug build compiles each Swift file apart), so one set elsewhere is not the one it reads.
  static func quietOnThisThread() { rampd_alsa_quiet_on_this_thread() }

  private static let deliver: @convention(c) (UnsafePointer<CChar>?) -> Void = { message in
    guard let message else { return }
    let text = String(cString: message)
    AlsaMessages.sink.withLock { $0 }?(text)
  }
}
