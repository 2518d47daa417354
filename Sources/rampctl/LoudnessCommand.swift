import ArgumentParser
import Dispatch
import FoundationEssentials
import RampAudio
import RampCLI
import RampEngine
import RampProtocol
import RampSystem
import Synchronization

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// `rampctl loudness`: EBU R 128 loudness of files, measured here (no daemon needed).
struct LoudnessCommand: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "loudness",
    abstract: "Measure the loudness of audio files (EBU R 128): integrated, range, true peak.",
    discussion: """
      Each file (anything libsndfile reads) is read to its end and measured with libebur128 as \
      ITU-R BS.1770 says: integrated loudness in LUFS, loudness range in LU, and the highest true \
      peak of any channel in dBTP. Files are measured in parallel, as many at a time as there are \
      cores; on a terminal, standard error shows how far it has come.

      A measurement is kept in a cache, loudness.cache in rampd's state directory \
      ($XDG_STATE_HOME/rampd, else ~/.local/state/rampd, as root /var/lib/rampd), under the \
      file's device, inode, size and modification time: a file is measured once, until it \
      changes. A cache that cannot be read is ignored and written anew; one that cannot be \
      written is said on standard error, and the measurements are printed all the same.

      A file shorter than 0.4 s (one gating block) or silent (no block reaches the -70 LUFS \
      gate) has no integrated loudness: it prints as -inf, with the reason after the file name \
      (in JSON, "integrated": null and "unmeasured": "too-short" or "silent"). A true peak of \
      -inf (null) means every sample is zero. A file that cannot be read is told on standard \
      error; the others are measured, and the exit status is 65.

      --json prints one JSON object per file, in the order given: path, integrated, range, \
      truePeak, duration (s), sampleRate, channels, cached, and unmeasured when integrated is \
      null; or path and error (code, message) for a file that could not be measured.

      Examples:
        rampctl loudness bed.flac jingle.wav
        rampctl loudness --json music/*.flac | jq -r 'select(.integrated) | "\\(.integrated) \\(.path)"'
      """)

  @Argument(help: ArgumentHelp("The files to measure.", valueName: "file"), completion: .file())
  var files: [String] = []

  /// The global options' type, for `--json`: ArgumentParser gives a subcommand's own `--json`
  /// to the root command's group of the global options instead. Only `--json` is taken.
  @OptionGroup(visibility: .hidden) var connection: ConnectionOptions
  var json: Bool { connection.json }

  @Flag(help: "Measure every file again; neither read nor write the cache.")
  var noCache = false

  func validate() throws {
    guard connection.socket == nil else {
      throw ValidationError("--socket: 'loudness' does not talk to rampd, so it takes no --socket")
    }
    guard !files.isEmpty else { throw ValidationError("give at least one file to measure") }
  }

  func run() throws {
    let environment = ProcessInfo.processInfo.environment
    var cache: LoudnessCache?
    if !noCache {
      let loaded = LoudnessCache(loading: LoudnessSurvey.cachePath(environment: environment, isRoot: geteuid() == 0))
      if let problem = loaded.problem {
        Output.error("loudness: ignoring the cache \(loaded.path) (\(problem)); it is written anew")
      }
      cache = loaded
    }
    let progress = LoudnessSurvey.Progress(files: files.count)
    let drawer = isatty(STDERR_FILENO) != 0 ? ProgressDrawer(progress) : nil
    let entries = LoudnessSurvey.measure(files, cache: &cache, progress: progress)
    drawer?.stop()

    var failed = false
    for entry in entries {
      if case .failure(let error) = entry.outcome {
        failed = true
        Output.error("loudness: \(error.message)")
      }
    }
    if json {
      Output.write(entries.map { LoudnessSurvey.json($0).serializedLine() }.joined())
    } else {
      Output.write(LoudnessSurvey.table(entries))
    }
    if let cache, entries.contains(where: { !$0.cached && (try? $0.outcome.get()) != nil }) {
      do throws(AudioError) { try cache.save() } catch { Output.error("loudness: \(error.message)") }
    }
    if failed { throw ExitCode(ClientFailure.ExitStatus.refused) }
  }
}

/// Redraws the progress line on standard error five times a second, from half a second on (a
/// quick measurement draws nothing), until stopped; then erases it.
private final class ProgressDrawer: Sendable {
  private let stopped = Atomic(false)
  private let done = DispatchSemaphore(value: 0)

  init(_ progress: LoudnessSurvey.Progress) {
    startThread(named: "rampctl-progress") { [self] in
      let start = Date()
      var drawn = false
      while !self.stopped.load(ordering: .acquiring) {
        usleep(200_000)
        guard Date().timeIntervalSince(start) >= 0.5, !self.stopped.load(ordering: .acquiring) else { continue }
        writeText("\r" + progress.text + "\u{1B}[K", to: 2)
        drawn = true
      }
      if drawn { writeText("\r\u{1B}[K", to: 2) }
      self.done.signal()
    }
  }

  func stop() {
    stopped.store(true, ordering: .releasing)
    done.wait()
  }
}
