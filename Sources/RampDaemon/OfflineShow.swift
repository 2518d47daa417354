import FoundationEssentials
import Logging
import NIOCore
import RampAudio
import RampEngine
import RampProtocol
import Synchronization

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// What `rampctl render` asks of an ``OfflineShow``.
public struct ShowOptions: Sendable {
  /// A file that plays as stream `main` from the first sample (nil: only what the timeline plays).
  public var input: String?
  public var output: String
  /// Seconds of fade-in on `streams.main.gain` from the start (nil: none).
  public var fadeIn: Double?
  /// Seconds of fade-out on `master.gain` ending at the end of the input (or of `duration`).
  public var fadeOut: Double?
  public var curve: TimingFunction = .linear
  public var valueSpace: ValueSpace = .amplitude
  /// Nil: the input's own encoding when the output can hold it, else 24-bit PCM.
  public var encoding: SampleEncoding?
  public var timeline: [Timeline.Entry] = []
  /// Seconds of output; nil: until the last stream ends and the last animation settles.
  public var duration: Double?
  /// A loudness to normalise the whole render to, LUFS (nil: none): the render is measured, then
  /// rendered again with one constant gain, held under `configuration.playback.ceiling`.
  public var loudness: Double?
  /// Frames per block: the render loop's period.
  public var blockFrames = OfflineShow.defaultBlockFrames
  /// The daemon's defaults and limits the commands are prepared with (declick, gain.max, fades).
  public var configuration = DaemonConfiguration()
  /// Asked between blocks; true stops the render (``OfflineShow/Interrupted``) and the output stays
  /// as it was.
  public var isCancelled: @Sendable () -> Bool = { false }

  public init(input: String?, output: String) {
    self.input = input
    self.output = output
  }
}

public struct RenderSummary: Sendable {
  public let frames: Int64
  public let sampleRate: Int
  public let channels: Int
  public let encoding: SampleEncoding
  /// Why the encoding is not the one the input has, when that was chosen for the user (a 32-bit
  /// input to FLAC, which holds 24 bits at most); nil otherwise.
  public let encodingNote: String?
  /// With ``ShowOptions/loudness``: the render's measured loudness and the gain applied to it.
  public let normalisation: LoudnessTrim?
  /// The master limiter as the render left it (`[output] limiter`); nil when it is off.
  public let limiter: LimiterReport?
}

/// A show rendered offline by rampd's own parts: the timeline's requests go through the
/// ``Controller`` (the daemon's preparation and command application) into a ``Player`` whose
/// output is a sound file on a virtual clock (``SoundFileSink``): the render loop, mix, transport
/// ramps, resampling, channel mapping and clamping of live playback, as fast as the disk allows.
/// A line's `at` is seconds from the start, applied on the exact sample it names.
public enum OfflineShow {
  public static let defaultBlockFrames = 4096

  /// Commands a render runs; the others need a live daemon (a connection, events, replies).
  public static let renderable: Set<String> = [
    "play", "stop", "pause", "resume", "seek", "fade", "fade-in", "fade-out", "set", "animate", "cancel", "remove",
    "batch",
  ]

  /// A render stopped by ``ShowOptions/isCancelled``: nothing was written.
  public struct Interrupted: Error, CustomStringConvertible {
    public var description: String { "interrupted; nothing was written" }
  }

  /// A render that cannot be done; `description` says why (naming the line, for a timeline's).
  public struct Failure: Error, CustomStringConvertible {
    public var description: String
    init(_ description: String) { self.description = description }
  }

  /// Refuses what a render cannot run: commands that need a live daemon, clock times. Every bad
  /// line is reported.
  public static func check(_ timeline: [Timeline.Entry]) throws(Timeline.Failure) {
    var messages: [String] = []
    for entry in timeline {
      let command = entry.request.command
      let inner = command.batched ?? []
      if let refused = ([command] + inner).first(where: { !renderable.contains($0.name) }) {
        messages.append(
          entry.error(
            "cmd: '\(refused.name)' needs a live daemon and cannot be rendered; a render runs "
              + renderable.sorted().joined(separator: ", ")
          ).description)
      } else if let queued = ([command] + inner).first(where: \.playsQueue) {
        messages.append(
          entry.error(
            "queue: '\(queued.name)' with a queue needs a live daemon (its items are opened as it plays) and cannot"
              + " be rendered; play the files one after another with at instead"
          ).description)
      } else if case .date? = entry.at {
        messages.append(
          entry.error(
            "at: a clock time means nothing in a render, which counts seconds from its start (12, \"12s\", \"+1m30s\")"
          ).description)
      } else if let field = liveOnlyField(of: entry.request) {
        messages.append(entry.error(field).description)
      }
    }
    if !messages.isEmpty { throw Timeline.Failure(messages: messages) }
  }

