import Foundation
import RampAudio
import RampDaemon
import RampEngine
import Testing

@testable import RampTestSupport

/// The repository root, from this file's path.
private let repositoryRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
  .deletingLastPathComponent()

private func parse(_ toml: String) throws(ConfigurationError) -> DaemonConfiguration {
  try DaemonConfiguration.parse(toml: toml, source: "test")
}

/// The error `toml` gives, as one line (`test:2: output.rate: …`), or "no error".
private func failure(_ toml: String) -> String {
  do {
    _ = try parse(toml)
    return "no error"
  } catch {
    return error.description
  }
}

private func loadFailure(
  file: String? = nil, environment: [String: String] = [:], overrides: [String: String] = [:],
  flags: [String: String] = [:]
) -> ConfigurationError? {
  do {
    _ = try DaemonConfiguration.load(file: file, environment: environment, overrides: overrides, flags: flags)
    return nil
  } catch {
    return error
  }
}

/// A fresh directory under the system's temporary directory, removed by the caller.
private func temporaryDirectory() throws -> String {
  let path = FileManager.default.temporaryDirectory.appendingPathComponent("rampd-config-\(UUID().uuidString)").path
  try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
  return path
}

/// Configuration: defaults, values, layers, lines, round trip, media roots.
@Suite enum ConfigurationTests {}

// MARK: - Defaults and the shipped file

extension ConfigurationTests {
  @Suite struct Defaults {
    @Test func defaults() throws {
      let c = DaemonConfiguration()
      #expect(c.socket == SocketSettings(path: nil, mode: nil, group: nil))
      let user = ["XDG_RUNTIME_DIR": "/run/user/1000"]
      #expect(c.socket.resolvedMode(environment: user, isRoot: false) == 0o600)
      #expect(c.socket.resolvedGroup(environment: user, isRoot: false) == nil)
      #expect(c.socket.resolvedMode(environment: [:], isRoot: false) == 0o660)
      #expect(c.socket.resolvedMode(environment: user, isRoot: true) == 0o660)
      #expect(
        c.socket.resolvedGroup(environment: [:], isRoot: true) == (getgrnam("audio") == nil ? nil : "audio"))
      #expect(c.limits.idleTimeout == 300 && c.limits.animationsPerKeyPath == 64)
      #expect(c.access == AccessSettings(users: [], groups: []))
      #expect(c.output.device == "default" && c.output.sampleRate == 48_000 && c.output.channels == 2)
      #expect(c.output.format == .auto && c.output.periodTime == 0.010 && c.output.bufferTime == 0.050)
      #expect(c.output.pacing == .auto)
      // A device that rewinds gets a 200 ms buffer.
      #expect(c.output.rewind == .auto && c.output.rewindBufferTime == 0.2)
      #expect(c.embeddedOutput == EmbeddedOutputSettings(enabled: true, path: nil))
      #expect(c.fades.duration == 1.0 && c.fades.curve == .easeInEaseOut && c.fades.space == .amplitude)
      #expect(c.fades.decibelFloor == -60)
      #expect(c.transaction.duration == 0.25 && c.transaction.timingFunction == .default)
      #expect(c.transaction.valueSpace == .amplitude && c.transaction.continuity == .value)
      #expect(!c.transaction.disableActions)
      #expect(c.maxGainDecibels == 0 && c.maxGain == 1)
      #expect(c.declick == 0.010)
      #expect(c.mixers.isEmpty)
      #expect(
        c.limits
          == Limits(
            clients: 64, lineLength: 65_536, streams: 16, observersPerClient: 16, maxObserveRate: 200,
            pendingScheduled: 1024))
      #expect(c.media.roots.isEmpty)
      #expect(c.log.level == .info)
      #expect(c.state.path == nil)
      #expect(try parse("") == c)
      #expect(try DaemonConfiguration.load(file: nil, environment: [:], overrides: [:]) == c)
    }

    @Test func defaultPaths() {
      let user = ["XDG_RUNTIME_DIR": "/run/user/1000", "XDG_STATE_HOME": "/home/a/.state", "HOME": "/home/a"]
      #expect(DaemonConfiguration.runtimeDirectory(environment: user, isRoot: false) == "/run/user/1000/rampd")
      #expect(DaemonConfiguration.runtimeDirectory(environment: user, isRoot: true) == "/run/rampd")
      #expect(DaemonConfiguration.runtimeDirectory(environment: [:], isRoot: false) == "/run/rampd")
      #expect(
        DaemonConfiguration.runtimeDirectory(environment: ["XDG_RUNTIME_DIR": "rel"], isRoot: false) == "/run/rampd")
      let c = DaemonConfiguration()
      #expect(c.socket.resolvedPath(environment: user, isRoot: false) == "/run/user/1000/rampd/rampd.sock")
      #expect(c.socket.resolvedPath(environment: user, isRoot: true) == "/run/rampd/rampd.sock")
      let userSocket = c.socket.resolvedPath(environment: user, isRoot: false)
      #expect(c.embeddedOutput.resolvedPath(socket: userSocket) == "/run/user/1000/rampd/output.wav")
      let systemSocket = c.socket.resolvedPath(environment: [:], isRoot: false)
      #expect(c.embeddedOutput.resolvedPath(socket: systemSocket) == "/run/rampd/output.wav")
      // A daemon on a socket of its own (root's too) writes beside it, not into /run/rampd.
      var own = c
      own.socket.path = "/tmp/mine/r.sock"
      #expect(
        own.embeddedOutput.resolvedPath(socket: own.socket.resolvedPath(environment: user, isRoot: true))
          == "/tmp/mine/output.wav")
      #expect(c.state.resolvedPath(environment: user, isRoot: false) == "/home/a/.state/rampd/state.json")
      #expect(
        c.state.resolvedPath(environment: ["HOME": "/home/b"], isRoot: false) == "/home/b/.local/state/rampd/state.json"
      )
      #expect(c.state.resolvedPath(environment: user, isRoot: true) == "/var/lib/rampd/state.json")
      #expect(SocketSettings(path: "/tmp/x.sock").resolvedPath(environment: user, isRoot: false) == "/tmp/x.sock")
    }

    /// The documented file is the defaults: as shipped (everything commented out), and with every
    /// `# key = value` line uncommented, so a default documented wrongly fails here.
    @Test func shippedFileIsTheDefaults() throws {
      let path = repositoryRoot.appendingPathComponent("config/rampd.toml").path
      #expect(try DaemonConfiguration.load(file: path, environment: [:], overrides: [:]) == DaemonConfiguration())

      let text = try String(contentsOfFile: path, encoding: .utf8)
      let defaultLine = try Regex(#"^# ([a-z-]+) = (.*)$"#)
      var uncommented: [String] = []
      var documented: Set<String> = []
      var section = ""
      for line in text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init) {
        if line.hasPrefix("[") { section = String(line.dropFirst().prefix(while: { $0 != "]" })) }
        if let match = line.wholeMatch(of: defaultLine), let key = match.output[1].substring {
          documented.insert("\(section).\(key)")
          uncommented.append(String(line.dropFirst(2)))
        } else {
          uncommented.append(line)
        }
      }
      let active = try DaemonConfiguration.parse(toml: uncommented.joined(separator: "\n"), source: "uncommented")
      #expect(active == DaemonConfiguration())

      // Every key has its default line, under its own section, and nothing else does.
      let keys = Set(DaemonConfiguration().summary().map(\.key))
      #expect(documented == keys)
    }

    /// config/README.md lists every key and its environment variable.
    @Test func readmeListsEveryKey() throws {
      let readme = try String(
        contentsOfFile: repositoryRoot.appendingPathComponent("config/README.md").path, encoding: .utf8)
      for (key, _) in DaemonConfiguration().summary() {
        #expect(readme.contains("`\(key)`"), "config/README.md does not list \(key)")
        let variable =
          "RAMPD_"
          + key.uppercased().replacingOccurrences(of: "-", with: "_").replacingOccurrences(
            of: ".", with: "_")
        #expect(readme.contains("`\(variable)`"), "config/README.md does not name \(variable)")
      }
      for key in ["name", "card", "element", "index", "rate", "min-db"] {
        #expect(readme.contains("`mixer.\(key)`"), "config/README.md does not list mixer.\(key)")
      }
    }

    @Test func errorDescription() {
      let error = ConfigurationError(
        source: "/etc/rampd/rampd.toml", line: 12, key: "output.rate", message: "1000 Hz is outside 8000...384000")
      #expect(error.description == "/etc/rampd/rampd.toml:12: output.rate: 1000 Hz is outside 8000...384000")
      #expect(
        ConfigurationError(source: "environment (RAMPD_X)", message: "m").description == "environment (RAMPD_X): m")
    }
  }
}

