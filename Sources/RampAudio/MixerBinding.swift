import CALSA
import RampEngine

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// A hardware (or plugin) mixer element driven by the engine property `mixers.<name>.volume`.
public struct MixerBindingConfiguration: Sendable, Equatable {
  /// The binding's name: the engine key path is `mixers.<name>.volume`.
  public var name: String
  /// ALSA control name (`default`, `hw:0`, a `ctl.<name>` from the ALSA configuration, …).
  public var card: String
  /// Simple mixer element name (`Master`, `PCM`, …), as `amixer scontrols` lists it.
  public var element: String
  /// Simple mixer element index (`'Master',1` has index 1).
  public var index: Int
  /// How often the element is written while the property ramps, in Hz.
  public var controlRate: Double
  /// When the element has a dB range: amplitudes at or below this many dB (and 0) map to the
  /// element's minimum raw value (mute, if the element's minimum is a mute step).
  public var minimumDecibels: Double

  public init(
    name: String, card: String, element: String, index: Int = 0, controlRate: Double = 100,
    minimumDecibels: Double = -60
  ) {
    self.name = name
    self.card = card
    self.element = element
    self.index = index
    self.controlRate = controlRate
    self.minimumDecibels = minimumDecibels
  }

  /// The engine key path this binding follows.
  public var keyPath: String { "mixers.\(name).volume" }

  /// Checks values. Every message starts with the configuration key it concerns
  /// (`mixers.<name>.element: …`).
  public func validate() throws(AudioError) {
    let section = "mixers.\(name)"
    func invalid(_ field: String, _ problem: String) -> AudioError {
      AudioError(.invalidParameter, section: section, field: field, problem)
    }
    if !KeyPath.isName(name) {
      throw invalid("name", "'\(name)' must be letters, digits, '_' and '-' (it is a key path component)")
    }
    if card.isEmpty {
      throw invalid("card", "must not be empty")
    }
    if element.isEmpty {
      throw invalid("element", "must not be empty")
    }
    if index < 0 || index > Int(UInt32.max) {
      throw invalid("index", "\(index) is not a valid element index")
    }
    if !controlRate.isFinite || !(1...1000).contains(controlRate) {
      throw invalid("rate", "\(controlRate) Hz is outside 1...1000 Hz")
    }
    if !minimumDecibels.isFinite || !(-200..<0).contains(minimumDecibels) {
      throw invalid("minimum-db", "\(minimumDecibels) dB is outside -200 dB..<0 dB")
    }
  }
}

/// Writes an engine volume (a linear amplitude in [0, 1]) to an ALSA simple mixer element's
/// playback volume.
///
/// Owned by one non-real-time thread: not `Sendable`, no locks. Every write is a syscall (or a
/// plugin call), so never use it on the render thread.
///
/// **Mapping.** When the element reports a dB range, the amplitude becomes
/// 20·log10(volume) dB and that is converted to the raw value with the **nearest** step
/// (`snd_mixer_selem_ask_playback_dB_vol` with `dir = 0`): the error is at most half a step either
/// way, and a ramp up passes through the same steps as the ramp down. Volume 0, and any volume at
/// or below `minimumDecibels`, is the element's minimum raw value (mute, if the element has a mute
/// step there); a volume above `minimumDecibels` never lands on a mute step. Without dB
/// information the mapping is linear over the raw range, rounded to the nearest step.
///
/// A write is skipped when the element already holds the raw value (as the mixer last saw it,
/// after handling pending change events), so ramping slowly does not flood the control.
public final class AlsaMixerBinding {
  public let configuration: MixerBindingConfiguration
  /// The element's raw playback volume range.
  public let rawRange: ClosedRange<Int>
  /// The element's dB range, nil when it has no dB information (linear mapping). When the
  /// minimum raw value is a mute step, the lower bound is the dB of the step above it.
  public let decibelRange: ClosedRange<Double>?
  /// Whether the minimum raw value is a mute step (dB range reported down to -inf).
  public let minimumIsMute: Bool
  /// Element writes performed (skipped ones not counted).
  public private(set) var writes = 0

  private var mixer: OpaquePointer?
  private let elem: OpaquePointer

