import NIOCore

/// The `observe` rates in use over every connection, held against `[limits] observe-budget`: each
/// observed key path costs the daemon a timer wake-up per period, whoever asked for it. The
/// control loop's: observations start and stop there.
final class ObserveBudget: Sendable {
  private let used: NIOLoopBoundBox<Double>

  init(control: ControlLoop) {
    used = .makeBoxSendingValue(0, eventLoop: control.eventLoop)
  }

  /// Takes `rate` Hz if the budget `limit` allows it once `replacing` Hz (an observation this one
  /// replaces, released separately) is given back; otherwise returns the rate that would be in use.
  func take(_ rate: Double, replacing: Double, limit: Double) -> Double? {
    let total = used.value - replacing + rate
    guard total <= limit else { return total }
    used.value += rate
    return nil
  }

  func release(_ rate: Double) {
    used.value = max(used.value - rate, 0)
  }
}
