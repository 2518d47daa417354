import Logging
import RampEngine
import RampProtocol
import RampSystem
import Synchronization

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// Talks to the service manager through `$NOTIFY_SOCKET` (sd_notify(3)): READY, STATUS,
/// RELOADING, STOPPING and WATCHDOG. Without the variable (started by hand) it does nothing.
public final class ServiceNotifier: Sendable {
  private let address: String?
  /// Microseconds between watchdog pings the manager expects (`$WATCHDOG_USEC`), if it asks.
  public let watchdogInterval: Double?

  public init(environment: [String: String]) {
    let path = environment["NOTIFY_SOCKET"].flatMap { $0.isEmpty ? nil : $0 }
    address = path.flatMap { $0.hasPrefix("/") || $0.hasPrefix("@") ? $0 : nil }
    let forUs = environment["WATCHDOG_PID"].map { Int32($0) == getpid() } ?? true
    if forUs, let micro = environment["WATCHDOG_USEC"].flatMap(Double.init), micro > 0 {
      watchdogInterval = micro / 1e6
    } else {
      watchdogInterval = nil
    }
  }

  public var isActive: Bool { address != nil }

  public func ready(status: String) { send("READY=1\nSTATUS=\(status)") }
  public func status(_ status: String) { send("STATUS=\(status)") }
  public func watchdog() { send("WATCHDOG=1") }
  public func stopping(status: String) { send("STOPPING=1\nSTATUS=\(status)") }

  /// Type=notify-reload (systemd 253+) needs the monotonic time of the reload's start.
  public func reloading() {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    let micro = UInt64(now.tv_sec) * 1_000_000 + UInt64(now.tv_nsec) / 1000
    send("RELOADING=1\nMONOTONIC_USEC=\(micro)\nSTATUS=reloading the configuration")
  }

  /// One datagram; a failure is not worth more than ignoring (the manager may be gone).
  public func send(_ message: String) {
    guard let address else { return }
    let descriptor = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    guard descriptor >= 0 else { return }
    defer { close(descriptor) }
    guard let destination = UnixAddress(address) else { return }
    let payload = Array(message.utf8)
    _ = destination.withSocketAddress { socketAddress, length in
      payload.withUnsafeBytes {
        sendto(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL), socketAddress, length)
      }
    }
  }
}

/// Log lines for the journal or a terminal. Under systemd (`$JOURNAL_STREAM` names our standard
/// error) each line starts with its syslog priority, `<5>`, and carries no timestamp: journald
/// adds both. Elsewhere: a timestamp and the level's name.
public struct DaemonLogHandler: LogHandler {
  public var metadata: Logger.Metadata = [:]
  public var logLevel: Logger.Level {
    get { Logger.Level.allCases[Int(level.threshold.load(ordering: .relaxed))] }
    set { level.threshold.store(UInt8(Logger.Level.allCases.firstIndex(of: newValue)!), ordering: .relaxed) }
  }
  private let level: SharedLevel
  private let journal: Bool

  /// The level every handler made from it follows, so a reload can change it for all at once.
  public final class SharedLevel: Sendable {
    let threshold: Atomic<UInt8>
    public init(_ level: Logger.Level) {
      threshold = Atomic(UInt8(Logger.Level.allCases.firstIndex(of: level)!))
    }
    public func set(_ level: Logger.Level) {
      threshold.store(UInt8(Logger.Level.allCases.firstIndex(of: level)!), ordering: .relaxed)
    }
  }

  public init(level: SharedLevel, environment: [String: String]) {
    self.level = level
    journal = Self.standardErrorIsJournal(environment)
  }

  public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
    get { metadata[key] }
    set { metadata[key] = newValue }
  }

  public func log(event: LogEvent) {
    var line = journal ? "<\(Self.priority(event.level))>" : "\(Self.timestamp()) \(event.level) "
    line += event.message.description
    let all = metadata.merging(event.metadata ?? [:]) { $1 }
    if !all.isEmpty {
      line += " " + all.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
    }
    line += "\n"
    writeText(line, to: 2)
  }

  /// sd-daemon(3)'s prefixes: syslog priorities.
  static func priority(_ level: Logger.Level) -> Int {
    switch level {
    case .trace, .debug: 7
    case .info: 6
    case .notice: 5
    case .warning: 4
    case .error: 3
    case .critical: 2
    }
  }

  /// `$JOURNAL_STREAM` is `device:inode` of the journal's stream; it counts only when standard
  /// error is that very stream (not redirected by a wrapper).
  static func standardErrorIsJournal(_ environment: [String: String]) -> Bool {
    guard let stream = environment["JOURNAL_STREAM"] else { return false }
    let parts = stream.split(separator: ":")
    guard parts.count == 2, let device = UInt64(parts[0]), let inode = UInt64(parts[1]) else { return false }
    var info = stat()
    guard fstat(2, &info) == 0 else { return false }
    return UInt64(info.st_dev) == device && UInt64(info.st_ino) == inode
  }

  static func timestamp() -> String {
    var now = timespec()
    clock_gettime(CLOCK_REALTIME, &now)
    let seconds = Int(now.tv_sec)
    let parts = LocalClock.fields(seconds + LocalClock.offset(Double(seconds)))
    func pad(_ value: Int, _ width: Int = 2) -> String {
      let digits = String(value)
      return String(repeating: "0", count: max(0, width - digits.count)) + digits
    }
    return "\(pad(parts.year, 4))-\(pad(parts.month))-\(pad(parts.day)) "
      + "\(pad(parts.hour)):\(pad(parts.minute)):\(pad(parts.second)).\(pad(Int(now.tv_nsec) / 1_000_000, 3))"
  }
}
