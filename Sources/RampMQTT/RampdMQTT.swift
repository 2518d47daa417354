import ArgumentParser
import Dispatch
import FoundationEssentials
import RampProtocol
import RampSystem

#if canImport(Glibc)
  import Glibc
#endif

/// Run by this name (the package's link to rampd), rampd's executable is rampd-mqtt.
public struct RampdMQTT: ParsableCommand {
  public static let invokedName = "rampd-mqtt"

  public static let configuration = CommandConfiguration(
    commandName: invokedName,
    abstract: "Drive rampd from an MQTT broker: Home Assistant, Node-RED, a fleet of boxes.",
    discussion: """
      rampd-mqtt is a client of rampd's socket, as rampctl is, and of an MQTT broker. It applies \
      the commands published on rampd/BOX/... and rampd/all/... (set/KEY, fade/KEY, fade-out, \
      stop, play, next, previous, duck/RULE with ON or OFF; QoS 1), publishes the values heard, retained, on rampd/BOX/state/KEY, its \
      availability on rampd/BOX/availability (online, and offline as its Last Will), refusals on \
      rampd/BOX/error, and Home Assistant discovery configs under homeassistant/. A value is \
      written as rampctl reads it (0.5, 50%, -6dB) or as a JSON object \
      ({"value":0.25,"duration":2,"at":"2026-12-08T07:00:00Z"}). docs/MQTT.md has every topic.

      Environment: RAMPD_MQTT_BROKER, RAMPD_MQTT_BOX, RAMPD_MQTT_USERNAME and \
      RAMPD_MQTT_PASSWORD stand for the flags (the password is read from there or from \
      --password-file, never from the command line); RAMPD_SOCKET (or RAMPD_SOCKET_PATH) for \
      --socket.
      """,
    version: RampdBuild.version
  )

  @Option(help: "The broker, mqtt://HOST[:PORT] or mqtts://HOST[:PORT] for TLS (default mqtt://localhost:1883).")
  var broker: String?

  @Option(help: "This box's name in the topics (default: the host name).")
  var box: String?

  @Option(help: "rampd's socket (default: as rampctl finds it).")
  var socket: String?

  @Option(help: "The user name given to the broker.")
  var username: String?

  @Option(name: .customLong("password-file"), help: "A file whose first line is the broker password.")
  var passwordFile: String?

  @Option(help: "Certificate authorities to check the broker's certificate with (PEM); implies TLS.")
  var cafile: String?

  @Option(help: "A client certificate (PEM) for brokers that ask for one; with --key.")
  var cert: String?

  @Option(help: "The client certificate's private key (PEM).")
  var key: String?

  @Option(name: .customLong("client-id"), help: "The MQTT client id (default rampd-mqtt-BOX).")
  var clientID: String?

  @Flag(
    name: .customLong("clean-session"),
    help: "Start a fresh session at each connection: the broker then keeps no commands for the bridge while it is away."
  )
  var cleanSession = false

  @Option(name: .customLong("state-rate"), help: "State messages a second per key path, at most (default 5).")
  var stateRate: Double = 5

  @Option(
    name: .customLong("discovery-prefix"), help: "Home Assistant's discovery prefix (default homeassistant).")
  var discoveryPrefix = "homeassistant"

  @Flag(name: .customLong("no-discovery"), help: "Publish no Home Assistant discovery configs.")
  var noDiscovery = false

  public init() {}