// MARK: - Values

extension ConfigurationTests {
  @Suite struct Values {
    @Test func socket() throws {
      let c = try parse(
        """
        [socket]
        path = "/tmp/r.sock"
        mode = "0600"
        group = "audio"
        """)
      #expect(c.socket == SocketSettings(path: "/tmp/r.sock", mode: 0o600, group: "audio"))
      #expect(try parse("[socket]\nmode = \"0o770\"").socket.mode == 0o770)
      #expect(try parse("[socket]\nmode = \"666\"").socket.mode == 0o666)
      #expect(try parse("[socket]\npath = \"\"\ngroup = \"\"") == DaemonConfiguration())
    }

    @Test(arguments: [
      (
        "[socket]\npath = \"run/r.sock\"",
        #"test:2: socket.path: "run/r.sock" is not an absolute path (it must start with '/')"#
      ),
      ("[socket]\npath = 5", "test:2: socket.path: expected a string, got integer 5"),
      (
        "[socket]\npath = \"/\(String(repeating: "a", count: 120))\"",
        "test:2: socket.path: 121 bytes is longer than a Unix socket path can be (107 bytes)"
      ),
      (
        "[socket]\nmode = 660",
        #"test:2: socket.mode: expected an octal mode as a string such as "0660", got integer 660 (an integer is ambiguous: write the octal digits in quotes)"#
      ),
      ("[socket]\nmode = \"0680\"", #"test:2: socket.mode: "0680" is not an octal mode such as "0660""#),
      (
        "[socket]\nmode = \"4660\"",
        "test:2: socket.mode: 4660 has bits above 0777 (setuid, setgid, sticky) that a socket cannot use"
      ),
      (
        "[socket]\nmode = \"0060\"",
        "test:2: socket.mode: 0060 does not let the daemon's own user read and write the socket (0600)"
      ),
      ("[socket]\ngroup = \"a b\"", #"test:2: socket.group: "a b" is not a group name"#),
      ("[access]\nusers = [\"alice\", \"a b\"]", #"test:2: access.users: item 2: "a b" is not a name or a number"#),
      ("[access]\ngroups = [\"*\"]", #"test:2: access.groups: item 1: "*" (anyone) belongs in access.users"#),
      (
        "[access]\nusers = 1000",
        "test:2: access.users: expected an array of strings (or one string of ':'-separated items), got integer 1000"
      ),
      ("[limits]\nanimations-per-key-path = 0", "test:2: limits.animations-per-key-path: 0 is outside 1...1024"),
      ("[limits]\nidle-timeout = \"-1s\"", "test:2: limits.idle-timeout: must not be negative, got -1 s"),
    ])
    func socketInvalid(toml: String, expected: String) {
      #expect(failure(toml) == expected)
    }

    @Test func output() throws {
      let c = try parse(
        """
        [output]
        device = "hw:1,0"
        rate = 44100
        channels = 6
        format = "s24"
        period = "5ms"
        buffer = 0.02
        pacing = "clock"
        """)
      var expected = OutputConfiguration(
        device: "hw:1,0", sampleRate: 44_100, channels: 6, format: .s24, periodTime: 0.005, bufferTime: 0.02,
        pacing: .clock)
      expected.rewindBufferTime = 0.2
      expected.limiter.enabled = true
      #expect(c.output == expected)
      #expect(try parse("[output]\nlimiter = \"off\"").output.limiter.enabled == false)
      #expect(
        try parse("[output]\nlimiter = \"-2.5dBTP\"\nlimiter-lookahead = \"3ms\"\nlimiter-release = \"250ms\"\n").output
          .limiter
          == LimiterSettings(ceilingDecibels: -2.5, lookAhead: 0.003, release: 0.25))
      #expect(try parse("[output]\nlimiter = -3").output.limiter.ceilingDecibels == -3)
      #expect(try parse("[output]\nrewind = \"off\"\nrewind-buffer = \"1s\"").output.rewind == .off)
      #expect(try parse("[output]\nrewind-buffer = 0").output.rewindBufferTime == 0)
      #expect(try parse("[output]\nrate = \"96k\"").output.sampleRate == 96_000)
      #expect(try parse("[output]\nrate = \"44.1kHz\"").output.sampleRate == 44_100)
      #expect(try parse("[output]\nrate = \"22050\"").output.sampleRate == 22_050)
      #expect(try parse("[output]\nrate = 48000.0").output.sampleRate == 48_000)
      #expect(try parse("[output]\nformat = \"FLOAT\"").output.format == .float32)
      #expect(try parse("[output]\nperiod = \"20ms\"\nbuffer = \"40ms\"").output.bufferTime == 0.04)
      // A smaller period makes a small buffer valid, whichever comes first in the file.
      #expect(try parse("[output]\nbuffer = \"15ms\"\nperiod = \"5ms\"").output.bufferTime == 0.015)
      // The margin: by default (and as "") the buffer less a period; within one period to that.
      #expect(try parse("[output]\nmargin = \"20ms\"").output.marginTime == 0.02)
      #expect(try parse("[output]\nmargin = \"\"").output.marginTime == nil)
      #expect(try parse("[output]\nmargin = 0.04").output.marginTime == 0.04)
      #expect(try parse("[output]\nmargin = \"10ms\"").output.marginTime == 0.01)
    }

    @Test(arguments: [
      ("[output]\nrate = \"fast\"", #"test:2: output.rate: expected an integer, got string "fast""#),
      ("[output]\nrate = 1000", "test:2: output.rate: 1000 Hz is outside 8000...384000"),
      ("[shutdown]\nfade = \"11s\"", "test:2: shutdown.fade: 11 s is outside 0 s...10 s"),
      (
        "[embedded-output]\nmax-duration = \"500ms\"",
        "test:2: embedded-output.max-duration: 500 ms is under 1 s (0 lets the file grow without bound)"
      ),
      (
        "[embedded-output]\nmax-duration = \"25h\"",
        "test:2: embedded-output.max-duration: 90000 s is outside 0 s...86400 s"
      ),
      (
        "[embedded-output]\nmax-duration = true",
        #"test:2: embedded-output.max-duration: expected a duration (a number of seconds, or a string such as "10ms", "2s", "1m30s"), got boolean true"#
      ),
      ("[output]\nrate = 44100.5", "test:2: output.rate: expected an integer, got floating-point number 44100.5"),
      ("[output]\nchannels = 0", "test:2: output.channels: 0 is outside 1...32"),
      ("[output]\nchannels = true", "test:2: output.channels: expected an integer, got boolean true"),
      ("[output]\ndevice = \"\"", "test:2: output.device: must not be empty"),
      ("[output]\nformat = \"s8\"", #"test:2: output.format: "s8" is not one of auto, float, s32, s24, s16"#),
      ("[output]\npacing = 1", "test:2: output.pacing: expected one of auto, clock, device, got integer 1"),
      ("[output]\nperiod = \"2s\"", "test:2: output.period: 2.0 s is outside 0.001...1 s"),
      ("[output]\nperiod = -0.01", "test:2: output.period: must not be negative, got -10 ms"),
      ("[output]\nperiod = nan", "test:2: output.period: must be a finite number of seconds, got nan"),
      ("[output]\nperiod = inf", "test:2: output.period: must be a finite number of seconds, got inf"),
      (
        "[output]\nperiod = \"ten\"",
        #"test:2: output.period: expected a duration (a number of seconds, or a string such as "10ms", "2s", "1m30s"), got string "ten""#
      ),
      ("[output]\nbuffer = \"11s\"", "test:2: output.buffer: 11.0 s is more than 10 s"),
      (
        "[output]\nbuffer = \"15ms\"",
        "test:2: output.buffer: 0.015 s is less than two periods (2 × 0.01 s)"
      ),
      (
        "[output]\nperiod = \"40ms\"",
        "test:2: output.buffer: 0.05 s is less than two periods (2 × 0.04 s)"
      ),
      (
        "[output]\nbuffer = \"30ms\"\n\nperiod = \"20ms\"",
        "test:2: output.buffer: 0.03 s is less than two periods (2 × 0.02 s)"
      ),
      (
        "[output]\nmargin = \"45ms\"",
        "test:2: output.margin: 0.045 s is outside one period (0.01 s) to the buffer less one period (0.05 s − 0.01 s)"
      ),
      (
        "[output]\nmargin = \"5ms\"",
        "test:2: output.margin: 0.005 s is outside one period (0.01 s) to the buffer less one period (0.05 s − 0.01 s)"
      ),
      (
        // Checked against the buffer: the margin's line is named, the later layer of the keys involved.
        "[output]\nmargin = \"30ms\"\nbuffer = \"35ms\"",
        "test:2: output.margin: 0.03 s is outside one period (0.01 s) to the buffer less one period (0.035 s − 0.01 s)"
      ),
      (
        "[output]\nmargin = \"soon\"",
        #"test:2: output.margin: expected a duration (a number of seconds, or a string such as "10ms", "2s", "1m30s"), got string "soon""#
      ),
      ("[output]\nlimiter = \"+1dBTP\"", "test:2: output.limiter: 1 dBTP is outside -20 dBTP...0 dBTP"),
      (
        "[output]\nlimiter = \"loud\"",
        #"test:2: output.limiter: expected a true-peak level such as "-1dBTP", got string "loud""#
      ),
      (
        "[output]\nlimiter = true",
        "test:2: output.limiter: expected a true-peak level such as \"-1dBTP\", got boolean true"
      ),
      ("[output]\nlimiter-lookahead = \"50ms\"", "test:2: output.limiter-lookahead: 0.05 s is outside 0.0005...0.02 s"),
      ("[output]\nlimiter-release = 0", "test:2: output.limiter-release: 0.0 s is outside 0.01...5 s"),
    ])
    func outputInvalid(toml: String, expected: String) {
      #expect(failure(toml) == expected)
    }

    @Test func durations() throws {
      #expect(try parse("[fade]\nduration = 2").fades.duration == 2)
      #expect(try parse("[fade]\nduration = 2.5").fades.duration == 2.5)
      #expect(try parse("[fade]\nduration = \"1m30s\"").fades.duration == 90)
      #expect(try parse("[fade]\nduration = \"1h\"").fades.duration == 3600)
      #expect(try parse("[fade]\nduration = \"1min 5s\"").fades.duration == 65)
      #expect(try parse("[fade]\nduration = \"1s500ms\"").fades.duration == 1.5)
      #expect(try parse("[fade]\nduration = \"0.5\"").fades.duration == 0.5)
      #expect(try parse("[fade]\nduration = \"30 m\"").fades.duration == 1800)
      #expect(try parse("[fade]\nduration = 0").fades.duration == 0)
      #expect(try parse("[gain]\ndeclick = \"10ms\"").declick == 0.01)
      #expect(try parse("[gain]\ndeclick = \"3ms\"").declick == 0.003)
    }

    @Test(arguments: [
      ("[fade]\nduration = \"-2s\"", "test:2: fade.duration: must not be negative, got -2 s"),
      ("[fade]\nduration = -1", "test:2: fade.duration: must not be negative, got -1 s"),
      (
        "[fade]\nduration = \"2d\"",
        #"test:2: fade.duration: expected a duration (a number of seconds, or a string such as "10ms", "2s", "1m30s"), got string "2d""#
      ),
      (
        "[fade]\nduration = \"30s1m\"",
        #"test:2: fade.duration: expected a duration (a number of seconds, or a string such as "10ms", "2s", "1m30s"), got string "30s1m""#
      ),
      (
        "[fade]\nduration = \"1m30\"",
        #"test:2: fade.duration: expected a duration (a number of seconds, or a string such as "10ms", "2s", "1m30s"), got string "1m30""#
      ),
      (
        "[fade]\nduration = \"nan\"",
        #"test:2: fade.duration: expected a duration (a number of seconds, or a string such as "10ms", "2s", "1m30s"), got string "nan""#
      ),
      (
        "[fade]\nduration = [1]",
        #"test:2: fade.duration: expected a duration (a number of seconds, or a string such as "10ms", "2s", "1m30s"), got an array"#
      ),
      ("[fade]\nduration = \"25h\"", "test:2: fade.duration: 90000 s is outside 0 s...86400 s"),
      ("[implicit]\nduration = \"2h\"", "test:2: implicit.duration: 7200 s is outside 0 s...3600 s"),
      ("[gain]\ndeclick = 0", "test:2: gain.declick: 0 s is outside 1 ms...500 ms"),
      ("[gain]\ndeclick = \"1s\"", "test:2: gain.declick: 1 s is outside 1 ms...500 ms"),
    ])
    func durationInvalid(toml: String, expected: String) {
      #expect(failure(toml) == expected)
    }

    @Test func fadesAndImplicit() throws {
      let c = try parse(
        """
        [fade]
        duration = "3s"
        curve = "qsin"
        space = "db"
        db-floor = "-80dB"

        [implicit]
        duration = "100ms"
        curve = "cubic-bezier(0.1, 1, 1, 0.2)"
        space = "power"
        continuity = "slope"
        instant = true
        """)
      #expect(
        c.fades == FadeDefaults(duration: 3, curve: .fade(.qsin), space: .decibels(floor: -80), decibelFloor: -80))
      #expect(c.transaction.duration == 0.1)
      #expect(c.transaction.timingFunction == (try TimingFunction.bezier(0.1, 1, 1, 0.2)))
      #expect(c.transaction.valueSpace == .power && c.transaction.continuity == .slope && c.transaction.disableActions)
      // Plain "db" takes fade.db-floor wherever it is written; db(x) keeps its own floor.
      let d = try parse("[implicit]\nspace = \"db\"\n[fade]\ndb-floor = -90\nspace = \"db(-70)\"")
      #expect(d.transaction.valueSpace == .decibels(floor: -90) && d.fades.space == .decibels(floor: -70))
      #expect(try parse("[fade]\ncurve = \"steps(4, jump-none)\"").fades.curve == .steps(4, .jumpNone))
      #expect(try parse("[implicit]\ninstant = \"yes\"").transaction.disableActions)
      #expect(try parse("[fade]\ndb-floor = \"-100 dB\"").fades.decibelFloor == -100)
    }

    @Test(arguments: [
      (
        "[fade]\ncurve = \"bouncy\"",
        "test:2: fade.curve: unknown curve 'bouncy'; expected one of: linear, ease-in, ease-out, ease-in-out, default, ease, step-start, step-end, cubic-bezier(x1,y1,x2,y2), steps(n[,position]), tri, qsin, iqsin, esin, hsin, ihsin, exp, log, par, ipar, qua, cub, squ, cbr, dese, desi, losi, sinc, isinc"
      ),
      (
        "[implicit]\ncurve = \"cubic-bezier(2, 0, 1, 1)\"",
        "test:2: implicit.curve: cubic-bezier x1: must be in [0, 1], got 2.0"
      ),
      ("[fade]\ncurve = 1", "test:2: fade.curve: expected a string, got integer 1"),
      (
        "[fade]\nspace = \"log\"",
        "test:2: fade.space: unknown value space 'log'; expected amplitude, db, db(<floor>) or power"
      ),
      ("[implicit]\nspace = \"db(3)\"", "test:2: implicit.space: db floor must be a negative number of dB, got '3'"),
      ("[fade]\ndb-floor = 0", "test:2: fade.db-floor: 0 dB is outside -200 dB..<0 dB"),
      ("[fade]\ndb-floor = \"-300dB\"", "test:2: fade.db-floor: -300 dB is outside -200 dB..<0 dB"),
      ("[implicit]\ncontinuity = \"smooth\"", #"test:2: implicit.continuity: "smooth" is not one of value, slope"#),
      ("[implicit]\ninstant = \"maybe\"", #"test:2: implicit.instant: expected true or false, got string "maybe""#),
    ])
    func fadeInvalid(toml: String, expected: String) {
      #expect(failure(toml) == expected)
    }

    @Test func gain() throws {
      #expect(try parse("[gain]\nmax = \"+6dB\"").maxGainDecibels == 6)
      #expect(try parse("[gain]\nmax = 12").maxGainDecibels == 12)
      #expect(try parse("[gain]\nmax = \"-6dB\"").maxGainDecibels == -6)
      #expect(try parse("[gain]\nmax = \"24 dB\"").maxGainDecibels == 24)
      #expect(abs(try parse("[gain]\nmax = \"+6dB\"").maxGain - 1.9952623149688795) < 1e-15)
    }

    @Test(arguments: [
      ("[gain]\nmax = \"+30dB\"", "test:2: gain.max: +30 dB is above the +24 dB ceiling"),
      ("[gain]\nmax = -100", "test:2: gain.max: -100 dB is below -60 dB (nothing would be audible)"),
      (
        "[gain]\nmax = \"loud\"",
        #"test:2: gain.max: expected a gain in dB (a number, or a string such as "-6dB", "0dB", "+6dB"), got string "loud""#
      ),
      (
        "[gain]\nmax = \"50%\"",
        #"test:2: gain.max: expected a gain in dB (a number, or a string such as "-6dB", "0dB", "+6dB"), got string "50%""#
      ),
      ("[gain]\nmax = inf", "test:2: gain.max: must be a finite number of dB, got inf"),
    ])
    func gainInvalid(toml: String, expected: String) {
      #expect(failure(toml) == expected)
    }

    @Test func limits() throws {
      let c = try parse(
        """
        [limits]
        clients = 8
        line-length = "1MiB"
        streams = 4
        observers-per-client = 0
        max-observe-rate = "50Hz"
        pending-scheduled = 10
        """)
      #expect(
        c.limits
          == Limits(
            clients: 8, lineLength: 1_048_576, streams: 4, observersPerClient: 0, maxObserveRate: 50,
            pendingScheduled: 10
          ))
      #expect(try parse("[limits]\nline-length = \"64KiB\"").limits.lineLength == 65_536)
      #expect(try parse("[limits]\nline-length = 4096").limits.lineLength == 4096)
      #expect(try parse("[limits]\nmax-observe-rate = 12.5").limits.maxObserveRate == 12.5)
    }

    @Test(arguments: [
      ("[limits]\nclients = 0", "test:2: limits.clients: 0 is outside 1...4096"),
      ("[limits]\nclients = \"many\"", #"test:2: limits.clients: expected an integer, got string "many""#),
      ("[limits]\nline-length = 100", "test:2: limits.line-length: 100 bytes is outside 1024...16777216 bytes"),
      (
        "[limits]\nline-length = \"1GiB\"",
        #"test:2: limits.line-length: expected a number of bytes (an integer, or a string such as "64KiB"), got string "1GiB""#
      ),
      ("[limits]\nstreams = 1000", "test:2: limits.streams: 1000 is outside 1...256"),
      ("[limits]\nobservers-per-client = -1", "test:2: limits.observers-per-client: -1 is outside 0...1024"),
      ("[limits]\nmax-observe-rate = 0", "test:2: limits.max-observe-rate: 0 Hz is outside 1...1000 Hz"),
      (
        "[limits]\nmax-observe-rate = \"fast\"",
        #"test:2: limits.max-observe-rate: expected a frequency in Hz (a number, or a string such as "200Hz"), got string "fast""#
      ),
      ("[limits]\npending-scheduled = 2000000", "test:2: limits.pending-scheduled: 2000000 is outside 0...1000000"),
    ])
    func limitsInvalid(toml: String, expected: String) {
      #expect(failure(toml) == expected)
    }

    @Test func mediaLogStateEmbedded() throws {
      let c = try parse(
        """
        [media]
        roots = ["/srv/music", "/srv/alarms"]
        [log]
        level = "debug"
        [state]
        path = "/var/tmp/rampd.json"
        [embedded-output]
        enabled = false
        path = "/tmp/out.wav"
        """)
      #expect(c.media.roots == ["/srv/music", "/srv/alarms"])
      #expect(c.log.level == .debug)
      #expect(c.state.path == "/var/tmp/rampd.json")
      #expect(c.embeddedOutput == EmbeddedOutputSettings(enabled: false, path: "/tmp/out.wav"))
      #expect(try parse("[media]\nroots = \"/a:/b\"").media.roots == ["/a", "/b"])
      #expect(try parse("[media]\nroots = \"\"").media.roots == [])
      #expect(try parse("[log]\nlevel = \"WARNING\"").log.level == .warning)
    }

    @Test(arguments: [
      (
        "[media]\nroots = [\"music\"]",
        #"test:2: media.roots: item 1: "music" is not an absolute path (it must start with '/')"#
      ),
      ("[media]\nroots = [\"/a\", 3]", "test:2: media.roots: expected an array of strings, but item 2 is integer 3"),
      ("[media]\nroots = \"/a::/b\"", "test:2: media.roots: item 2 is empty"),
      (
        "[media]\nroots = 1",
        "test:2: media.roots: expected an array of strings (or one string of ':'-separated items), got integer 1"
      ),
      (
        "[log]\nlevel = \"verbose\"",
        #"test:2: log.level: "verbose" is not one of trace, debug, info, notice, warning, error, critical"#
      ),
      (
        "[state]\npath = \"state.json\"",
        #"test:2: state.path: "state.json" is not an absolute path (it must start with '/')"#
      ),
      (
        "[output]\nwait = \"later\"",
        #"test:2: output.wait: expected true or false, got string "later""#
      ),
      (
        "[embedded-output]\nenabled = \"sometimes\"",
        #"test:2: embedded-output.enabled: expected true or false, got string "sometimes""#
      ),
      (
        "[embedded-output]\npath = \"out.wav\"",
        #"test:2: embedded-output.path: "out.wav" is not an absolute path (it must start with '/')"#
      ),
    ])
    func miscInvalid(toml: String, expected: String) {
      #expect(failure(toml) == expected)
    }

    @Test func mixers() throws {
      let c = try parse(
        """
        [[mixer]]
        name = "master"
        element = "Master"

        [[mixer]]
        name = "pcm"
        card = "hw:1"
        element = "PCM"
        index = 1
        rate = 50
        min-db = "-48dB"
        """)
      #expect(
        c.mixers == [
          MixerBindingConfiguration(name: "master", card: "default", element: "Master"),
          MixerBindingConfiguration(
            name: "pcm", card: "hw:1", element: "PCM", index: 1, controlRate: 50, minimumDecibels: -48),
        ])
    }

    @Test(arguments: [
      (
        "[[mixer]]\nname = \"m\"\nelement = \"Master\"\nrate = 5000",
        "test:4: mixer.m.rate: 5000.0 Hz is outside 1...1000 Hz"
      ),
      (
        "[[mixer]]\nname = \"m\"\nelement = \"Master\"\nmin-db = 3",
        "test:4: mixer.m.min-db: 3.0 dB is outside -200 dB..<0 dB"
      ),
      ("[[mixer]]\nname = \"m\"\n\nelement = \"\"", "test:4: mixer.m.element: must not be empty"),
      (
        "[[mixer]]\nname = \"m\"\nelement = \"Master\"\nindex = -1",
        "test:4: mixer.m.index: -1 is not a valid element index"
      ),
      (
        "[[mixer]]\nelement = \"Master\"",
        "test:1: mixer #1: missing key 'name' (the binding's key path is mixers.<name>.volume)"
      ),
      (
        "[[mixer]]\nname = \"m\"",
        "test:1: mixer.m: missing key 'element' (a simple mixer element, as `amixer scontrols` lists it)"
      ),
      (
        "[[mixer]]\nname = \"a b\"\nelement = \"Master\"",
        "test:2: mixer #1.name: 'a b' must be letters, digits, '_' and '-' (it is a key path component)"
      ),
      (
        "[[mixer]]\nname = \"m\"\nelement = \"Master\"\nelemnt = \"PCM\"",
        "test:4: mixer.m.elemnt: unknown key (did you mean element?)"
      ),
      (
        "[[mixer]]\nname = \"m\"\nelement = \"Master\"\n[[mixer]]\nname = \"m\"\nelement = \"PCM\"",
        "test:5: mixer.m.name: a mixer named 'm' is already bound (line 1)"
      ),
      (
        (0...64).map { "[[mixer]]\nname = \"m\($0)\"\nelement = \"Master\"" }.joined(separator: "\n"),
        "test:193: mixer.m64: 64 mixers are already bound, the most allowed"
      ),
      ("mixer = 3", "test:1: mixer: expected [[mixer]] tables, got integer 3"),
      ("[mixer]\nname = \"m\"", "test:1: mixer: expected [[mixer]] tables, got a table"),
      ("[[mixer]]\nname = 1\nelement = \"Master\"", "test:2: mixer #1.name: expected a string, got integer 1"),
    ])
    func mixerInvalid(toml: String, expected: String) {
      #expect(failure(toml) == expected)
    }
  }
}

// MARK: - Unknown keys, lines, TOML errors

extension ConfigurationTests {
  @Suite struct Structure {
    @Test(arguments: [
      ("[output]\ndevic = \"hw:0\"", "test:2: output.devic: unknown key (did you mean output.device?)"),
      ("[limits]\nline_length = 1024", "test:2: limits.line_length: unknown key (did you mean limits.line-length?)"),
      ("[output]\ndeclick = \"5ms\"", "test:2: output.declick: unknown key in [output] (did you mean gain.declick?)"),
      (
        "[output]\nvolume = 1",
        "test:2: output.volume: unknown key; the keys of [output] are device, rate, channels, format, period, buffer, pacing, margin, rewind, rewind-buffer, pipewire-role, pipewire-target, pipewire-quantum, limiter, limiter-lookahead, limiter-release, wait"
      ),
      ("[ouput]\ndevice = \"hw:0\"", "test:1: unknown section [ouput] (did you mean [output]?)"),
      (
        "[volume]\ndevice = \"hw:0\"",
        "test:1: unknown section [volume]; the sections are [socket], [output], [embedded-output], [fade], [playback], [implicit], [gain], [[mixer]], [[duck]], [queue], [limits], [media], [access], [log], [state], [shutdown]"
      ),
      (
        "device = \"hw:0\"",
        "test:1: device: unknown key at the top level: keys belong in a [section] (did you mean output.device?)"
      ),
      ("output = 3", "test:1: output: expected a table [output], got integer 3"),
      (
        "[output.extra]\na = 1",
        "test:1: output.extra: unknown key; the keys of [output] are device, rate, channels, format, period, buffer, pacing, margin, rewind, rewind-buffer, pipewire-role, pipewire-target, pipewire-quantum, limiter, limiter-lookahead, limiter-release, wait"
      ),
      ("[fade]\nduraton = 1", "test:2: fade.duraton: unknown key (did you mean fade.duration?)"),
    ])
    func unknownKeys(toml: String, expected: String) {
      #expect(failure(toml) == expected)
    }

    /// The native PipeWire output's keys are checked naming the field: a quantum not a power of two
    /// within 32...8192, an empty role.
    @Test func pipeWireKeysAreValidatedNamingTheField() {
      #expect(
        failure("[output]\npipewire-quantum = 1000")
          == "test:2: output.pipewire-quantum: 1000 frames is not a power of two within 32...8192")
      #expect(
        failure("[output]\npipewire-quantum = 16384")
          == "test:2: output.pipewire-quantum: 16384 frames is not a power of two within 32...8192")
      #expect(failure("[output]\npipewire-role = \"\"") == "test:2: output.pipewire-role: must be a non-empty name")
    }

    @Test func lineNumbers() {
      let toml = """
        # rampd
        [socket]
        mode = "0660"

        [output]
        # comment with rate = 1
        device = "default"
          rate   =   1000   # too low

        [limits]
        clients = 8
        """
      let error = #expect(throws: ConfigurationError.self) {
        try DaemonConfiguration.parse(toml: toml, source: "/etc/rampd/rampd.toml")
      }
      #expect(error?.line == 8)
      #expect(error?.key == "output.rate")
      #expect(error?.source == "/etc/rampd/rampd.toml")
      #expect(error?.description == "/etc/rampd/rampd.toml:8: output.rate: 1000 Hz is outside 8000...384000")

      // Every error is reported, in the order of the file's lines, whatever order TOMLKit keeps keys in.
      #expect(
        failure("[output]\nrate = 1\n[limits]\nclients = 0")
          == "test:2: output.rate: 1 Hz is outside 8000...384000\ntest:4: limits.clients: 0 is outside 1...4096")
      #expect(
        failure("[limits]\nclients = 0\n[output]\nrate = 1")
          == "test:2: limits.clients: 0 is outside 1...4096\ntest:4: output.rate: 1 Hz is outside 8000...384000")
      #expect(
        failure("[output]\nzz = 1\naa = 2")
          == "test:2: output.zz: unknown key; the keys of [output] are device, rate, channels, format, period, buffer, pacing, margin, rewind, rewind-buffer, pipewire-role, pipewire-target, pipewire-quantum, limiter, limiter-lookahead, limiter-release, wait"
          + "\ntest:3: output.aa: unknown key; the keys of [output] are device, rate, channels, format, period, buffer, pacing, margin, rewind, rewind-buffer, pipewire-role, pipewire-target, pipewire-quantum, limiter, limiter-lookahead, limiter-release, wait"
      )
      // Dotted keys and quoted keys.
      #expect(failure("\n\noutput.rate = 5") == "test:3: output.rate: 5 Hz is outside 8000...384000")
      #expect(failure("[output]\n\"rate\" = 5") == "test:2: output.rate: 5 Hz is outside 8000...384000")
      #expect(failure("[ \"output\" ]\n\n rate = 5") == "test:3: output.rate: 5 Hz is outside 8000...384000")
      // The same key name in two sections: the line of the right one.
      #expect(
        failure("[fade]\nduration = 1\n[implicit]\nduration = -1")
          == "test:4: implicit.duration: must not be negative, got -1 s")
      // Mixer keys in the second table.
      #expect(
        failure(
          "[[mixer]]\nname = \"a\"\nelement = \"A\"\nrate = 5\n[[mixer]]\nname = \"b\"\nelement = \"B\"\nrate = 5000")
          == "test:8: mixer.b.rate: 5000.0 Hz is outside 1...1000 Hz")
    }

    @Test func tomlSyntaxErrors() {
      let error = #expect(throws: ConfigurationError.self) { try parse("[output]\nrate = \n") }
      #expect(error?.line == 2)
      #expect(error?.key == nil)
      #expect(error?.message.hasPrefix("not valid TOML: ") == true)
      let duplicate = #expect(throws: ConfigurationError.self) { try parse("[output]\nrate = 1\n\nrate = 2") }
      #expect(duplicate?.line == 4)
      let unterminated = #expect(throws: ConfigurationError.self) { try parse("[log]\n\n\nlevel = \"info") }
      #expect(unterminated?.line == 4)
    }
  }
}

