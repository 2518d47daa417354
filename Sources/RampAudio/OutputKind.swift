import CALSA

/// What an output is: an ALSA output's, told from its PCM chain (``OutputChain``), decides its
/// pacing, whether it may rewind and whether it may stop while idle (which it says in its
/// ``OutputCapabilities``).
public enum OutputKind: String, CaseIterable, Sendable {
  /// A sound card: the chain ends in a kernel `hw` PCM (`hw`, `plughw`, a chain of plugins over
  /// one) and mixes in no `dmix`.
  case hardware
  /// ALSA's `dmix` anywhere in the chain (the `default` of a card without a sound server): what
  /// it holds is mixed with other clients' audio.
  case dmix
  /// PipeWire's ALSA plugin (`pipewire`).
  case pipewire
  /// PulseAudio's ALSA plugin (`pulse`), also served by pipewire-pulse.
  case pulse
  /// ALSA's `file` plugin anywhere in the chain: what it passes on is written to its file.
  case file
  /// The chain ends in ALSA's `null`, which takes samples as fast as they come and keeps none.
  case null
  /// Anything else: another plugin (an `ioplug` of a third party, `multi`, …).
  case other
  /// Not a device: the sound file of an offline render (``SinkOutput``), on a virtual clock.
  case render
  /// rampd's own PipeWire client (``PipeWireOutput``): a `pw_stream` that asks for each quantum.
  case pipewireNative = "pipewire-native"
}

/// The PCM chain of an output: the types of the configured PCM and of its slaves, from ALSA's
/// configuration, and the card it ends in, from the opened PCM.
public struct OutputChain: Sendable, Equatable {
  /// The PCM types from the configured PCM to its last slave, as the configuration names them
  /// (`["plug", "file", "null"]`; an external plugin by its own type, such as `pipewire`).
  public let types: [String]
  /// The sound card the chain ends in (`snd_pcm_info`, which a plugin answers for its slave and a
  /// `dmix` for the card it mixes into); nil when it ends in none, or before the PCM is open.
  public let card: Int?
  public let kind: OutputKind

  public init(types: [String], card: Int? = nil) {
    self.types = types
    self.card = card
    endsInNull = types.last == "null"
    swallowsSilently = endsInNull && !types.contains("file")
    kind =
      if types.contains("file") {
        .file
      } else if types.contains("dmix") {
        .dmix
      } else {
        switch types.last {
        case "null": .null
        case "hw": .hardware
        case "pipewire": .pipewire
        case "pulse": .pulse
        default: .other
        }
      }
  }

  /// Swallows samples as fast as they come, blocking never (`null`, under a `file` plugin or any
  /// other): a writer must keep time by the clock.
  public let endsInNull: Bool

  /// `.clock` on a chain that ends in `null`, `.device` on any other.
  public var automaticPacing: OutputConfiguration.Pacing { endsInNull ? .clock : .device }

  /// Ends in `null` and writes no file: nothing it takes is kept or checked, so a clock-paced
  /// writer may stop while idle. (A `file` plugin's recording is the time line of what was played,
  /// every sample in order; another sink may fail on a write, which is how a lost device is
  /// noticed.) Stored: the render thread asks at every block.
  public let swallowsSilently: Bool

  /// Why this chain refuses `rewind`, when it does: `on` through an audio server's plugin
  /// (`pipewire`, `pulse`). The server takes the plugin's ring a quantum at a time, so a change
  /// rewound into it is heard a quantum or two later, not within the margin, and with rewinds its
  /// sink played silence more often when rampd was late, which rampd did not always count as an
  /// underrun (docs/BENCHMARKS.md, "Heard").
  public func refusal(of rewind: OutputConfiguration.Rewind) -> AudioError? {
    guard rewind == .on, kind == .pipewire || kind == .pulse else { return nil }
    return AudioError(
      .invalidParameter, section: "output", field: "rewind",
      "\"on\" is refused on a device of kind \(kind.rawValue) (an audio server's ALSA plugin): the server"
        + " takes what rampd writes a quantum at a time, so a rewind is heard a quantum or two later rather than"
        + " within the margin, and its sink plays silence more often with rewinds; use \"auto\" or \"off\" (a"
        + " change is heard after the buffer)")
  }

