import CALSA
import Foundation
import Testing

@testable import RampAudio

#if canImport(Glibc)
  import Glibc
#endif

/// The kind of each device, told from its PCM chain through ALSA's configuration: on the devices
/// that open here, and, for those that need a card (`hw`, `dmix`), on configuration trees of the
/// tests' own, through the same walk.
@Suite struct OutputKindTests {
  private static func open(_ device: String, pacing: OutputConfiguration.Pacing = .auto) throws -> AlsaPCMOutput {
    _ = AlsaTestConfig.directory
    return try AlsaPCMOutput(OutputConfiguration(device: device, pacing: pacing))
  }

  @Test func nullChainsArePacedByTheClock() throws {
    let wav = AlsaTestConfig.path("kind-file.wav")
    let raw = AlsaTestConfig.path("kind-plug-file.raw")
    defer {
      try? FileManager.default.removeItem(atPath: wav)
      try? FileManager.default.removeItem(atPath: raw)
    }
    let cases: [(device: String, types: [String], kind: OutputKind, stops: Bool)] = [
      ("null", ["null"], .null, true),
      ("plug:null", ["plug", "null"], .null, true),
      ("file:FILE=\(wav),FORMAT=wav", ["file", "null"], .file, false),
      ("plug:'file:FILE=\(raw)'", ["plug", "file", "null"], .file, false),
      ("rampd_test_auto_plug", ["plug", "file", "null"], .file, false),
      ("rampd_test_int_only", ["linear", "null"], .null, true),
      // A `pcm_slave` definition, an inline PCM and an alias: asym's playback is plug → linear → null.
      ("rampd_kind_alias", ["asym", "plug", "linear", "null"], .null, true),
    ]
    for (device, types, kind, stops) in cases {
      let output = try Self.open(device)
      #expect(output.chain.types == types, "\(device)")
      #expect(output.chain.kind == kind, "\(device)")
      #expect(output.negotiated.kind == kind, "\(device)")
      #expect(output.chain.card == nil, "\(device)")
      #expect(output.negotiated.pacing == .clock, "\(device)")
      #expect(!output.allowsRewind, "\(device)")
      #expect(output.stopsWhenIdle == stops, "\(device): a chain that writes a file is never stopped")
      output.close()
    }
    // Device pacing asked for: still a chain that cannot rewind, whatever `rewind` says.
    var configuration = OutputConfiguration(device: "null", format: .float32, pacing: .device)
    configuration.rewind = .on
    let forced = try AlsaPCMOutput(configuration)
    #expect(forced.chain.kind == .null && !forced.allowsRewind)
  }

  /// The test plugins (ioplugs of a type of their own) are `other`: paced by the device, rewound
  /// when asked for (`on`) but not by `auto`, which is for sound cards; behind a `file` plugin, `file`.
  @Test func testPluginsAreOther() throws {
    _ = try ClockedDevice.files("rampd_clocked_kind")
    for rewind in OutputConfiguration.Rewind.allCases {
      var configuration = OutputConfiguration(device: "rampd_clocked_kind", format: .float32, pacing: .auto)
      configuration.rewind = rewind
      let clocked = try AlsaPCMOutput(configuration)
      #expect(clocked.chain.types == ["rampd_clocked"])
      #expect(clocked.chain.kind == .other)
      #expect(clocked.chain.card == nil, "an ioplug answers no card")
      #expect(clocked.negotiated.pacing == .device)
      #expect(clocked.allowsRewind == (rewind == .on), "\(rewind)")
      clocked.close()

      configuration.device = "rampd_clocked_kind_file"
      let behindFile = try AlsaPCMOutput(configuration)
      #expect(behindFile.chain.types == ["file", "rampd_clocked"])
      #expect(behindFile.chain.kind == .file)
      #expect(behindFile.negotiated.pacing == .device, "it ends in a device with a clock")
      #expect(!behindFile.allowsRewind, "\(rewind)")
      behindFile.close()
    }

    let dir = AlsaTestConfig.path("kind-flaky")
    try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
    _ = try FlakyDevice.pluginPath()
    let path = "\(dir)/asound-kind.conf"
    try FlakyDevice.pcmDefinition(name: "rampd_flaky_kind", file: "\(dir)/played.raw", flag: "\(dir)/unplugged")
      .write(toFile: path, atomically: true, encoding: .utf8)
    AlsaTestConfig.append(configuration: path)
    let flaky = try Self.open("rampd_flaky_kind")
    #expect(flaky.chain.types == ["rampd_flaky"] && flaky.chain.kind == .other)
    #expect(flaky.negotiated.pacing == .device)
  }