// MARK: - Layers

extension ConfigurationTests {
  @Suite struct Layers {
    @Test func environmentNames() throws {
      let c = try DaemonConfiguration.load(
        file: nil,
        environment: [
          "RAMPD_OUTPUT_DEVICE": "hw:2", "RAMPD_SOCKET_PATH": "/tmp/s.sock", "RAMPD_FADE_DURATION": "2s",
          "RAMPD_LIMITS_LINE_LENGTH": "4096", "RAMPD_OUTPUT_RATE": "44100", "RAMPD_EMBEDDED_OUTPUT_ENABLED": "false",
          "RAMPD_FADE_DB_FLOOR": "-70dB", "RAMPD_MEDIA_ROOTS": "/srv/a:/srv/b", "RAMPD_IMPLICIT_INSTANT": "true",
          "RAMPD_LIMITS_OBSERVERS_PER_CLIENT": "2", "RAMPD_GAIN_MAX": "+6dB", "RAMPD_LOG_LEVEL": "trace",
          "RAMPD_CONFIG": "/etc/rampd/other.toml", "PATH": "/usr/bin", "HOME": "/root",
        ], overrides: [:])
      #expect(c.output.device == "hw:2" && c.output.sampleRate == 44_100)
      #expect(c.socket.path == "/tmp/s.sock")
      #expect(c.fades.duration == 2 && c.fades.decibelFloor == -70)
      #expect(c.limits.lineLength == 4096 && c.limits.observersPerClient == 2)
      #expect(!c.embeddedOutput.enabled && c.transaction.disableActions)
      #expect(c.media.roots == ["/srv/a", "/srv/b"])
      #expect(c.maxGainDecibels == 6 && c.log.level == .trace)
    }

