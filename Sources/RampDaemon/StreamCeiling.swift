import Synchronization

/// The most streams the render thread may hold: the highest `limits.streams` any `play` was
/// prepared under since rampd started (a `play` commits only below its own limit). A transport
/// acting on every stream reserves a ramp for each of them, so a reload that lowers the limit
/// below what already plays still leaves the render thread nothing to allocate.
final class StreamCeiling: Sendable {
  private let highest = Atomic<Int>(0)

  /// Records the limit a `play` is prepared under.
  func admit(limit: Int) {
    _ = highest.max(limit, ordering: .relaxed)
  }

  /// How many streams a transport prepared now may find: at least `limit`, the one in force.
  func capacity(limit: Int) -> Int {
    max(limit, highest.load(ordering: .relaxed))
  }
}
