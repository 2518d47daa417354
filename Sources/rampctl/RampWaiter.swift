import FoundationEssentials
import RampCLI
import RampProtocol

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// `--wait`: sends `wait` for the ramp's animations and reads until it replies (and until the
/// streams a stop releases have ended). On a terminal it observes the key path at 30 Hz and
/// redraws one progress line; otherwise it prints plain lines when things end.
struct RampWaiter {
  let connection: DaemonConnection
  let json: Bool
  var live: Bool { !json && Output.isTerminal }

  static let observeRate = 30.0

  func wait(for ramp: RampWait, alreadyEnded: [String] = []) throws(ClientFailure) {
    Interruption.catchSignals()
    let started = Date()
    var progress = ProgressLine(total: ramp.duration, isGain: ramp.observe.map(ReplyText.isGain) ?? true)
    var pendingStreams = Set(ramp.streams).subtracting(alreadyEnded)
    var observeID: JSONValue?
    var levelIDs: [JSONValue] = []
    let levelScope = ramp.observe.flatMap(Self.levelScope)
    if live, let key = ramp.observe {
      observeID = try connection.send(Request(.observe(key: key, rate: Self.observeRate)))
      if let levelScope {
        for reading in ["peak", "momentary"] {
          levelIDs.append(
            try connection.send(Request(.observe(key: "\(levelScope).\(reading)", rate: Self.observeRate))))
        }
      }
    }
    var waitID: JSONValue?
    if !ramp.animations.isEmpty || ramp.key != nil {
      let wait = Wait(animations: ramp.animations.isEmpty ? nil : ramp.animations, key: ramp.key, timeout: ramp.timeout)
      waitID = try connection.send(Request(.wait(wait)))
    }
    var waitOutcome: JSONValue?
    var drawn = false

    func handle(_ received: ReceivedLine) throws(ClientFailure) {
      switch received.line {
      case .reply(let id, let result) where id == waitID:
        switch result {
        case .success(let value): waitOutcome = value
        case .failure(let error): throw connection.refusal(error, line: received.text)
        }
        if json { Output.print(received.text) }
      case .reply(let id, _) where id == observeID || id.map(levelIDs.contains) == true:
        // A key path that cannot be observed only costs its number on the progress line.
        break
      case .event(.value(let key, let value, _)) where key == ramp.observe:
        progress.value = value
      case .event(.value(let key, let value, _)) where levelScope.map({ key == "\($0).peak" }) == true:
        progress.peak = value
      case .event(.value(let key, let value, _)) where levelScope.map({ key == "\($0).momentary" }) == true:
        progress.momentary = value
      case .event(.streamEnded(let stream, let reason, _)) where pendingStreams.contains(stream):
        pendingStreams.remove(stream)
        if json {
          Output.print(received.text)
        } else if !live {
          Output.print("stream \(stream) ended (\(reason.rawValue))")
        }
      default:
        break
      }
    }

    do throws(ClientFailure) {
      while (waitID != nil && waitOutcome == nil) || !pendingStreams.isEmpty {
        if let received = try connection.nextLine(until: Date().addingTimeInterval(1 / Self.observeRate)) {
          try handle(received)
        }
        if live {
          progress.elapsed = Date().timeIntervalSince(started)
          Output.write("\r" + progress.text + "\u{1B}[K")
          drawn = true
        }
      }
    } catch {
      if drawn { Output.write("\n") }
      throw error
    }
    let elapsed = Date().timeIntervalSince(started)
    if live {
      // The last report may be a frame old: the line ends on the value audible now.
      if let key = ramp.observe, let now = try? connection.call(Request(.get(key: key))),
        let value = now.result["presentation"]?.numberValue
      {
        progress.value = value
      }
      progress.elapsed = ramp.duration.map { max($0, 0) } ?? elapsed
      Output.write("\r" + progress.text + "\u{1B}[K\n")
    }
    if !json, !live || waitOutcome.map(Self.anyRemoved) == true {
      for outcome in waitOutcome?["animations"]?.arrayValue ?? [] {
        let id = outcome["id"].map { $0.serialized() } ?? "?"
        let finished = outcome["finished"] == true
        Output.print("animation #\(id) \(finished ? "finished" : "was removed or replaced before its end")")
      }
    }
  }

  /// Whose signal level goes beside a ramp of `key`: `streams.<id>.level` for a stream's gain,
  /// transport or pan, `master.level` for the master's; nil for anything else.
  static func levelScope(of key: String) -> String? {
    if key == "master.gain" { return "master.level" }
    guard key.hasPrefix("streams."), let dot = key.lastIndex(of: "."),
      ["gain", "transport", "pan"].contains(String(key[key.index(after: dot)...]))
    else { return nil }
    return String(key[..<dot]) + ".level"
  }

  private static func anyRemoved(_ outcome: JSONValue) -> Bool {
    (outcome["animations"]?.arrayValue ?? []).contains { $0["finished"] == false }
  }
}