    /// RAMPD_SOCKET names rampd's socket as it names rampctl's; RAMPD_SOCKET_PATH is an alias
    /// that loses to it, and an empty value counts as unset; --socket wins over both.
    @Test func rampdSocketNamesTheSocket() throws {
      func socket(_ environment: [String: String], overrides: [String: String] = [:]) throws -> String? {
        try DaemonConfiguration.load(file: nil, environment: environment, overrides: overrides).socket.path
      }
      #expect(try socket(["RAMPD_SOCKET": "/a.sock"]) == "/a.sock")
      #expect(try socket(["RAMPD_SOCKET": "/a.sock", "RAMPD_SOCKET_PATH": "/b.sock"]) == "/a.sock")
      #expect(try socket(["RAMPD_SOCKET": "", "RAMPD_SOCKET_PATH": "/b.sock"]) == "/b.sock")
      #expect(try socket(["RAMPD_SOCKET": "/a.sock"], overrides: ["socket.path": "/c.sock"]) == "/c.sock")
      let error = #expect(throws: ConfigurationError.self) { try socket(["RAMPD_SOCKET": "relative.sock"]) }
      #expect(error?.source == "environment (RAMPD_SOCKET)", "\(String(describing: error))")
    }

    @Test func overridesAndOrder() throws {
      let directory = try temporaryDirectory()
      defer { try? FileManager.default.removeItem(atPath: directory) }
      let file = directory + "/rampd.toml"
      try "[output]\ndevice = \"hw:0\"\nrate = 44100\nchannels = 1\n[log]\nlevel = \"debug\"\n".write(
        toFile: file, atomically: true, encoding: .utf8)

      let fileOnly = try DaemonConfiguration.load(file: file, environment: [:], overrides: [:])
      #expect(fileOnly.output.device == "hw:0" && fileOnly.output.sampleRate == 44_100 && fileOnly.output.channels == 1)

      // file < environment < overrides, key by key.
      let c = try DaemonConfiguration.load(
        file: file, environment: ["RAMPD_OUTPUT_DEVICE": "hw:1", "RAMPD_OUTPUT_RATE": "96000"],
        overrides: ["output.device": "hw:2", "socket.path": "/tmp/o.sock"])
      #expect(c.output.device == "hw:2")
      #expect(c.output.sampleRate == 96_000)
      #expect(c.output.channels == 1)
      #expect(c.log.level == .debug)
      #expect(c.socket.path == "/tmp/o.sock")

      // A later layer may repair an earlier layer's cross-key problem.
      #expect(
        try DaemonConfiguration.load(
          file: nil, environment: ["RAMPD_OUTPUT_PERIOD": "40ms"], overrides: ["output.buffer": "100ms"]
        ).output.bufferTime == 0.1)
    }

