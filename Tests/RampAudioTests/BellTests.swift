import Foundation
import Synchronization
import Testing

@testable import RampAudio

/// The futex bell the render thread sleeps on: what a waiter sees of rings before, during and
/// after its wait, and what a wait costs in wake-ups.
@Suite struct BellTests {
  @Test func aRingBeforeTheWaitIsTakenByItWithoutSleeping() {
    let bell = Bell()
    bell.ring()
    bell.ring()
    let start = monotonicNanoseconds()
    #expect(bell.wait(seconds: 1))
    #expect(monotonicNanoseconds() - start < 100_000_000)
    // Two rings are one: the next wait sleeps its whole time.
    #expect(!bell.wait(seconds: 0.02))
  }

  @Test func aWaitWithoutARingLastsItsTimeAndNoLess() {
    let bell = Bell()
    for nanoseconds: Int64 in [0, 1_000, 3_000_000, 20_000_000] {
      let start = monotonicNanoseconds()
      #expect(!bell.wait(nanoseconds: nanoseconds))
      #expect(monotonicNanoseconds() - start >= nanoseconds)
    }
    let start = monotonicNanoseconds()
    #expect(!bell.wait(seconds: 0.0123))
    #expect(monotonicNanoseconds() - start >= 12_300_000)
  }

  @Test func aRingFromAnotherThreadWakesASleepingWaiterOnceAndPromptly() throws {
    let bell = Bell()
    let woken = Atomic<Int>(0)
    let waiterID = Atomic<Int32>(0)
    let thread = Thread {
      waiterID.store(currentThreadID(), ordering: .releasing)
      for _ in 0..<3 where bell.wait(seconds: 10) { woken.add(1, ordering: .relaxed) }
    }
    thread.start()
    var id: Int32 = 0
    while id == 0 {
      usleep(1_000)
      id = waiterID.load(ordering: .acquiring)
    }
    for round in 1...3 {
      // Asleep before the ring: its wake-ups stand still.
      usleep(50_000)
      let before = try timesWoken(id)
      usleep(50_000)
      #expect(try timesWoken(id) == before)
      let rung = monotonicNanoseconds()
      bell.ring()
      while woken.load(ordering: .relaxed) < round && monotonicNanoseconds() - rung < 2_000_000_000 { usleep(200) }
      #expect(woken.load(ordering: .relaxed) == round)
      #expect(monotonicNanoseconds() - rung < 1_000_000_000)
    }
  }
}
