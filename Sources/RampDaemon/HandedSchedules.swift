import NIOCore

/// Saved schedules from the moment they are armed until the render thread has applied them.
///
/// A schedule waits on the wall clock (`WallClockSchedules`), leaves it a second before it is
/// due, is prepared, and waits on the render thread for its sample. Taken back at any of those
/// moments (`unschedule`, or a newer command it yields to), it must neither apply later nor leave
/// a ramp that already began running on unseen: `withdraw` says which of the two it was, decided
/// by the ticket itself (`DaemonTicket.withdraw`), so there is no moment in which it is neither.
/// The table is the control loop's.
final class HandedSchedules: Sendable {
  /// Where a withdrawn schedule was.
  enum Withdrawal {
    /// It will not apply.
    case beforeApplying
    /// The render thread applied it first: the ramp it started (on `rampKey`) is under way.
    case afterApplying(rampKey: String?)
  }

  private struct Table {
    /// Armed, and not yet handed on.
    var departing: Set<UInt64> = []
    /// Handed on, and not yet back.
    var tickets: [UInt64: DaemonTicket] = [:]
    /// Withdrawn while departing: not to be handed on.
    var withdrawn: Set<UInt64> = []
  }

  private let table: NIOLoopBoundBox<Table>

  init(control: ControlLoop) {
    table = .makeBoxSendingValue(Table(), eventLoop: control.eventLoop)
  }

  /// Schedule `id` is armed: on the wall clock, or on its way to the render thread.
  func depart(_ id: UInt64) {
    table.value.departing.insert(id)
  }

  /// Before the ticket of schedule `id` goes to the render thread: false when the schedule was
  /// withdrawn meanwhile, and the ticket is then not to be queued.
  func hand(_ id: UInt64, _ ticket: DaemonTicket) -> Bool {
    table.withValue { table in
      table.departing.remove(id)
      guard table.withdrawn.remove(id) == nil else { return false }
      table.tickets[id] = ticket
      return true
    }
  }

  /// Schedule `id` applied, was refused, or left the wall clock's keeping otherwise: forgotten.
  func settled(_ id: UInt64) {
    table.withValue { table in
      table.tickets[id] = nil
      table.departing.remove(id)
      table.withdrawn.remove(id)
    }
  }

  /// Takes schedule `id` back; nil when it is not on its way (it applied and came back).
  func withdraw(_ id: UInt64) -> Withdrawal? {
    table.withValue { table in
      if let ticket = table.tickets.removeValue(forKey: id) {
        return ticket.withdraw() ? .beforeApplying : .afterApplying(rampKey: ticket.rampKey)
      }
      guard table.departing.remove(id) != nil else { return nil }
      table.withdrawn.insert(id)
      return .beforeApplying
    }
  }
}