    @Test func errorsNameTheLayer() throws {
      let directory = try temporaryDirectory()
      defer { try? FileManager.default.removeItem(atPath: directory) }
      let file = directory + "/rampd.toml"
      try "# x\n[output]\nperiod = \"20ms\"\nbuffer = \"45ms\"\n".write(toFile: file, atomically: true, encoding: .utf8)

      #expect(
        loadFailure(environment: ["RAMPD_OUTPUT_RATE": "fast"])?.description
          == #"environment (RAMPD_OUTPUT_RATE): output.rate: expected an integer, got string "fast""#)
      #expect(
        loadFailure(environment: ["RAMPD_OUTPUT_RATE": "1000"])?.description
          == "environment (RAMPD_OUTPUT_RATE): output.rate: 1000 Hz is outside 8000...384000")
      #expect(
        loadFailure(overrides: ["output.rate": "1000"], flags: ["output.rate": "--rate"])?.description
          == "--rate: output.rate: 1000 Hz is outside 8000...384000")
      #expect(
        loadFailure(overrides: ["output.rate": "1000"])?.description
          == "command line (output.rate): output.rate: 1000 Hz is outside 8000...384000")
      #expect(
        loadFailure(overrides: ["output.devise": "hw:1"])?.description
          == "command line (output.devise): output.devise: unknown key (did you mean output.device?)")
      #expect(
        loadFailure(environment: ["RAMPD_OUTPUT_DEVIC": "hw:1"])?.description
          == "environment (RAMPD_OUTPUT_DEVIC): not a configuration variable (did you mean RAMPD_OUTPUT_DEVICE?)")
      #expect(
        loadFailure(environment: ["RAMPD_NOTHING_LIKE_IT": "1"])?.description
          == "environment (RAMPD_NOTHING_LIKE_IT): not a configuration variable")
      #expect(
        loadFailure(environment: ["RAMPD_MIXER_MASTER_CARD": "hw:0"])?.description
          == "environment (RAMPD_MIXER_MASTER_CARD): mixer bindings are configured in the file only ([[mixer]] tables)")

      // Cross-key: the buffer is blamed on the later of the layers that set the buffer and the period.
      let fromFile = loadFailure(file: file, environment: ["RAMPD_OUTPUT_PERIOD": "25ms"])
      #expect(
        fromFile?.description
          == "environment (RAMPD_OUTPUT_PERIOD): output.buffer: 0.045 s is less than two periods (2 × 0.025 s)")
      let fromFlag = loadFailure(file: file, overrides: ["output.buffer": "30ms"], flags: ["output.buffer": "--buffer"])
      #expect(fromFlag?.description == "--buffer: output.buffer: 0.03 s is less than two periods (2 × 0.02 s)")
      // Only the file: its line.
      try "# x\n[output]\nperiod = \"30ms\"\nbuffer = \"45ms\"\n".write(toFile: file, atomically: true, encoding: .utf8)
      #expect(
        loadFailure(file: file)?.description
          == "\(file):4: output.buffer: 0.045 s is less than two periods (2 × 0.03 s)")
    }

    @Test func missingOrUnreadableFile() throws {
      let directory = try temporaryDirectory()
      defer { try? FileManager.default.removeItem(atPath: directory) }
      let missing = directory + "/nope.toml"
      #expect(
        loadFailure(file: missing)
          == ConfigurationError(
            source: missing, message: "cannot open the configuration file: No such file or directory")
      )
      #expect(
        loadFailure(file: directory)
          == ConfigurationError(source: directory, message: "cannot read the configuration file: Is a directory"))
      let binary = directory + "/binary.toml"
      try Data([0x5B, 0xFF, 0xFE, 0x5D]).write(to: URL(fileURLWithPath: binary))
      #expect(
        loadFailure(file: binary)
          == ConfigurationError(source: binary, message: "the configuration file is not UTF-8 text"))
    }

    @Test func environmentVariableNamesAreUnique() {
      let keys = DaemonConfiguration().summary().map(\.key)
      let names = keys.map {
        "RAMPD_" + $0.uppercased().replacingOccurrences(of: "-", with: "_").replacingOccurrences(of: ".", with: "_")
      }
      #expect(Set(names).count == names.count)
      // Every one of them is accepted with its default rendered as a string.
      for (key, value) in DaemonConfiguration().summary() {
        let name =
          "RAMPD_" + key.uppercased().replacingOccurrences(of: "-", with: "_").replacingOccurrences(of: ".", with: "_")
        var text = value
        if text.hasPrefix("\"") { text = String(text.dropFirst().dropLast()) }
        if text == "[]" { text = "" }
        #expect(
          (try? DaemonConfiguration.load(file: nil, environment: [name: text], overrides: [:]))
            == DaemonConfiguration(),
          "\(name)=\(text)")
        #expect(
          (try? DaemonConfiguration.load(file: nil, environment: [:], overrides: [key: text])) == DaemonConfiguration(),
          "\(key)=\(text)")
      }
    }
  }
}

