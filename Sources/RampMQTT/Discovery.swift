import RampProtocol

/// Home Assistant's MQTT discovery: retained config messages under
/// `homeassistant/<component>/<box>_<object>/config` from which it makes entities, all of one
/// device (the box), all unavailable while `rampd/<box>/availability` says `offline`.
struct Discovery {
  let box: String
  /// The topics' prefix, `rampd/<box>`.
  let prefix: String
  /// The prefix of the configs (Home Assistant's `discovery_prefix`, `homeassistant`).
  let discoveryPrefix: String
  /// The highest gain a number entity offers, in percent (`[gain] max` of rampd: 100 = 0 dB).
  let maximumPercent: Double

  /// The box name as it may appear in an entity id: letters, digits, `_` and `-`.
  var objectBox: String { Self.objectID(box) }

  static func objectID(_ text: String) -> String {
    String(text.map { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_" || $0 == "-") ? $0 : "_" })
  }

  private func device(version: String) -> JSONValue {
    var device: JSONObject = [
      "identifiers": [.string("rampd_\(objectBox)")], "name": .string("rampd \(box)"), "manufacturer": "rampd",
      "model": "rampd-mqtt",
    ]
    if !version.isEmpty { device["sw_version"] = .string(version) }
    return .object(device)
  }

  private func base(object: String, name: String, version: String) -> JSONObject {
    [
      "name": .string(name), "unique_id": .string("rampd_\(objectBox)_\(object)"),
      "object_id": .string("rampd_\(objectBox)_\(object)"), "availability_topic": .string("\(prefix)/availability"),
      "payload_available": "online", "payload_not_available": "offline", "device": device(version: version),
    ]
  }

  /// A gain as a percentage slider: Home Assistant sends `NN%`, which the bridge reads as rampctl
  /// does; the state (an amplitude) is shown in percent.
  private func gain(object: String, name: String, key: String, version: String) -> (String, String) {
    var config = base(object: object, name: name, version: version)
    config["command_topic"] = .string("\(prefix)/set/\(key)")
    config["command_template"] = "{{ value }}%"
    config["state_topic"] = .string("\(prefix)/state/\(key)")
    config["value_template"] = "{{ (value | float * 100) | round(1) }}"
    config["min"] = 0
    config["max"] = .number(maximumPercent)
    config["step"] = 0.5
    config["mode"] = "slider"
    config["unit_of_measurement"] = "%"
    config["icon"] = "mdi:volume-high"
    return (topic("number", object), JSONValue.object(config).serialized())
  }

  private func button(object: String, name: String, command: String, icon: String, version: String) -> (
    String, String
  ) {
    var config = base(object: object, name: name, version: version)
    config["command_topic"] = .string("\(prefix)/\(command)")
    config["payload_press"] = "PRESS"
    config["icon"] = .string(icon)
    return (topic("button", object), JSONValue.object(config).serialized())
  }

  private func topic(_ component: String, _ object: String) -> String {
    "\(discoveryPrefix)/\(component)/\(objectBox)_\(object)/config"
  }

  /// The box's own entities: its master gain and the fade-out and stop buttons.
  func boxConfigs(version: String) -> [(topic: String, payload: String)] {
    [
      gain(object: "master_gain", name: "Master gain", key: "master.gain", version: version),
      button(object: "fade_out", name: "Fade out", command: "fade-out", icon: "mdi:volume-minus", version: version),
      button(object: "stop", name: "Stop", command: "stop", icon: "mdi:stop", version: version),
    ]
  }

  /// A duck rule as a switch: ON holds it down (`duck`), OFF lets it go (`unduck`); its state is
  /// whether it is held (duck-list's `manual`). The topic with an empty payload removes it when
  /// the rule is gone.
  func duckConfig(rule: String, version: String) -> (topic: String, payload: String) {
    let object = "duck_\(Self.objectID(rule))"
    var config = base(object: object, name: "Duck \(rule)", version: version)
    config["command_topic"] = .string("\(prefix)/duck/\(rule)")
    config["state_topic"] = .string("\(prefix)/state/duck/\(rule)")
    config["payload_on"] = "ON"
    config["payload_off"] = "OFF"
    config["state_on"] = "ON"
    config["state_off"] = "OFF"
    config["icon"] = "mdi:volume-low"
    return (topic("switch", object), JSONValue.object(config).serialized())
  }

  /// A queue stream's skip buttons, next and previous: each publishes the stream's name on
  /// `next` or `previous`. Their topics with an empty payload remove them when the stream ends.
  func queueConfigs(stream: String, version: String) -> [(topic: String, payload: String)] {
    [("next", "Next", "mdi:skip-next"), ("previous", "Previous", "mdi:skip-previous")].map { command, label, icon in
      let object = "stream_\(Self.objectID(stream))_\(command)"
      var config = base(object: object, name: "Stream \(stream) \(label.lowercased())", version: version)
      config["command_topic"] = .string("\(prefix)/\(command)")
      config["payload_press"] = .string(stream)
      config["icon"] = .string(icon)
      return (topic("button", object), JSONValue.object(config).serialized())
    }
  }

  /// A playing stream's gain; its topic with an empty payload removes it when the stream ends.
  func streamConfig(stream: String, version: String) -> (topic: String, payload: String) {
    gain(
      object: "stream_\(Self.objectID(stream))_gain", name: "Stream \(stream) gain", key: "streams.\(stream).gain",
      version: version)
  }
}