  /// Opens the card's mixer and finds the element. Errors name the card and the element; an
  /// unknown element's error lists the elements the card has.
  public init(_ configuration: MixerBindingConfiguration) throws(AudioError) {
    try configuration.validate()
    self.configuration = configuration
    let prefix = "mixers.\(configuration.name)"
    let card = configuration.card

    var handle: OpaquePointer?
    var err = snd_mixer_open(&handle, 0)
    guard err >= 0, let mixer = handle else {
      throw AudioError(.device, "\(prefix).card: cannot open a mixer: \(mixerAlsaError(err))")
    }
    var ownsMixer = true
    defer { if ownsMixer { snd_mixer_close(mixer) } }

    err = snd_mixer_attach(mixer, card)
    if err < 0 {
      throw AudioError(.device, "\(prefix).card: cannot open ALSA control '\(card)': \(mixerAlsaError(err))")
    }
    err = snd_mixer_selem_register(mixer, nil, nil)
    if err < 0 {
      throw AudioError(
        .device, "\(prefix).card: cannot register simple elements on '\(card)': \(mixerAlsaError(err))")
    }
    err = snd_mixer_load(mixer)
    if err < 0 {
      throw AudioError(.device, "\(prefix).card: cannot load the mixer of '\(card)': \(mixerAlsaError(err))")
    }

    var sidOptional: OpaquePointer?
    guard snd_mixer_selem_id_malloc(&sidOptional) >= 0, let sid = sidOptional else {
      throw AudioError(.device, "\(prefix).element: out of memory")
    }
    defer { snd_mixer_selem_id_free(sid) }
    snd_mixer_selem_id_set_name(sid, configuration.element)
    snd_mixer_selem_id_set_index(sid, UInt32(configuration.index))
    let wanted = Self.describe(configuration.element, configuration.index)
    guard let elem = snd_mixer_find_selem(mixer, sid) else {
      let existing = Self.elementNames(mixer)
      let list = existing.isEmpty ? "none" : existing.joined(separator: ", ")
      throw AudioError(
        .invalidParameter,
        "\(prefix).element: no simple mixer element \(wanted) on card '\(card)'; elements: \(list)")
    }
    guard snd_mixer_selem_has_playback_volume(elem) != 0 else {
      throw AudioError(
        .invalidParameter, "\(prefix).element: \(wanted) on card '\(card)' has no playback volume")
    }

    var low = 0
    var high = 0
    err = snd_mixer_selem_get_playback_volume_range(elem, &low, &high)
    guard err >= 0, low < high else {
      throw AudioError(
        .device,
        "\(prefix).element: \(wanted) on card '\(card)' has no usable volume range"
          + (err < 0 ? ": \(mixerAlsaError(err))" : " (\(low)...\(high))"))
    }
    rawRange = low...high

    var dbLow = 0
    var dbHigh = 0
    if snd_mixer_selem_get_playback_dB_range(elem, &dbLow, &dbHigh) >= 0, dbLow < dbHigh {
      var audibleLow = dbLow
      minimumIsMute = dbLow <= Int(SND_CTL_TLV_DB_GAIN_MUTE)
      if minimumIsMute {
        var step = 0
        audibleLow = snd_mixer_selem_ask_playback_vol_dB(elem, low + 1, &step) >= 0 ? step : dbHigh
      }
      decibelRange = Double(audibleLow) / 100...Double(dbHigh) / 100
    } else {
      minimumIsMute = false
      decibelRange = nil
    }

    self.mixer = mixer
    self.elem = elem
    ownsMixer = false
  }

  deinit { close() }

  /// Closes the mixer. Further `set` calls throw.
  public func close() {
    if let mixer {
      snd_mixer_close(mixer)
      self.mixer = nil
    }
  }

  /// The raw element value `volume` maps to (see the class documentation). Does not write.
  public func rawValue(for volume: Double) -> Int {
    let volume = volume.isNaN ? 0 : max(volume, 0)
    guard decibelRange != nil else {
      let fraction = min(volume, 1)
      let span = Double(rawRange.upperBound - rawRange.lowerBound)
      return rawRange.lowerBound + Int((fraction * span).rounded())
    }
    let decibels = 20 * log10(volume)
    if volume == 0 || decibels <= configuration.minimumDecibels { return rawRange.lowerBound }
    // Hundredths of a dB, as ALSA counts them; clamped so huge amplitudes cannot overflow.
    let centi = Int(min(decibels * 100, 1e6).rounded())
    var raw = rawRange.upperBound
    if snd_mixer_selem_ask_playback_dB_vol(elem, centi, 0, &raw) < 0 {
      raw = rawRange.upperBound
    }
    raw = min(max(raw, rawRange.lowerBound), rawRange.upperBound)
    if minimumIsMute && raw == rawRange.lowerBound { raw += 1 }
    return raw
  }