// MARK: - Round trip

extension ConfigurationTests {
  @Suite struct RoundTrip {
    @Test func defaultsRoundTrip() throws {
      let c = DaemonConfiguration()
      #expect(try DaemonConfiguration.parse(toml: c.rendered, source: "rendered") == c)
    }

    @Test func everythingChangedRoundTrips() throws {
      var c = DaemonConfiguration()
      c.socket = SocketSettings(path: "/tmp/with \"quote\" and \\ back.sock", mode: 0o640, group: "audio")
      c.output = OutputConfiguration(
        device: "plug:'dmix'", sampleRate: 44_100, channels: 1, format: .s16, periodTime: 0.0123456789,
        bufferTime: 0.1, pacing: .device)
      c.embeddedOutput = EmbeddedOutputSettings(enabled: false, path: "/tmp/ü.wav")
      c.fades = FadeDefaults(duration: 1830.5, curve: .fade(.losi), space: .decibels(floor: -75.5), decibelFloor: -80)
      c.transaction.duration = 1e-5
      c.transaction.timingFunction = try TimingFunction.bezier(0.1, -0.3, 0.7, 1.4)
      c.transaction.valueSpace = .decibels(floor: -80)
      c.transaction.continuity = .slope
      c.transaction.disableActions = true
      c.maxGainDecibels = 7.25
      c.declick = 0.0015
      c.mixers = [
        MixerBindingConfiguration(name: "master", card: "hw:0", element: "Master"),
        MixerBindingConfiguration(
          name: "b-2", card: "x", element: "PCM", index: 3, controlRate: 33.3, minimumDecibels: -90.5),
      ]
      c.limits = Limits(
        clients: 3, lineLength: 2048, streams: 2, observersPerClient: 0, maxObserveRate: 12.5, pendingScheduled: 0,
        animationsPerKeyPath: 7, idleTimeout: 90.5)
      c.media.roots = ["/srv/a", "/srv/b c"]
      c.access = AccessSettings(users: ["*", "1000", "alice"], groups: ["audio", "29"])
      c.socket.mode = 0o640
      c.log.level = .critical
      c.state.path = "/var/tmp/s.json"

      let text = c.rendered
      let back = try DaemonConfiguration.parse(toml: text, source: "rendered")
      #expect(back == c, "\(text)")
      #expect(back.rendered == text)
      #expect(text.contains("duration = \"30m30.5s\""))
      #expect(text.contains("space = \"db(-75.5)\""))
      #expect(text.contains("[[mixer]]\nname = \"master\""))
    }