  /// What a line asks of its schedule that only a live daemon does, as the refusal's text: a
  /// render runs each line once, at its `at`. (`ack`, `tag` and `yield` without `repeat` are
  /// refused by every timeline's reader.)
  static func liveOnlyField(of request: Request) -> String? {
    guard request.repeats != nil else { return nil }
    return "repeat: a render runs each line once; a schedule that comes back needs a live daemon"
  }

  /// Renders the show into `options.output` (replaced only once the render is complete).
  ///
  /// With ``ShowOptions/loudness`` the show is rendered twice, as ffmpeg's two-pass `loudnorm`
  /// is run: first into a measurement only (nothing is written), then into the file, every
  /// sample of the mix multiplied by one gain (``LoudnessTrim``, the rule `play --loudness`
  /// follows). Rendering again rather than scaling a first output keeps the output quantised once,
  /// from the float mix, whatever its encoding (a lossy or 16-bit first pass would be encoded
  /// twice), and needs no temporary copy of the whole render: a render is deterministic, so the
  /// second pass is the first sample for sample.
  ///
  /// - Throws: ``Timeline/Failure`` for lines a render cannot run; ``AudioError`` for an
  ///   unreadable input, an output that is a file the show plays, an unwritable output;
  ///   ``Failure`` for a line refused when it runs or due after the end; ``Interrupted``.
  public static func render(_ options: ShowOptions) throws -> RenderSummary {
    try check(options.timeline)
    // The controller runs on a loop of its own (`ControlLoop`), and the whole show with it: each
    // line reaches the player on the loop, before the render goes on.
    let (control, group) = ControlLoop.standalone()
    defer { try? group.syncShutdownGracefully() }
    return try control.run { try render(options, on: control) }
  }

