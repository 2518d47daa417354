import RampAudio
import RampEngine
import RampProtocol

/// A command made ready on a control thread (validated, files opened), to be applied on the
/// render thread. `check` looks at the render thread's state without changing it, so a batch can
/// refuse everything before applying anything; `apply` makes the change and says what happened.
struct Operation: Sendable {
  let check: @Sendable (RenderState) -> ProtocolError?
  let apply: @Sendable (RenderState, DaemonTicket) throws(ProtocolError) -> JSONValue
  /// The result, when it is known before the render thread applies the change because nothing
  /// there can make it fail (an instant `set` of master.gain): the reply need not wait for it.
  let foregoneResult: JSONValue?

  init(
    check: @escaping @Sendable (RenderState) -> ProtocolError? = { _ in nil },
    foregoneResult: JSONValue? = nil,
    apply: @escaping @Sendable (RenderState, DaemonTicket) throws(ProtocolError) -> JSONValue
  ) {
    self.check = check
    self.apply = apply
    self.foregoneResult = foregoneResult
  }
}

/// What one command (or batch) hands back from the render thread: its reply, the events it caused,
/// and what the event thread must do next (register a waiter).
final class DaemonTicket: CommandTicket, @unchecked Sendable {
  var result: Result<JSONValue, ProtocolError> = .failure(ProtocolError(.internalError, "the command did not run"))
  var events: [Event] = []
  /// The animations a `wait` must see end (set on the render thread, read on the event thread).
  var awaited: [UInt64]?
  /// Model values of the persisted key paths after the command, when it may have changed them.
  var models: [String: Double] = [:]
  /// A ramp's key path value just before the command applied (for a saved schedule).
  var rampFrom: Double?
  let deliver: @Sendable (DaemonTicket) -> Void

  init(deliver: @escaping @Sendable (DaemonTicket) -> Void) {
    self.deliver = deliver
  }
}

/// Key paths the daemon keeps for itself: the transport ramps that start, pause and stop streams.
enum InternalKeyPath {
  static func isInternal(_ keyPath: String) -> Bool { keyPath.hasSuffix(".transport") }

  /// Gains are bounded by `gain.max`; other properties by their own range.
  static func isGain(_ keyPath: String) -> Bool { keyPath == "master.gain" || keyPath.hasSuffix(".gain") }

  /// The stream a `streams.<id>.…` key path belongs to.
  static func stream(of keyPath: String) -> String? {
    let parts = keyPath.split(separator: ".")
    guard parts.count == 3, parts[0] == "streams" else { return nil }
    return String(parts[1])
  }
}