    @Test func renderedText() {
      let text = DaemonConfiguration().rendered
      #expect(text.contains("[socket]\npath = \"\"  # default\nmode = \"\"  # default\ngroup = \"\"  # default\n"))
      #expect(text.contains("animations-per-key-path = 64\nidle-timeout = \"5m\"\n"))
      #expect(text.contains("[access]\nusers = []\ngroups = []\n"))
      #expect(
        text.contains(
          "[output]\ndevice = \"default\"\nrate = 48000\nchannels = 2\nformat = \"auto\"\nperiod = \"10ms\"\nbuffer = \"50ms\"\npacing = \"auto\"\n"
        ))
      #expect(
        text.contains(
          "[fade]\nduration = \"1s\"\ncurve = \"ease-in-out\"\nspace = \"amplitude\"\ndb-floor = \"-60dB\"\n")
      )
      #expect(text.contains("[gain]\nmax = \"0dB\"\ndeclick = \"10ms\"\n"))
      let summary = DaemonConfiguration().summary()
      #expect(summary.first! == ("socket.path", "\"\""))
      #expect(summary.contains { $0 == ("limits.line-length", "65536") })
    }
  }
}

// MARK: - Media roots

extension ConfigurationTests {
  @Suite struct MediaRoots {
    @Test func resolveAndRefuse() throws {
      let base = try temporaryDirectory()
      defer { try? FileManager.default.removeItem(atPath: base) }
      let fm = FileManager.default
      try fm.createDirectory(atPath: base + "/music/album", withIntermediateDirectories: true)
      try fm.createDirectory(atPath: base + "/secret", withIntermediateDirectories: true)
      _ = fm.createFile(atPath: base + "/music/album/song.flac", contents: Data([1]))
      _ = fm.createFile(atPath: base + "/secret/key.wav", contents: Data([1]))
      _ = fm.createFile(atPath: base + "/musicx.wav", contents: Data([1]))
      try fm.createSymbolicLink(atPath: base + "/music/escape.wav", withDestinationPath: base + "/secret/key.wav")
      try fm.createSymbolicLink(atPath: base + "/music/inside.wav", withDestinationPath: "album/song.flac")
      try fm.createSymbolicLink(atPath: base + "/music/up", withDestinationPath: "..")
      // The root itself through a symbolic link.
      try fm.createSymbolicLink(atPath: base + "/link-to-music", withDestinationPath: base + "/music")

      let canonicalBase = MediaSettingsProbe.realPath(base)
      let song = canonicalBase + "/music/album/song.flac"
      let media = MediaSettings(roots: [base + "/music"])

      #expect(try media.resolve(base + "/music/album/song.flac") == song)
      #expect(try media.resolve("album/song.flac") == song)
      #expect(try media.resolve("./album/../album/song.flac") == song)
      #expect(try media.resolve("inside.wav") == song)
      #expect(try MediaSettings(roots: [base + "/link-to-music"]).resolve("album/song.flac") == song)

      func reason(_ settings: MediaSettings, _ path: String) -> MediaPathError.Reason? {
        do {
          _ = try settings.resolve(path)
          return nil
        } catch {
          return error.reason
        }
      }
      #expect(reason(media, "escape.wav") == .outsideRoots)
      #expect(reason(media, "up/secret/key.wav") == .outsideRoots)
      #expect(reason(media, "../secret/key.wav") == .outsideRoots)
      #expect(reason(media, base + "/secret/key.wav") == .outsideRoots)
      #expect(reason(media, base + "/musicx.wav") == .outsideRoots)
      // Missing files: outside the roots is "outside" (no probing), inside is "not found".
      #expect(reason(media, base + "/secret/missing.wav") == .outsideRoots)
      #expect(reason(media, "missing.wav") == .notFound("No such file or directory"))
      #expect(reason(media, "album") == .notAFile)
      // Relative paths go under the first root only.
      let two = MediaSettings(roots: [base + "/secret", base + "/music"])
      #expect(reason(two, "album/song.flac") == .notFound("No such file or directory"))
      #expect(try two.resolve(base + "/music/album/song.flac") == song)
      #expect(try two.resolve("key.wav") == canonicalBase + "/secret/key.wav")
      #expect(reason(media, "") == .empty)

      // No roots: any absolute path, never a relative one.
      let open = MediaSettings()
      #expect(try open.resolve(base + "/secret/key.wav") == canonicalBase + "/secret/key.wav")
      #expect(try open.resolve(base + "/music/escape.wav") == canonicalBase + "/secret/key.wav")
      #expect(reason(open, "song.flac") == .relativeWithoutRoots)
      #expect(reason(open, base + "/none.wav") == .notFound("No such file or directory"))

      #expect(
        MediaPathError(path: "x.wav", reason: .outsideRoots).description == "'x.wav' is outside the media roots")
      #expect(
        MediaPathError(path: "x.wav", reason: .relativeWithoutRoots).description
          == "'x.wav' is a relative path; send an absolute path")
    }
  }
}