  private static func render(_ options: ShowOptions, on control: ControlLoop) throws -> RenderSummary {
    let plays = options.timeline.flatMap { entry in
      ([entry.request.command] + (entry.request.command.batched ?? [])).compactMap {
        command -> (Timeline.Entry, String)? in
        if case .play(let play) = command { return (entry, play.path) }
        return nil
      }
    }
    // The output's rate, channels and encoding are those of the input, else of the first file played.
    guard let source = options.input ?? plays.first?.1 else {
      throw Failure("nothing to render: give an input file, or a timeline that plays one")
    }
    let reader = try SoundFileReader(path: source)
    try SoundFileSink.checkDistinct(reader, output: options.output)
    for (entry, path) in plays where ReplacementFile.sameFile(path, options.output) {
      throw Failure(entry.error("path: '\(path)' is the output; write to another file").description)
    }
    let rate = reader.sampleRate
    let channels = reader.channels
    let (encoding, note) = SoundFileSink.chooseEncoding(
      options.encoding, input: reader.encoding, output: options.output)
    let limit = options.duration.map { Int64(($0 * Double(rate)).rounded()) }
    var fadeOutEnd: Double?
    if options.fadeOut != nil {
      if let duration = options.duration {
        fadeOutEnd = duration
      } else if options.input != nil, reader.frames > 0, reader.frames < Int64.max / 2 {
        fadeOutEnd = Double(reader.frames) / Double(rate)
      } else {
        throw Failure(
          options.input == nil
            ? "--fade-out needs an input file or --duration: it ends at the end"
            : "cannot fade out '\(source)': its length is unknown")
      }
    }

    // Large enough for any stream's ring to hold a block and the ramp after it.
    let block = max(min(options.blockFrames, rate / 4), 64)
    let writer = try SoundFileWriter(path: options.output, sampleRate: rate, channels: channels, encoding: encoding)
    let sink = SoundFileSink(writer: writer, blockFrames: block)
    var limiter: LimiterReport?
    /// Plays the show into `sink` and returns its length in frames.
    func play(into sink: SoundFileSink) throws -> Int64 {
      sink.limit = limit
      var configuration = options.configuration
      configuration.limits.pendingScheduled = Player.maximumScheduled
      let player = try Player(
        sink: sink, rate: rate, channels: channels, blockFrames: block, declick: configuration.declick,
        maxGain: configuration.maxGain, limiter: configuration.output.limiter)
      defer { player.finishOffline() }
      // The show's clock stands at 0: a delay counts from there, so it is exactly its sample.
      let controller = Controller(
        player: player, configuration: configuration, clock: { 0 }, control: control,
        logger: Logger(label: "rampd.render") { _ in SwiftLogNoOpLogHandler() })
      // Set up as a daemon with this configuration starts: its duck rules act on the show.
      configuration.setUp(player)
      let client = CollectingClient()

      // What the command line adds, as requests of its own.
      var requests: [(label: String, request: Request)] = []
      if let input = options.input {
        // A play request names a file by its absolute path.
        let absolute = input.hasPrefix("/") ? input : FileManager.default.currentDirectoryPath + "/" + input
        requests.append(("input", Request(.play(Play(path: absolute, stream: "main")))))
      }
      if let fadeIn = options.fadeIn, fadeIn > 0 {
        let fade = Fade(
          kind: .fade, key: "streams.main.gain", from: 0, to: 1, duration: fadeIn, curve: options.curve,
          space: options.valueSpace)
        requests.append(("--fade-in", Request(.fade(fade))))
      }
      if let fadeOut = options.fadeOut, fadeOut > 0, let end = fadeOutEnd {
        var request = Request(
          .fade(
            Fade(
              kind: .fade, key: "master.gain", from: 1, to: 0, duration: fadeOut, curve: options.curve,
              space: options.valueSpace)))
        let start = max(end - fadeOut, 0)
        if start > 0 { request.at = .delay(start) }
        requests.append(("--fade-out", request))
      }
      let firstLine = requests.count
      for entry in options.timeline {
        var request = entry.request
        request.at = entry.offset > 0 ? .delay(entry.offset) : nil
        request.ack = .applied
        requests.append(("\(entry.label): \(request.command.name)", request))
      }
      func sample(_ request: Request) -> Int64 {
        if case .delay(let seconds)? = request.at { return Int64((seconds * Double(rate)).rounded()) }
        return 0
      }
      func checkReplies() throws {
        controller.deliverEvents()
        if let (sequence, error) = client.firstFailure() {
          throw Failure("\(requests[sequence].label): \(error.summary)")
        }
      }
      // Lines go to the player as the render reaches them, before the block they fall in: a
      // timeline of any length renders, though the command queue and the schedule hold a few
      // thousand. Those due in the same block go in parts, each taken before the next.
      let due = requests.map { sample($0.request) }
      let order = requests.indices.sorted { (due[$0], $0) < (due[$1], $1) }
      var submitted = 0
      func submit(dueBefore end: Int64) throws {
        var part = 0
        while submitted < order.count, due[order[submitted]] < end {
          let sequence = order[submitted]
          // A delay counts from the player's current sample: what is left of the line's. An
          // integer number of frames over the rate, it converts back to exactly that many.
          var request = requests[sequence].request
          let ahead = due[sequence] - player.currentSample
          request.at = ahead > 0 ? .delay(Double(ahead) / Double(rate)) : nil
          controller.handle(request, from: client, sequence: sequence)
          if sequence == 0 && options.input != nil {
            // The input starts on its first sample, as the file does: no declick ramp in.
            player.submit(PreparedRemoval(key: "declick", from: "streams.main.transport"))
          }
          submitted += 1
          part += 1
          if part == Self.linesPerPart {
            player.takeCommandsOffline()
            try checkReplies()
            part = 0
          }
        }
      }
      try submit(dueBefore: 1)
      try checkReplies()

      // Lines that bring sound back after a silence keep the show going until they have run.
      let revivals = (firstLine..<requests.count).filter { line in
        let command = requests[line].request.command
        return ([command] + (command.batched ?? [])).contains {
          if case .play = $0 { return true }
          if case .resume = $0 { return true }
          return false
        }
      }.map { due[$0] }
      var rendered: Int64 = 0
      var end: Int64
      while true {
        if options.isCancelled() { throw Interrupted() }
        try submit(dueBefore: rendered + Int64(block))
        try player.renderOffline()
        rendered += Int64(block)
        try checkReplies()
        if let limit {
          if rendered >= limit {
            end = limit
            break
          }
          continue
        }
        if let settled = player.inspectOffline({ settledEnd($0, now: rendered) }),
          !revivals.contains(where: { $0 >= rendered })
        {
          end = settled
          break
        }
      }
      if let late = (firstLine..<requests.count).first(where: { due[$0] > end }) {
        func seconds(_ value: Double) -> String {
          let rounded = (value * 1000).rounded() / 1000
          return rounded == rounded.rounded() ? "\(Int64(rounded)) s" : "\(rounded) s"
        }
        let at = Double(due[late]) / Double(rate)
        throw Failure(
          "\(requests[late].label): at \(seconds(at)) is after the end of the render, which is "
            + "\(seconds(Double(end) / Double(rate))) long (\(end) frames at \(rate) Hz)")
      }
      // The limiter's latency: the show's last samples are still in its delay line.
      while sink.received < end {
        if options.isCancelled() { throw Interrupted() }
        try player.renderOffline()
      }
      if options.isCancelled() { throw Interrupted() }
      try sink.finish(frames: end)
      limiter = player.limiter
      return end
    }

    guard let target = options.loudness else {
      let end = try play(into: sink)
      return RenderSummary(
        frames: end, sampleRate: rate, channels: channels, encoding: encoding, encodingNote: note, normalisation: nil,
        limiter: limiter)
    }
    let measurement = try LoudnessMeasurement(channels: channels, sampleRate: rate, name: "the render")
    let measured = try play(into: SoundFileSink(measuring: measurement, blockFrames: block))
    let trim = LoudnessTrim(
      target: LoudnessTarget(loudness: target, ceiling: options.configuration.playback.ceiling),
      loudness: measurement.result)
    sink.gain = trim.factor
    let end = try play(into: sink)
    guard end == measured else {
      // Only a file changed between the passes can make them differ.
      throw Failure(
        "the render measured \(measured) frames long and then rendered \(end): did a file it plays change?")
    }
    return RenderSummary(
      frames: end, sampleRate: rate, channels: channels, encoding: encoding, encodingNote: note, normalisation: trim,
      limiter: limiter)
  }

