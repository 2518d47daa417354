/// What the render thread hands over to be freed (a lost or retired device, a stream, a finished
/// animation) is released on the recovery thread, never on the render thread. But for a moment
/// after the hand-over the render thread may still hold the object (the local it handed over,
/// until its function returns): were this thread to let go first, the render thread's release
/// would be the last one, and the object would be freed there. So the recovery thread keeps each
/// object here until it holds the last reference.
struct LastReferenceKeeper {
  private var held: [AnyObject] = []

  /// Nothing waits for the render thread to let go.
  var isEmpty: Bool { held.isEmpty }
  /// How many objects wait.
  var count: Int { held.count }

  /// Takes `object`; it is freed by a later `releaseUnshared` once no one else holds it.
  mutating func keep(_ object: AnyObject) { held.append(object) }

  /// Releases (frees) what only this keeper holds now; the rest waits for the next call.
  mutating func releaseUnshared() {
    var index = 0
    while index < held.count {
      if isKnownUniquelyReferenced(&held[index]) {
        held.swapAt(index, held.count - 1)
        held.removeLast()
      } else {
        index += 1
      }
    }
  }
}