/// `realpath` for the expectations (the temporary directory may itself be behind a link).
private enum MediaSettingsProbe {
  static func realPath(_ path: String) -> String {
    URL(fileURLWithPath: path).resolvingSymlinksInPath().path
  }
}

// MARK: - The level-triggered crossfade

extension ConfigurationTests {
  @Suite struct QueueLevel {
    @Test func crossfadeLevelAndWindow() throws {
      let on = try parse("[queue]\ncrossfade-level = \"-35dB\"\ncrossfade-window = \"8s\"")
      #expect(on.queue.level == -35 && on.queue.window == 8)
      let off = try parse("[queue]\ncrossfade-level = \"off\"")
      #expect(off.queue.level == nil && off.queue.window == 10)
      #expect(try parse("[queue]\ncrossfade-level = -120").queue.level == -120)
    }

    @Test(arguments: [
      ("[queue]\ncrossfade-level = 3", #"test:2: queue.crossfade-level: 3 dB is outside -120 dB...0 dB (or "off")"#),
      ("[queue]\ncrossfade-level = \"on\"", "test:2: queue.crossfade-level: expected"),
      ("[queue]\ncrossfade-window = 0", "test:2: queue.crossfade-window: must be above 0, got 0 s"),
      ("[queue]\ncrossfade-window = \"2m\"", "test:2: queue.crossfade-window: 120 s is outside 0 s...60 s"),
    ])
    func invalid(toml: String, expected: String) {
      #expect(failure(toml).hasPrefix(expected), "\(failure(toml))")
    }
  }
}

// MARK: - Loudness-normalised playback

extension ConfigurationTests {
  @Suite struct PlaybackLoudness {
    @Test func targetsAndCeiling() throws {
      let defaults = try parse("")
      #expect(defaults.playback.loudness == nil && defaults.playback.ceiling == -1 && defaults.queue.loudness == nil)
      let on = try parse(
        "[playback]\nloudness = \"-18LUFS\"\nloudness-ceiling = \"-2dBTP\"\n[queue]\nloudness = \"-16 lufs\"")
      #expect(on.playback.loudness == -18 && on.playback.ceiling == -2 && on.queue.loudness == .target(-16))
      #expect(try parse("[queue]\nloudness = \"off\"").queue.loudness == .off)
      #expect(try parse("[queue]\nloudness = \"playback\"").queue.loudness == nil)
      #expect(try parse("[playback]\nloudness-ceiling = 0").playback.ceiling == 0)
      // What the summary writes reads back the same.
      let summary = Dictionary(uniqueKeysWithValues: on.summary())
      #expect(summary["playback.loudness"] == "\"-18LUFS\"" && summary["playback.loudness-ceiling"] == "\"-2dBTP\"")
      #expect(summary["queue.loudness"] == "\"-16LUFS\"")
    }

    @Test(arguments: [
      ("[playback]\nloudness = -18", "test:2: playback.loudness: expected a string with its unit such as \"-18LUFS\""),
      ("[playback]\nloudness = \"-18\"", "test:2: playback.loudness: '-18' is not valid (no unit: write LUFS"),
      ("[playback]\nloudness = \"5\"", "test:2: playback.loudness: '5' is not valid (no unit: write LUFS"),
      ("[playback]\nloudness = \"+3LUFS\"", "test:2: playback.loudness: '+3LUFS' is above the maximum, -5 LUFS"),
      ("[playback]\nloudness = \"-80LUFS\"", "test:2: playback.loudness: '-80LUFS' is below the minimum, -60 LUFS"),
      (
        "[playback]\nloudness-ceiling = \"1dBTP\"",
        "test:2: playback.loudness-ceiling: 1 dBTP is outside -20 dBTP...0 dBTP"
      ),
      ("[playback]\nloudness-ceiling = \"loud\"", "test:2: playback.loudness-ceiling: expected a true-peak level"),
      ("[queue]\nloudness = \"-18dB\"", "test:2: queue.loudness: '-18dB' is not valid (no LUFS unit)"),
    ])
    func invalid(toml: String, expected: String) {
      #expect(failure(toml).hasPrefix(expected), "\(failure(toml))")
    }
  }
}