  /// Timeline lines submitted before the player takes them: well under the command queue's
  /// room (4096), for lines that are batches.
  static let linesPerPart = 1024

  /// The show's end once nothing sounds or moves any more: no stream plays (none left, or every
  /// one paused) and no animation with an end is still running; nil before. The end is where the
  /// last stream's audio ran out or the last animation ended. An animation that never ends (an
  /// endless repeat) does not hold the show open.
  static func settledEnd(_ state: RenderState, now: Int64) -> Int64? {
    if state.streamSnapshots.contains(where: { !$0.paused }) { return nil }
    let engine = state.engine
    for path in engine.keyPaths {
      for animation in (try? engine.animations(on: path)) ?? [] {
        if let end = animation.endSample, end > now { return nil }
      }
    }
    return max(state.audioEnd, state.settled)
  }
}

extension Command {
  /// The commands of a batch; nil for any other command.
  var batched: [Command]? {
    if case .batch(let requests) = self { return requests.map(\.command) }
    return nil
  }
}

/// The show's one client: it keeps the replies, so a refused line stops the render.
private final class CollectingClient: Client, @unchecked Sendable {
  private let failures = Mutex<[(Int, ProtocolError)]>([])

  func reply(_ line: JSONValue, sequence: Int) {
    guard case .reply(_, .failure(let failure))? = try? ServerLine.parse(line.serialized()) else { return }
    failures.withLock { $0.append((sequence, failure)) }
  }

  func event(_ line: String) {}
  var awaitsNoOtherReply: Bool { false }
  var confinedToMediaRoots: Bool { false }

  /// The refusal of the earliest request refused so far.
  func firstFailure() -> (Int, ProtocolError)? {
    failures.withLock { $0.min { $0.0 < $1.0 } }
  }
}

extension Command {
  /// A `play` with a queue: a render cannot run it.
  var playsQueue: Bool {
    if case .play(let play) = self { return play.queue != nil }
    return false
  }
}
