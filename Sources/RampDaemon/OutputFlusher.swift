import NIOCore

/// Sends the connections' output once per turn of the event loop, after the levels journal has
/// the changes their replies acknowledge (PROTOCOL.md: an acknowledged value survives rampd being
/// killed). The replies a turn writes, to one connection or many, need one journal write between
/// them, not one each; and a connection's replies and events leave in one send.
///
/// Event-loop thread only: the server has one loop, and every connection writes on it.
final class OutputFlusher: @unchecked Sendable {
  private let controller: Controller
  /// The connections with output written and not yet sent; `spare` is the other list, swapped in
  /// while these are sent (so the lists are not allocated each turn).
  private var due: [Session] = []
  private var spare: [Session] = []

  init(controller: Controller) { self.controller = controller }

  /// Sends `session`'s output once the event loop has handled what it read in this turn. From the
  /// loop (a task it runs next: after the reads of this turn, before it waits again).
  func sendLater(_ session: Session) {
    due.append(session)
    guard due.count == 1 else { return }
    session.eventLoop.execute { self.sendAll() }
  }

  private func sendAll() {
    controller.persistence?.writeJournal()
    swap(&due, &spare)
    for session in spare { session.sendWritten() }
    spare.removeAll(keepingCapacity: true)
  }
}
