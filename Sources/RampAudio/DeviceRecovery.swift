import Glibc
import RampEngine
import RampSystem
import Synchronization

/// The thread that closes a lost device and opens the configured one again, with backoff, off
/// the render thread (opening a device allocates and may block); it also frees what the render
/// thread retired. It shares nothing with the render thread but `link`.
///
/// A configured device that did not open at start (`link.waiting`) is opened the same way, with
/// the same backoff, until it opens; meanwhile the fallback, when there is one, is reopened
/// whenever it is lost or retired on schedule, and let go of once the configured device plays.
struct DeviceRecovery: Sendable {
  let link: RenderLink
  let configuration: OutputConfiguration
  /// Played into while the configured device is waited for (the daemon's embedded output).
  var fallback: OutputConfiguration? = nil
  let output: NegotiatedOutput
  /// Opens the configured device and the fallback.
  let open: OutputOpener
  /// Seconds between reopen attempts: doubling from the first to the last.
  let recoveryBackoff: (first: Double, last: Double)
  /// Why the configured device did not open at start, when it did not.
  var startFailure: String? = nil

  /// When a device is opened again: wanted, when next, with what backoff.
  struct Attempts {
    var wanted = false
    /// Reopening a device retired on schedule, which the render thread still counts as healthy.
    var reopening = false
    var reopenedAt = -Double.infinity
    var delay: Double
    var next = 0.0

    init(first: Double) { delay = first }

    /// A device handed over: lost (a moment before the first attempt) or retired (none).
    mutating func handedOver(retired: Bool, backoff: (first: Double, last: Double)) {
      wanted = true
      reopening = retired
      // A device that fails again soon after it was reopened (one that opens but cannot play)
      // keeps the backoff growing rather than be reopened ten times a second.
      let soon = monotonicSeconds() - reopenedAt < 2 * backoff.last
      delay = retired || !soon ? backoff.first : min(delay * 2, backoff.last)
      next = monotonicSeconds() + (retired ? 0 : delay)
    }

    mutating func opened() {
      wanted = false
      reopening = false
      reopenedAt = monotonicSeconds()
    }

    mutating func failed(backoff: (first: Double, last: Double)) {
      delay = min(delay * 2, backoff.last)
      next = monotonicSeconds() + delay
    }

    /// Something that may be the device appeared: the next attempt now, and a quick backoff
    /// again (a server's socket may come a moment before it serves).
    mutating func hurry(backoff: (first: Double, last: Double)) {
      guard wanted else { return }
      delay = backoff.first
      next = monotonicSeconds()
    }

    var due: Bool { wanted && monotonicSeconds() >= next }
  }