  /// Whether the chain rewinds under `rewind`: never through ALSA's `file` plugin (what it has
  /// passed on to its file stays there), `null` (it plays nothing in real time) or `dmix` (other
  /// clients' audio is mixed in what it holds); with `auto`, only on a sound card, which plays from
  /// its ring as it goes (an ALSA plugin that takes what is written at once, such as `pulse`, would
  /// play what was rewound); with `on`, on any other chain too (an audio server's plugin refuses
  /// `on`: ``refusal(of:)``).
  public func rewinds(under rewind: OutputConfiguration.Rewind) -> Bool {
    guard kind != .file, kind != .dmix, !endsInNull else { return false }
    switch rewind {
    case .off: return false
    case .on: return true
    case .auto: return kind == .hardware
    }
  }
}

extension OutputChain {
  /// The chain of the opened `pcm`, configured as `name`: its types from the configuration ALSA
  /// opened it with; the type of `pcm` itself where the configuration does not say (a name that is
  /// not a configured PCM).
  init(opened pcm: OpaquePointer, name: String) {
    var types: [String] = []
    var top: OpaquePointer?
    if snd_config_update_ref(&top) >= 0, let top {
      types = Self.types(of: name, in: top)
      snd_config_unref(top)
    }
    if types.isEmpty, let type = snd_pcm_type_name(snd_pcm_type(pcm)) {
      types = [String(cString: type).lowercased()]
    }
    var card: Int?
    var infoOptional: OpaquePointer?
    if snd_pcm_info_malloc(&infoOptional) >= 0, let info = infoOptional {
      if snd_pcm_info(pcm, info) >= 0, snd_pcm_info_get_card(info) >= 0 {
        card = Int(snd_pcm_info_get_card(info))
      }
      snd_pcm_info_free(info)
    }
    self.init(types: types, card: card)
  }

  /// The types of PCM `name` and of its slaves in ALSA's configuration as it stands.
  static func types(ofConfigured name: String) -> [String] {
    var top: OpaquePointer?
    guard snd_config_update_ref(&top) >= 0, let top else { return [] }
    defer { snd_config_unref(top) }
    return types(of: name, in: top)
  }

  /// The types of PCM `name` and of its slaves, as configured in `root`, followed as
  /// `snd_pcm_open` does: a name (with its arguments, `plug:null`) through its `pcm` definition,
  /// `slave` as a compound or a `pcm_slave` name, its `pcm` a name or a compound of its own, and
  /// `asym`'s `playback`. Empty when `name` has no definition; a slave that has none ends the list.
  static func types(of name: String, in root: OpaquePointer) -> [String] {
    var types: [String] = []
    follow(name: name, in: root, into: &types)
    return types
  }

  /// As many as alsa-lib follows from one PCM to the next before it gives up on a loop.
  private static let maximumHops = 64

  private static func follow(name: String, in root: OpaquePointer, into types: inout [String]) {
    guard types.count < maximumHops else { return }
    var definition: OpaquePointer?
    guard snd_config_search_definition(root, "pcm", name, &definition) >= 0, let definition else { return }
    defer { snd_config_delete(definition) }
    follow(node: definition, in: root, into: &types)
  }

  /// `node`: a PCM's name (a string) or its definition (a compound).
  private static func follow(node: OpaquePointer, in root: OpaquePointer, into types: inout [String]) {
    guard types.count < maximumHops else { return }
    if let name = string(node) {
      follow(name: name, in: root, into: &types)
      return
    }
    var typeNode: OpaquePointer?
    guard snd_config_search(node, "type", &typeNode) >= 0, let typeNode, let type = string(typeNode) else { return }
    types.append(type)
    var slaveNode: OpaquePointer?
    if snd_config_search(node, "slave", &slaveNode) >= 0, let slaveNode {
      var slave = slaveNode
      var owned: OpaquePointer?
      if let slaveName = string(slaveNode) {
        guard snd_config_search_definition(root, "pcm_slave", slaveName, &owned) >= 0, let owned else { return }
        slave = owned
      }
      defer { if let owned { snd_config_delete(owned) } }
      var pcmNode: OpaquePointer?
      if snd_config_search(slave, "pcm", &pcmNode) >= 0, let pcmNode {
        follow(node: pcmNode, in: root, into: &types)
      }
    } else if type == "asym" {
      var playback: OpaquePointer?
      if snd_config_search(node, "playback.pcm", &playback) >= 0, let playback {
        follow(node: playback, in: root, into: &types)
      }
    }
  }

  private static func string(_ node: OpaquePointer) -> String? {
    var value: UnsafePointer<CChar>?
    guard snd_config_get_string(node, &value) >= 0, let value else { return nil }
    return String(cString: value)
  }
}
