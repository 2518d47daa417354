import Testing

@testable import RampAudio

/// The recovery thread frees what the render thread handed over only once the render thread no
/// longer holds it: an object still referenced elsewhere is kept, and freed by the first
/// `releaseUnshared` after the other reference goes.
@Suite struct LastReferenceKeeperTests {
  final class Handed {}

  @Test func anObjectStillHeldElsewhereIsKeptUntilItIsNot() {
    var keeper = LastReferenceKeeper()
    var renderThreadLocal: Handed? = Handed()
    weak let watched = renderThreadLocal
    keeper.keep(renderThreadLocal!)
    for _ in 0..<3 { keeper.releaseUnshared() }
    #expect(watched != nil, "freed while another reference held it")
    #expect(!keeper.isEmpty)
    renderThreadLocal = nil
    #expect(watched != nil, "the keeper's reference is the last one")
    keeper.releaseUnshared()
    #expect(watched == nil, "freed once only the keeper held it")
    #expect(keeper.isEmpty)
  }

  @Test func onlyTheUnsharedAreReleasedAmongMany() {
    var keeper = LastReferenceKeeper()
    var shared: [Handed] = []
    var watched: [Weak] = []
    for index in 0..<10 {
      let object = Handed()
      watched.append(Weak(object))
      keeper.keep(object)
      if index % 3 == 0 { shared.append(object) }
    }
    keeper.releaseUnshared()
    #expect(watched.enumerated().allSatisfy { index, weak in (weak.object != nil) == (index % 3 == 0) })
    shared.removeAll()
    keeper.releaseUnshared()
    #expect(watched.allSatisfy { $0.object == nil })
    #expect(keeper.isEmpty)
  }

  struct Weak {
    weak var object: Handed?
    init(_ object: Handed) { self.object = object }
  }
}
