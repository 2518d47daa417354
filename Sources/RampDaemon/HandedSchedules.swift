import Synchronization

/// Saved schedules handed to the render thread for their sample, until it has applied them.
///
/// A schedule leaves the wall clock (`WallClockSchedules`) a second before it is due, is
/// prepared, and waits on the render thread for its sample. Taken back in any of those moments
/// (`unschedule`, or a newer command it yields to), it must neither apply later nor leave a ramp
/// that already began running on unseen: `withdraw` says which of the two it was, decided by the
/// ticket itself (`DaemonTicket.withdraw`), so there is no moment in which it is neither.
final class HandedSchedules: Sendable {
  /// Where a withdrawn schedule was.
  enum Withdrawal {
    /// It will not apply.
    case beforeApplying
    /// The render thread applied it first: what it started (a ramp) is under way.
    case afterApplying
  }

  private struct Table {
    var tickets: [UInt64: DaemonTicket] = [:]
    /// Withdrawn between leaving the wall clock and being handed on.
    var withdrawn: Set<UInt64> = []
  }

  private let table = Mutex(Table())

  /// Before the ticket of schedule `id` goes to the render thread: false when the schedule was
  /// withdrawn meanwhile, and the ticket is then not to be queued.
  func hand(_ id: UInt64, _ ticket: DaemonTicket) -> Bool {
    table.withLock { table in
      guard table.withdrawn.remove(id) == nil else { return false }
      table.tickets[id] = ticket
      return true
    }
  }

  /// Once its ticket came back (after what it did was recorded in the state file).
  func settled(_ id: UInt64) {
    table.withLock { _ = $0.tickets.removeValue(forKey: id) }
  }

  /// Takes schedule `id` back; nil when it is not handed on (it applied and settled, or it is
  /// about to be handed on, which it then will not be).
  func withdraw(_ id: UInt64) -> Withdrawal? {
    table.withLock { table in
      guard let ticket = table.tickets.removeValue(forKey: id) else {
        table.withdrawn.insert(id)
        return nil
      }
      return ticket.withdraw() ? .beforeApplying : .afterApplying
    }
  }
}
