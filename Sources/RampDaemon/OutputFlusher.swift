import NIOCore

/// Sends the connections' output once per turn of the event loop, after the levels journal has
/// the changes their replies acknowledge (PROTOCOL.md: an acknowledged value survives rampd being
/// killed). The replies a turn writes, to one connection or many, need one journal write between
/// them, not one each; and a connection's replies and events leave in one send.
///
/// The control loop's: the server has one loop, and every connection writes on it.
final class OutputFlusher: Sendable {
  private let controller: Controller
  /// The connections with output written and not yet sent; `spare` is the other list, swapped in
  /// while these are sent (so the lists are not allocated each turn).
  private struct Lists {
    var due: [Session] = []
    var spare: [Session] = []
  }
  private let lists: NIOLoopBoundBox<Lists>

  init(controller: Controller) {
    self.controller = controller
    lists = .makeBoxSendingValue(Lists(), eventLoop: controller.control.eventLoop)
  }

  /// Sends `session`'s output once the event loop has handled what it read in this turn. From the
  /// loop (a task it runs next: after the reads of this turn, before it waits again).
  func sendLater(_ session: Session) {
    let first = lists.withValue { lists in
      lists.due.append(session)
      return lists.due.count == 1
    }
    guard first else { return }
    session.eventLoop.execute { self.sendAll() }
  }

  private func sendAll() {
    controller.persistence?.writeJournal()
    // Taken out of the box while they are sent: a send may write again (and come back here).
    var sending = lists.withValue { lists in
      // What was due is sent from here and comes back as the spare; `due` takes the spare's
      // (empty) storage, each list held once so neither is copied on its next append.
      let sending = lists.due
      lists.due = lists.spare
      lists.spare = []
      return sending
    }
    for session in sending { session.sendWritten() }
    sending.removeAll(keepingCapacity: true)
    lists.value.spare = sending
  }
}
