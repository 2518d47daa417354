import Foundation
import Synchronization

/// The thread that closes a lost device and opens the configured one again, with backoff, off
/// the render thread (opening a device allocates and may block); it also frees what the render
/// thread retired. It shares nothing with the render thread but `link`.
struct DeviceRecovery: Sendable {
  let link: RenderLink
  let configuration: OutputConfiguration
  let output: AlsaPCMOutput.Negotiated
  /// Seconds between reopen attempts: doubling from the first to the last.
  let recoveryBackoff: (first: Double, last: Double)

  /// The recovery thread's body, until `running` goes false.
  /// Closes dead devices and opens new ones, off the render thread: opening a device allocates
  /// and may block.
  func run() {
    nameThisThread("rampd-recovery")
    defer { link.recoveryFinished.store(true, ordering: .releasing) }
    var wanted = false
    /// Reopening a device retired on schedule, which the render thread still counts as healthy.
    var reopening = false
    var reopenedAt = -Double.infinity
    /// Opening a device parked while idle, for a render thread that waits for it.
    var waitedFor = false
    var delay = recoveryBackoff.first
    var nextAttempt = 0.0
    while link.running.load(ordering: .acquiring) {
      // What the render thread let go of is freed here.
      link.reapRetired()
      // A lost device is given a moment before the first attempt; a retired one none.
      for (queue, retired) in [(link.deadDevices, false), (link.retiredDevices, true)] {
        guard let device = queue.pop() else { continue }
        if !retired && device.announcesFailure { _ = link.deviceFailures.push(device.failureMessage) }
        device.close()
        wanted = true
        reopening = retired
        // A device that fails again soon after it was reopened (one that opens but cannot play)
        // keeps the backoff growing rather than be reopened ten times a second.
        let soon = monotonicSeconds() - reopenedAt < 2 * recoveryBackoff.last
        delay = retired || !soon ? recoveryBackoff.first : min(delay * 2, recoveryBackoff.last)
        nextAttempt = monotonicSeconds() + (retired ? 0 : delay)
      }
      while let parked = link.parkedDevices.pop() { parked.close() }
      if link.deviceWanted.exchange(false, ordering: .acquiring) {
        wanted = true
        waitedFor = true
        delay = recoveryBackoff.first
        nextAttempt = 0
      }
      if wanted, monotonicSeconds() >= nextAttempt {
        switch openAgain() {
        case .success(let fresh):
          _ = link.freshDevices.push(fresh)
          wanted = false
          reopening = false
          reopenedAt = monotonicSeconds()
          if waitedFor {
            waitedFor = false
            link.deviceReady.ring()
          }
        case .failure(let problem):
          if reopening {
            _ = link.deviceFailures.push("reopening \(configuration.device) on schedule: \(problem)")
            reopening = false
          }
          if waitedFor {
            // The render thread goes on without it, as after a loss; this says why.
            waitedFor = false
            _ = link.deviceFailures.push("reopening \(configuration.device) after idle: \(problem)")
            link.deviceReady.ring()
          }
          delay = min(delay * 2, recoveryBackoff.last)
          nextAttempt = monotonicSeconds() + delay
        }
      }
      // Healthy, it sleeps until the render thread hands a dead device over (or shutdown);
      // reopening, until the next attempt.
      link.recoveryBell.wait(milliseconds: wanted ? pollMilliseconds(nextAttempt - monotonicSeconds()) : -1)
    }
  }

  /// The configured device, opened again at the rate and channels the render thread works in.
  func openAgain() -> Result<AlsaPCMOutput, AudioError> {
    do throws(AudioError) {
      let fresh = try AlsaPCMOutput(configuration)
      guard fresh.negotiated.rate == output.rate, fresh.negotiated.channels == output.channels else {
        fresh.close()
        return .failure(
          AudioError(
            .invalidParameter,
            "it now gives \(fresh.negotiated.rate) Hz, \(fresh.negotiated.channels) channels instead of "
              + "\(output.rate) Hz, \(output.channels)"))
      }
      return .success(fresh)
    } catch {
      return .failure(error)
    }
  }
}