  public mutating func run() throws {
    let environment = ProcessInfo.processInfo.environment
    let endpoint = try Self.broker(broker ?? environment["RAMPD_MQTT_BROKER"] ?? "mqtt://localhost:1883")
    let box = try Self.box(box ?? environment["RAMPD_MQTT_BOX"] ?? Self.hostName())
    guard stateRate >= 0.1, stateRate <= 50 else {
      throw ValidationError("--state-rate: \(stateRate) is outside 0.1 to 50 (messages a second)")
    }
    for (flag, path) in [("--cafile", cafile), ("--cert", cert), ("--key", key), ("--password-file", passwordFile)] {
      if let path, !FileManager.default.isReadableFile(atPath: path) {
        throw ValidationError("\(flag): cannot read \(path)")
      }
    }
    guard (cert == nil) == (key == nil) else { throw ValidationError("--cert and --key go together") }
    var password = environment["RAMPD_MQTT_PASSWORD"]
    if let passwordFile {
      let text = try String(contentsOfFile: passwordFile, encoding: .utf8)
      password = text.split(separator: "\n", omittingEmptySubsequences: false).first.map(String.init) ?? ""
    }
    let username = username ?? environment["RAMPD_MQTT_USERNAME"]
    if password != nil, username == nil {
      throw ValidationError("a password needs a user name: give --username or RAMPD_MQTT_USERNAME")
    }
    let clientID = clientID ?? "rampd-mqtt-\(box)"
    guard !clientID.isEmpty, clientID.utf8.count <= 128 else {
      throw ValidationError("--client-id: give 1 to 128 bytes")
    }
    guard !discoveryPrefix.isEmpty, !discoveryPrefix.contains(where: { "+#".contains($0) }) else {
      throw ValidationError("--discovery-prefix: '\(discoveryPrefix)' is not a topic prefix")
    }

    let socketPath = SocketLocation.clientPath(option: socket, environment: environment, isRoot: geteuid() == 0)
    let bridge = Bridge(
      settings: BridgeSettings(
        box: box, socket: socketPath, stateRate: stateRate, discoveryPrefix: noDiscovery ? "" : discoveryPrefix,
        maximumPercent: 100))
    let settings = BrokerSettings(
      host: endpoint.host, port: endpoint.port, tls: endpoint.tls || cafile != nil, clientID: clientID,
      cleanSession: cleanSession, username: username, password: password, caFile: cafile, certFile: cert,
      keyFile: key, willTopic: "\(bridge.prefix)/availability", willPayload: "offline")
    let client: MQTTClient
    do {
      client = try MQTTClient(
        settings: settings, onConnect: { bridge.brokerConnected($0) }, onMessage: { bridge.received($0) },
        onDisconnect: { bridge.brokerDisconnected($0) })
    } catch {
      throw ValidationError(error.description)
    }
    bridge.attach(client)

    signal(SIGTERM, SIG_IGN)
    signal(SIGINT, SIG_IGN)
    signal(SIGPIPE, SIG_IGN)
    // A parent may have left them blocked (the mask is inherited): they would never arrive.
    var stopping = sigset_t()
    sigemptyset(&stopping)
    sigaddset(&stopping, SIGTERM)
    sigaddset(&stopping, SIGINT)
    pthread_sigmask(SIG_UNBLOCK, &stopping, nil)
    let ended = DispatchSemaphore(value: 0)
    let signals = [SIGTERM, SIGINT].map { number in
      let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
      source.setEventHandler { ended.signal() }
      source.resume()
      return source
    }
    startThread(named: "rampd-mqtt rampd") { bridge.runRampdLink() }
    log(
      "bridging rampd at \(socketPath) to \(endpoint.tls || cafile != nil ? "mqtts" : "mqtt")://\(endpoint.host):"
        + "\(endpoint.port) as box \(box)")
    do { try client.start() } catch { throw ValidationError(error.description) }
    ended.wait()
    log("stopping")
    bridge.stop()
    withExtendedLifetime(signals) {}
  }

  /// `mqtt://HOST[:PORT]`, `mqtts://HOST[:PORT]`, or `HOST[:PORT]`.
  static func broker(_ text: String) throws -> (host: String, port: Int32, tls: Bool) {
    var rest = Substring(text)
    var tls = false
    if let range = rest.firstRange(of: "://") {
      let scheme = rest[..<range.lowerBound].lowercased()
      guard scheme == "mqtt" || scheme == "mqtts" else {
        throw ValidationError("--broker: '\(text)' is not mqtt://HOST[:PORT] or mqtts://HOST[:PORT]")
      }
      tls = scheme == "mqtts"
      rest = rest[range.upperBound...]
    }
    if rest.hasSuffix("/") { rest = rest.dropLast() }
    var host = rest
    var port: Int32 = tls ? 8883 : 1883
    if rest.hasPrefix("["), let close = rest.firstIndex(of: "]") {
      host = rest[rest.index(after: rest.startIndex)..<close]
      let after = rest[rest.index(after: close)...]
      if after.hasPrefix(":") {
        guard let number = Int32(after.dropFirst()), (1...65535).contains(number) else {
          throw ValidationError("--broker: '\(text)' has no port from 1 to 65535")
        }
        port = number
      }
    } else if let colon = rest.lastIndex(of: ":") {
      host = rest[..<colon]
      guard let number = Int32(rest[rest.index(after: colon)...]), (1...65535).contains(number) else {
        throw ValidationError("--broker: '\(text)' has no port from 1 to 65535")
      }
      port = number
    }
    guard !host.isEmpty, !host.contains("/"), !host.contains(where: \.isWhitespace) else {
      throw ValidationError("--broker: '\(text)' names no host")
    }
    return (String(host), port, tls)
  }

  /// A box name: one topic level, not `all` (every box's), without wildcards.
  static func box(_ name: String) throws -> String {
    guard !name.isEmpty, name.utf8.count <= 64 else { throw ValidationError("--box: give a name of 1 to 64 bytes") }
    guard !name.contains(where: { "/+#".contains($0) || $0.isWhitespace || $0.asciiValue.map { $0 < 32 } == true })
    else {
      throw ValidationError("--box: '\(name)' may not hold /, +, # or blanks (it is one topic level)")
    }
    guard name != "all" else { throw ValidationError("--box: 'all' is the topic of every box; choose another name") }
    return name
  }

  /// The host name up to its first dot.
  static func hostName() -> String {
    var buffer = [CChar](repeating: 0, count: 256)
    guard gethostname(&buffer, buffer.count) == 0 else { return "rampd" }
    let name = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    return name.split(separator: ".").first.map(String.init) ?? "rampd"
  }
}
