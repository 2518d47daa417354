import Synchronization

/// The `observe` rates in use over every connection, held against `[limits] observe-budget`: each
/// observed key path costs the daemon a timer wake-up per period, whoever asked for it.
final class ObserveBudget: Sendable {
  private let used = Mutex<Double>(0)

  /// Takes `rate` Hz if the budget `limit` allows it once `replacing` Hz (an observation this one
  /// replaces, released separately) is given back; otherwise returns the rate that would be in use.
  func take(_ rate: Double, replacing: Double, limit: Double) -> Double? {
    used.withLock { used in
      let total = used - replacing + rate
      guard total <= limit else { return total }
      used += rate
      return nil
    }
  }

  func release(_ rate: Double) {
    used.withLock { $0 = max($0 - rate, 0) }
  }

  /// Hz in use now.
  var inUse: Double { used.withLock { $0 } }
}