  /// `hw` and `plughw` of ALSA's own configuration, which names them without a card present.
  @Test func cardsOfALSAsConfiguration() throws {
    _ = AlsaTestConfig.directory
    var top: OpaquePointer?
    try #require(snd_config_update_ref(&top) >= 0)
    let root = try #require(top)
    defer { snd_config_unref(root) }
    #expect(OutputChain.types(of: "hw:0,0", in: root) == ["hw"])
    #expect(OutputChain.types(of: "plughw:0", in: root) == ["plug", "hw"])
    #expect(OutputChain(types: OutputChain.types(of: "plughw:0", in: root)).kind == .hardware)
    #expect(OutputChain.types(of: "rampd_no_such_device", in: root).isEmpty)
  }

  /// Chains that need a card or a server, in a configuration tree loaded from text.
  @Test func chainsOfAConfigurationTree() throws {
    let root = try Self.load(
      """
      pcm.hw {
        @args [ CARD DEV ]
        @args.CARD { type string default "0" }
        @args.DEV { type integer default 0 }
        type hw
        card $CARD
        device $DEV
      }
      pcm.plughw {
        @args [ CARD DEV ]
        @args.CARD { type string default "0" }
        @args.DEV { type integer default 0 }
        type plug
        slave.pcm { type hw card $CARD device $DEV }
      }
      pcm_slave.card0 { pcm "hw:0,0" rate 48000 }
      pcm.mixer { type dmix ipc_key 5678 slave card0 }
      pcm.!default { type asym playback.pcm { type plug slave.pcm "mixer" } }
      pcm.softer { type softvol slave.pcm "plughw:1,2" control.name "Soft" }
      pcm.hooked { type hooks slave.pcm "softer" }
      pcm.card "hooked"
      pcm.recorded { type file slave.pcm "plughw" file "/dev/null" }
      pcm.pipewire { type pipewire }
      pcm.pulse { type pulse }
      pcm.viaPipewire { type plug slave.pcm "pipewire" }
      pcm.empty { type empty slave.pcm "pulse" }
      pcm.loopA { type plug slave.pcm "loopB" }
      pcm.loopB { type plug slave.pcm "loopA" }
      pcm.lost { type plug slave.pcm "nowhere" }
      pcm.jack { type jack playback_ports { 0 system:playback_1 } }
      """)
    defer { snd_config_delete(root) }
    let cases: [(name: String, types: [String], kind: OutputKind)] = [
      ("hw", ["hw"], .hardware),
      ("hw:1,0", ["hw"], .hardware),
      ("plughw:1", ["plug", "hw"], .hardware),
      ("card", ["hooks", "softvol", "plug", "hw"], .hardware),
      ("mixer", ["dmix", "hw"], .dmix),
      ("default", ["asym", "plug", "dmix", "hw"], .dmix),
      ("recorded", ["file", "plug", "hw"], .file),
      ("pipewire", ["pipewire"], .pipewire),
      ("viaPipewire", ["plug", "pipewire"], .pipewire),
      ("pulse", ["pulse"], .pulse),
      ("empty", ["empty", "pulse"], .pulse),
      ("lost", ["plug"], .other),
      ("jack", ["jack"], .other),
    ]
    for (name, types, kind) in cases {
      let chain = OutputChain(types: OutputChain.types(of: name, in: root))
      #expect(chain.types == types, "\(name)")
      #expect(chain.kind == kind, "\(name)")
      #expect(chain.automaticPacing == .device, "\(name)")
      #expect(chain.rewinds(under: .auto) == (kind == .hardware), "\(name): auto rewinds on a sound card")
      #expect(chain.rewinds(under: .on) == (kind != .dmix && kind != .file), "\(name)")
      #expect(!chain.rewinds(under: .off), "\(name)")
      let server = kind == .pipewire || kind == .pulse
      #expect(chain.refusal(of: .on)?.field == (server ? "rewind" : nil), "\(name): `on` refused through a server")
      #expect(chain.refusal(of: .auto) == nil && chain.refusal(of: .off) == nil, "\(name)")
      #expect(!chain.swallowsSilently, "\(name)")
    }
    // A loop ends where alsa-lib would give up on it, and names no kind.
    let loop = OutputChain.types(of: "loopA", in: root)
    #expect(loop.count == 64 && Set(loop) == ["plug"])
  }

  /// A configuration tree from `text` (`snd_config_load`): the caller deletes it.
  private static func load(_ text: String) throws -> OpaquePointer {
    var top: OpaquePointer?
    try #require(snd_config_top(&top) >= 0)
    let root = try #require(top)
    var input: OpaquePointer?
    let loaded = text.withCString { bytes -> Int32 in
      guard snd_input_buffer_open(&input, bytes, strlen(bytes)) >= 0, let input else { return -1 }
      defer { snd_input_close(input) }
      return snd_config_load(root, input)
    }
    if loaded < 0 {
      snd_config_delete(root)
      Issue.record("snd_config_load: \(loaded)")
      throw TestSetupError(message: "snd_config_load failed")
    }
    return root
  }
}