  /// The recovery thread's body, until `running` goes false.
  /// Closes dead devices and opens new ones, off the render thread: opening a device allocates
  /// and may block.
  func run() {
    nameThisThread("rampd-recovery")
    defer { link.recoveryFinished.store(true, ordering: .releasing) }
    var configured = Attempts(first: recoveryBackoff.first)
    var spare = Attempts(first: recoveryBackoff.first)
    /// A fallback is open (at the render thread, or on its way there).
    var fallbackHeld = false
    /// Opening a device parked while idle, for a render thread that waits for it.
    var waitedFor = false
    // Waited for, the configured device is tried again as soon as something that may be it
    // appears; the timer between attempts then grows to a minute, so a wait that lasts (a
    // machine without a sound card) costs next to no wake-ups.
    var arrivals = link.waiting.load(ordering: .acquiring) ? DeviceArrivalWatch() : nil
    var handedOver = LastReferenceKeeper()
    /// How long to wait before looking again at what the render thread still holds: 10 ms after
    /// a hand-over, doubling (to a second) while nothing is let go. A pushed render lets go within
    /// microseconds; a pulled one holds the last command it ran until the next one comes.
    var keeperPoll: Int32 = 10
    if arrivals?.watches == false { arrivals = nil }
    // The render thread posts the failure as an event; asleep without a device, it is woken to.
    func reportFailure(_ message: String) {
      _ = link.deviceFailures.push(message)
      link.commandBell.ring()
    }
    func waitBackoff() -> (first: Double, last: Double) {
      arrivals == nil ? recoveryBackoff : (recoveryBackoff.first, max(recoveryBackoff.last, Self.watchedWaitCeiling))
    }
    if link.waiting.load(ordering: .acquiring) {
      configured.wanted = true
      configured.next = monotonicSeconds() + configured.delay
      fallbackHeld = fallback != nil
      report { wait in
        wait.attempts = 1
        wait.failure = startFailure ?? ""
        wait.nextAttempt = configured.next
      }
    }
    while link.running.load(ordering: .acquiring) {
      var kept = false
      // What the render thread let go of is freed here, once it no longer holds it.
      while let retired = link.retired.pop() {
        kept = true
        switch retired {
        case .object(let object): handedOver.keep(object)
        // The render thread holds a command it ran until it takes the next one.
        case .command(let command): if case .command(let prepared) = command.work { handedOver.keep(prepared) }
        }
      }
      let heldBefore = handedOver.count
      handedOver.releaseUnshared()
      let waiting = link.waiting.load(ordering: .acquiring)
      for (queue, retired) in [(link.deadDevices, false), (link.retiredDevices, true)] {
        guard let held = queue.pop() else { continue }
        let device = held.device
        handedOver.keep(device)
        kept = true
        if !retired && device.announcesFailure { reportFailure(device.failure.message) }
        if held.fallback {
          device.close()
          fallbackHeld = false
          // Once the configured device plays, a fallback is not opened again.
          if waiting { spare.handedOver(retired: retired, backoff: recoveryBackoff) }
          continue
        }
        if waiting && !retired {
          // Opened while waited for, but it failed before it played: still waited for.
          let failure = device.failure.message
          report { $0.failure = failure }
        }
        device.close()
        configured.handedOver(retired: retired, backoff: recoveryBackoff)
        if waiting { report { $0.nextAttempt = configured.next } }
        if waiting && fallback != nil && !fallbackHeld && !spare.wanted {
          spare.wanted = true
          spare.next = 0
        }
      }
      // Only the configured device is let go of while idle (a fallback is a file).
      while let parked = link.parkedDevices.pop() {
        parked.device.close()
        handedOver.keep(parked.device)
        kept = true
      }
      if link.deviceWanted.exchange(false, ordering: .acquiring) {
        configured.wanted = true
        configured.delay = recoveryBackoff.first
        configured.next = 0
        waitedFor = true
      }
      if configured.due {
        switch openAgain(configuration) {
        case .success(let fresh):
          let negotiated = fresh.negotiated
          _ = link.freshDevices.push(HeldDevice(device: fresh, fallback: false))
          configured.opened()
          if waitedFor {
            waitedFor = false
            link.deviceReady.ring()
          }
          // An idle render thread takes it at once (and lets a fallback go), also one that
          // stopped waiting for it (`reopenLimit`) and sleeps without a device.
          link.commandBell.ring()
          // The render thread lets the fallback go as it takes the configured device.
          fallbackHeld = false
          spare.wanted = false
          report { wait in
            if waiting { wait.attempts += 1 }
            wait.nextAttempt = nil
            wait.opened = negotiated
          }
        case .failure(let problem):
          if configured.reopening {
            reportFailure("reopening \(configuration.device) on schedule: \(problem)")
            configured.reopening = false
          }
          if waitedFor {
            // The render thread goes on without it, as after a loss; this says why.
            waitedFor = false
            reportFailure("reopening \(configuration.device) after idle: \(problem)")
            link.deviceReady.ring()
          }
          configured.failed(backoff: waiting ? waitBackoff() : recoveryBackoff)
          if waiting {
            let next = configured.next
            report { wait in
              wait.attempts += 1
              wait.failure = problem.message
              wait.nextAttempt = next
            }
          }
        }
      }
      if let fallback, spare.due {
        switch openAgain(fallback) {
        case .success(let fresh):
          _ = link.freshDevices.push(HeldDevice(device: fresh, fallback: true))
          link.commandBell.ring()
          spare.opened()
          fallbackHeld = true
        case .failure(let problem):
          if spare.reopening {
            reportFailure("reopening \(fallback.device) on schedule: \(problem)")
            spare.reopening = false
          }
          spare.failed(backoff: recoveryBackoff)
        }
      }
      // Healthy, it sleeps until the render thread hands a dead device over (or shutdown);
      // reopening, until the next attempt.
      let next = [configured, spare].filter(\.wanted).map(\.next).min()
      var milliseconds = next.map { pollMilliseconds($0 - monotonicSeconds()) } ?? -1
      // Anything kept or let go in this pass: soon again; else later each time.
      keeperPoll = handedOver.count != heldBefore || kept ? 10 : min(keeperPoll * 2, 1000)
      if !handedOver.isEmpty { milliseconds = milliseconds < 0 ? keeperPoll : min(milliseconds, keeperPoll) }
      if !link.waiting.load(ordering: .acquiring) { arrivals = nil }
      if var watch = arrivals {
        if link.recoveryBell.wait(milliseconds: milliseconds, orReadable: watch.descriptor),
          watch.deviceMayHaveAppeared()
        {
          configured.hurry(backoff: recoveryBackoff)
          let next = configured.next
          report { $0.nextAttempt = next }
        }
        arrivals = watch
      } else {
        link.recoveryBell.wait(milliseconds: milliseconds)
      }
    }
    // At shutdown the render thread may still hold what it handed over (a device parked while
    // it slept idle, until it wakes): what is kept here goes only once it has finished, so the
    // last reference is never the render thread's.
    while link.renderThread.load(ordering: .acquiring) != 0 && !link.finished.load(ordering: .acquiring) {
      usleep(1_000)
    }
    handedOver.releaseUnshared()
    withExtendedLifetime(handedOver) {}
  }

  /// The longest wait between attempts to open a configured device that is waited for, when
  /// its appearance is watched (`DeviceArrivalWatch`): what the watch cannot see (a card another
  /// program held, freed) is still found within it.
  static let watchedWaitCeiling = 60.0

  private func report(_ change: (inout DeviceWaitReport) -> Void) {
    link.waitReport.withLock { change(&$0) }
  }

  /// `configuration`'s device, opened again at the rate and channels the render thread works in.
  func openAgain(_ configuration: OutputConfiguration) -> Result<any AudioOutput, AudioError> {
    do throws(AudioError) {
      let fresh = try open(configuration)
      guard fresh.negotiated.rate == output.rate, fresh.negotiated.channels == output.channels else {
        fresh.close()
        return .failure(
          AudioError(
            .invalidParameter,
            "device '\(configuration.device)' opened at \(fresh.negotiated.rate) Hz, "
              + "\(fresh.negotiated.channels) channels, not the \(output.rate) Hz, \(output.channels) channels "
              + "rampd renders at since it started: refused (a restart plays at the device's rate)"))
      }
      return .success(fresh)
    } catch {
      return .failure(error)
    }
  }
}
