import RampEngine
import Testing

@testable import RampAudio

/// The sidechain's detectors, frame by frame, against what PROTOCOL.md documents.
@Suite struct LevelDetectorTests {
  /// Feeds `frames` stereo frames of `level` on both channels, one at a time; returns the frame
  /// (counted from 1) at which the detector's state first became `active`, if it did.
  @discardableResult
  func feed(_ detector: LevelDetector, level: Float, frames: Int, until active: Bool? = nil) -> Int? {
    let frame: [Float] = [level, level]
    for index in 1...frames {
      frame.withUnsafeBufferPointer { detector.process($0.baseAddress!, frames: 1, channels: 2) }
      if let active, detector.active == active { return index }
    }
    return nil
  }

  /// Peak: on at the first frame at the threshold, no delay; off once no frame has reached
  /// threshold − hysteresis for the window.
  @Test func peakFiresAtOnceAndEndsAfterAWindowOfQuiet() {
    let detector = LevelDetector(
      DuckRule.Sidechain(threshold: -6, detector: .peak, window: 0.01, hysteresis: 6), sampleRate: 48_000)
    #expect(feed(detector, level: 0.4, frames: 1_000, until: true) == nil, "below the threshold")
    #expect(feed(detector, level: 0.6, frames: 1, until: true) == 1)
    // Between the two thresholds it stays on, however long.
    #expect(feed(detector, level: 0.3, frames: 5_000, until: false) == nil)
    // Below the lower one: off after exactly the window, 480 frames.
    #expect(feed(detector, level: 0.2, frames: 1_000, until: false) == 480)
  }

  /// RMS over the window: a steady level r above the threshold T after silence is detected after
  /// window × (T / r)²; it ends once the mean square falls below threshold − hysteresis.
  @Test func rmsDetectsASteadyLevelAfterTheDocumentedDelay() {
    let detector = LevelDetector(
      DuckRule.Sidechain(threshold: -20, detector: .rms, window: 0.05, hysteresis: 6), sampleRate: 48_000)
    #expect(feed(detector, level: 0.05, frames: 10_000, until: true) == nil, "below the threshold")
    // 2400 frames × (0.1 / 0.25)² = 384, after the 2400 frames of 0.05 have left the window.
    let quiet = LevelDetector(
      DuckRule.Sidechain(threshold: -20, detector: .rms, window: 0.05, hysteresis: 6), sampleRate: 48_000)
    let on = feed(quiet, level: 0.25, frames: 2_400, until: true) ?? 0
    #expect(on >= 384 && on <= 385, "on after \(on) frames")
    _ = feed(quiet, level: 0.25, frames: 10_000)
    // Off below −26 dB (mean square 0.00251): when fewer than 97 loud frames are left in the window.
    let off = feed(quiet, level: 0, frames: 2_400, until: false) ?? 0
    #expect(off >= 2_303 && off <= 2_305, "off after \(off) frames")
  }
}
