import CMosquitto
import FoundationEssentials
import RampSystem

#if canImport(Glibc)
  import Glibc
#endif

/// One message received from the broker.
struct MQTTMessage: Sendable {
  var topic: String
  var payload: [UInt8]
  var qos: Int32
  var retained: Bool
}

/// How to reach the broker and who to be there.
struct BrokerSettings: Sendable {
  var host: String
  var port: Int32
  var tls: Bool
  var clientID: String
  /// false: a persistent session, so the broker keeps the subscriptions and queues QoS 1
  /// messages while the bridge is away (with a fixed client id).
  var cleanSession: Bool
  var username: String?
  var password: String?
  var caFile: String?
  var certFile: String?
  var keyFile: String?
  var keepAlive: Int32 = 30
  /// The back-off between attempts to reach the broker again: from `minimum` seconds, doubling
  /// up to `maximum`.
  var reconnectMinimum: UInt32 = 1
  var reconnectMaximum: UInt32 = 30
  /// The Last Will: published by the broker, retained, when the bridge vanishes without saying.
  var willTopic: String
  var willPayload: String
}

/// libmosquitto's client with its own network thread (`mosquitto_loop_start`): it connects,
/// reconnects with back-off when the broker goes away, and calls `onConnect`, `onMessage` and
/// `onDisconnect` on that thread. `publish` and `subscribe` may be called from any thread.
final class MQTTClient: @unchecked Sendable {
  private let handle: OpaquePointer
  private let settings: BrokerSettings
  private let onConnect: @Sendable (Int32) -> Void
  private let onMessage: @Sendable (MQTTMessage) -> Void
  private let onDisconnect: @Sendable (Int32) -> Void

  private static let initialised: Void = { _ = mosquitto_lib_init() }()

  init(
    settings: BrokerSettings, onConnect: @escaping @Sendable (Int32) -> Void,
    onMessage: @escaping @Sendable (MQTTMessage) -> Void, onDisconnect: @escaping @Sendable (Int32) -> Void
  ) throws(BridgeFailure) {
    _ = Self.initialised
    guard let handle = mosquitto_new(settings.clientID, settings.cleanSession, nil) else {
      throw BridgeFailure("cannot make an MQTT client: \(Self.errnoText())")
    }
    self.handle = handle
    self.settings = settings
    self.onConnect = onConnect
    self.onMessage = onMessage
    self.onDisconnect = onDisconnect
    mosquitto_user_data_set(handle, Unmanaged.passUnretained(self).toOpaque())
    mosquitto_connect_callback_set(handle) { _, context, code in
      guard let context else { return }
      Unmanaged<MQTTClient>.fromOpaque(context).takeUnretainedValue().onConnect(code)
    }
    mosquitto_disconnect_callback_set(handle) { _, context, code in
      guard let context else { return }
      Unmanaged<MQTTClient>.fromOpaque(context).takeUnretainedValue().onDisconnect(code)
    }
    mosquitto_message_callback_set(handle) { _, context, message in
      guard let context, let message else { return }
      let received = message.pointee
      let topic = String(cString: received.topic)
      var payload: [UInt8] = []
      if let bytes = received.payload, received.payloadlen > 0 {
        payload = Array(UnsafeRawBufferPointer(start: bytes, count: Int(received.payloadlen)))
      }
      Unmanaged<MQTTClient>.fromOpaque(context).takeUnretainedValue().onMessage(
        MQTTMessage(topic: topic, payload: payload, qos: received.qos, retained: received.retain))
    }
    try configure()
  }

  deinit { mosquitto_destroy(handle) }

  private func configure() throws(BridgeFailure) {
    try check(mosquitto_int_option(handle, MOSQ_OPT_PROTOCOL_VERSION, Int32(MQTT_PROTOCOL_V311)), "protocol version")
    try check(
      mosquitto_will_set(
        handle, settings.willTopic, Int32(settings.willPayload.utf8.count), settings.willPayload, 1, true),
      "Last Will")
    if settings.username != nil || settings.password != nil {
      try check(mosquitto_username_pw_set(handle, settings.username, settings.password), "credentials")
    }
    if settings.tls {
      // Without --cafile, the system's certificate authorities.
      if settings.caFile == nil { try check(mosquitto_int_option(handle, MOSQ_OPT_TLS_USE_OS_CERTS, 1), "TLS") }
      if settings.caFile != nil || settings.certFile != nil {
        try check(
          mosquitto_tls_set(handle, settings.caFile, nil, settings.certFile, settings.keyFile, nil), "--cafile/--cert")
      }
    }
    try check(
      mosquitto_reconnect_delay_set(handle, settings.reconnectMinimum, settings.reconnectMaximum, true), "back-off")
    // Replies to the time-critical commands should not wait for Nagle.
    _ = mosquitto_int_option(handle, MOSQ_OPT_TCP_NODELAY, 1)
  }

  /// Starts the network thread and the first attempt to connect; a broker not reached yet is
  /// tried again with back-off.
  func start() throws(BridgeFailure) {
    let code = mosquitto_connect_async(handle, settings.host, settings.port, settings.keepAlive)
    if code != MOSQ_ERR_SUCCESS.rawValue {
      // Not fatal: the loop tries again (a broker that starts after the bridge).
      log("cannot reach the broker at \(settings.host):\(settings.port) yet: \(Self.describe(code)); trying again")
    }
    try check(mosquitto_loop_start(handle), "network thread")
  }

  /// Says goodbye to the broker (no Last Will then) and ends the network thread.
  func stop() {
    mosquitto_disconnect(handle)
    mosquitto_loop_stop(handle, false)
  }

  @discardableResult
  func publish(_ topic: String, _ payload: String, qos: Int32 = 1, retain: Bool = false) -> Bool {
    let bytes = Array(payload.utf8)
    let code = bytes.withUnsafeBytes { raw in
      mosquitto_publish(handle, nil, topic, Int32(raw.count), raw.baseAddress, qos, retain)
    }
    return code == MOSQ_ERR_SUCCESS.rawValue
  }

  func subscribe(_ patterns: [String], qos: Int32 = 1) {
    for pattern in patterns {
      let code = mosquitto_subscribe(handle, nil, pattern, qos)
      if code != MOSQ_ERR_SUCCESS.rawValue { log("cannot subscribe to \(pattern): \(Self.describe(code))") }
    }
  }

  private func check(_ code: Int32, _ what: String) throws(BridgeFailure) {
    guard code == MOSQ_ERR_SUCCESS.rawValue else { throw BridgeFailure("\(what): \(Self.describe(code))") }
  }

  static func describe(_ code: Int32) -> String {
    if code == MOSQ_ERR_ERRNO.rawValue { return errnoText() }
    return String(cString: mosquitto_strerror(code))
  }

  /// The broker's CONNACK code in words (`not authorised`).
  static func describe(connack code: Int32) -> String { String(cString: mosquitto_connack_string(code)) }

  private static func errnoText() -> String { String(cString: strerror(errno)) }
}

/// A failure that ends rampd-mqtt, said in words.
struct BridgeFailure: Error, CustomStringConvertible {
  let description: String
  init(_ description: String) { self.description = description }
}

/// One line on standard error (the journal, under systemd).
func log(_ line: String) {
  writeText("rampd-mqtt: \(line)\n", to: STDERR_FILENO)
}