  /// The element's current raw playback volume (its first playback channel), as the mixer knows it
  /// after handling pending change events.
  public func currentRawValue() throws(AudioError) -> Int {
    let mixer = try openMixer()
    _ = snd_mixer_handle_events(mixer)
    var value = 0
    let err = snd_mixer_selem_get_playback_volume(elem, firstChannel, &value)
    if err < 0 {
      throw AudioError(.device, "\(elementDescription): cannot read the volume: \(mixerAlsaError(err))")
    }
    return value
  }

  /// Sets the element to `volume` (a linear amplitude; values outside [0, 1] are clamped by the
  /// mapping). Skips the write when every playback channel already holds the raw value.
  public func set(volume: Double) throws(AudioError) {
    let mixer = try openMixer()
    let raw = rawValue(for: volume)
    // Pick up changes made by others (mixer applications) so the comparison below is current.
    // Controls without change events (some plugins) answer with an error: nothing to handle.
    _ = snd_mixer_handle_events(mixer)
    if holdsEverywhere(raw) { return }
    let err = snd_mixer_selem_set_playback_volume_all(elem, raw)
    if err < 0 {
      throw AudioError(.device, "\(elementDescription): cannot set the volume to \(raw): \(mixerAlsaError(err))")
    }
    writes += 1
  }

  /// Samples the engine's presentation value of `keyPath` (default: the configuration's
  /// `mixers.<name>.volume`) at `sample` and writes it with `set(volume:)`. The caller schedules it
  /// every `sampleInterval(sampleRate:)` samples of engine time, on a thread that may read the
  /// engine (never the render thread).
  public func update(engine: AnimationEngine, keyPath: String? = nil, atSample sample: Int64) throws {
    let value = try engine.presentation(keyPath ?? configuration.keyPath, at: sample)
    try set(volume: value)
  }

  /// Engine samples between two updates at `controlRate` (at least 1).
  public func sampleInterval(sampleRate: Double) -> Int64 {
    max(1, Int64((sampleRate / configuration.controlRate).rounded()))
  }

  // MARK: Private

  private var elementDescription: String {
    "mixers.\(configuration.name).element: \(Self.describe(configuration.element, configuration.index)) "
      + "on card '\(configuration.card)'"
  }

  private var firstChannel: snd_mixer_selem_channel_id_t {
    for channel in 0...SND_MIXER_SCHN_LAST.rawValue {
      let id = snd_mixer_selem_channel_id_t(rawValue: channel)
      if snd_mixer_selem_has_playback_channel(elem, id) != 0 { return id }
    }
    return SND_MIXER_SCHN_MONO
  }

  private func holdsEverywhere(_ raw: Int) -> Bool {
    var any = false
    for channel in 0...SND_MIXER_SCHN_LAST.rawValue {
      let id = snd_mixer_selem_channel_id_t(rawValue: channel)
      guard snd_mixer_selem_has_playback_channel(elem, id) != 0 else { continue }
      var value = 0
      guard snd_mixer_selem_get_playback_volume(elem, id, &value) >= 0, value == raw else { return false }
      any = true
    }
    return any
  }

  private func openMixer() throws(AudioError) -> OpaquePointer {
    guard let mixer else {
      throw AudioError(.device, "\(elementDescription): the mixer binding is closed")
    }
    return mixer
  }

  private static func describe(_ name: String, _ index: Int) -> String {
    index == 0 ? "'\(name)'" : "'\(name)',\(index)"
  }

  private static func elementNames(_ mixer: OpaquePointer) -> [String] {
    var names: [String] = []
    var elem = snd_mixer_first_elem(mixer)
    while let current = elem {
      if let name = snd_mixer_selem_get_name(current) {
        names.append(describe(String(cString: name), Int(snd_mixer_selem_get_index(current))))
      }
      elem = snd_mixer_elem_next(current)
    }
    return names
  }
}

private func mixerAlsaError(_ code: Int32) -> String {
  String(cString: snd_strerror(code))
}
