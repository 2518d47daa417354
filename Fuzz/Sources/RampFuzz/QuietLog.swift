import Logging

/// Renders every log line, at every level, and drops it: the daemon's log messages and metadata
/// are built (and fuzzed) without flooding libFuzzer's output.
struct QuietLogHandler: LogHandler {
  var metadata: Logger.Metadata = [:]
  var metadataProvider: Logger.MetadataProvider?
  var logLevel: Logger.Level = .trace

  subscript(metadataKey key: String) -> Logger.Metadata.Value? {
    get { metadata[key] }
    set { metadata[key] = newValue }
  }

  func log(event: LogEvent) {
    var line = "\(event.level) \(event.message)"
    for (key, value) in (event.metadata ?? [:]).sorted(by: { $0.key < $1.key }) { line += " \(key)=\(value)" }
    _ = line.utf8.count
  }
}
