/// `"repeat"`: how a scheduled request comes back after it has taken effect.
///
/// `{"time": "07:00", "days": ["mon", "tue", "wed", "thu", "fri"]}`: at that local time (the
/// daemon's time zone) on those days (every day without `days`). `{"every": 90}`: every 90
/// seconds, the first at `at` (or one interval after the request arrives).
public enum Recurrence: Sendable, Equatable {
  /// A local time of day, `seconds` after midnight, on `days` (0 Sunday … 6 Saturday).
  case daily(seconds: Int, days: Set<Int>)
  /// Every `seconds`, at least `minimumInterval`.
  case every(seconds: Double)

  /// The shortest interval: one second, so a repeat cannot flood the render thread.
  public static let minimumInterval = 1.0
  /// Day names as the wire writes them, index 0 Sunday.
  public static let dayNames = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]
  public static let weekdays: Set<Int> = [1, 2, 3, 4, 5]
  public static let everyDay: Set<Int> = Set(0..<7)

  public var json: JSONValue {
    switch self {
    case .daily(let seconds, let days):
      var object: JSONObject = ["time": .string(Self.clock(seconds))]
      if days != Self.everyDay {
        // Monday first, as people list a week.
        object["days"] = .array([1, 2, 3, 4, 5, 6, 0].filter(days.contains).map { .string(Self.dayNames[$0]) })
      }
      return .object(object)
    case .every(let seconds): return ["every": .number(seconds)]
    }
  }

  /// `07:00` or `07:00:30`.
  public static func clock(_ seconds: Int) -> String {
    func two(_ value: Int) -> String { value < 10 ? "0\(value)" : "\(value)" }
    let text = "\(two(seconds / 3600)):\(two(seconds / 60 % 60))"
    return seconds % 60 == 0 ? text : text + ":\(two(seconds % 60))"
  }

  /// For people: `weekdays 07:00`, `daily 07:00`, `mon,sat 07:00`, `every 90s`.
  public var summary: String {
    switch self {
    case .daily(let seconds, let days):
      let which =
        days == Self.everyDay
        ? "daily"
        : days == Self.weekdays
          ? "weekdays" : [1, 2, 3, 4, 5, 6, 0].filter(days.contains).map { Self.dayNames[$0] }.joined(separator: ",")
      return "\(which) \(Self.clock(seconds))"
    case .every(let seconds): return "every \(JSONValue.format(seconds))s"
    }
  }

  /// Reads a `repeat` object as the wire writes it.
  public init(json: JSONValue) throws(ProtocolError) {
    self = try Self.parse(json, field: "repeat")
  }

  static func parse(_ value: JSONValue, field: String) throws(ProtocolError) -> Recurrence {
    guard case .object(let object) = value else {
      throw .at(
        field, .invalidField,
        "expected {\"time\": \"07:00\", \"days\": [\"mon\", …]} or {\"every\": seconds}, got \(describe(value))")
    }
    let r = try FieldReader(
      object, prefix: field + ".", allowed: ProtocolSchema.recurrenceFields.map(\.name), context: "repeat",
      options: ParseOptions())
    switch (r.value("time"), r.value("every")) {
    case (nil, nil):
      throw .at(field, .missingField, "give time (a local time of day) or every (seconds)")
    case (_?, _?):
      throw r.invalid("every", "give time or every, not both")
    case (let time?, nil):
      guard case .string(let text) = time, let seconds = clockSeconds(text) else {
        throw r.invalid("time", "expected a time of day HH:MM or HH:MM:SS (00:00 to 23:59:59), got \(describe(time))")
      }
      var days = everyDay
      if let listed = try r.array("days", limit: 7) {
        guard !listed.isEmpty else { throw r.invalid("days", "name at least one day, or leave days out for every day") }
        days = []
        for (index, element) in listed.enumerated() {
          guard case .string(let name) = element, let day = dayNames.firstIndex(of: name.lowercased()) else {
            throw .at(
              r.path("days[\(index)]"), .invalidField,
              "expected one of \(dayNames.joined(separator: ", ")), got \(describe(element))")
          }
          days.insert(day)
        }
      }
      return .daily(seconds: seconds, days: days)
    case (nil, let every?):
      if r.has("days") { throw r.invalid("days", "only a repeat with time takes days") }
      let seconds = try FieldReader.seconds(every, r.path("every"))
      guard seconds >= minimumInterval else {
        throw .at(
          r.path("every"), .outOfRange,
          "must be at least \(JSONValue.format(minimumInterval)) s, got \(JSONValue.format(seconds))")
      }
      return .every(seconds: seconds)
    }
  }

  /// Seconds after midnight of `HH:MM` or `HH:MM:SS`.
  public static func clockSeconds(_ text: String) -> Int? {
    let parts = text.split(separator: ":", omittingEmptySubsequences: false)
    guard (2...3).contains(parts.count), parts[0].count <= 2, parts.dropFirst().allSatisfy({ $0.count == 2 }),
      parts.allSatisfy({ !$0.isEmpty && $0.utf8.allSatisfy { $0 >= 48 && $0 <= 57 } })
    else { return nil }
    let values = parts.map { Int($0) ?? -1 }
    guard values[0] < 24, values[1] < 60, values.count == 2 || values[2] < 60 else { return nil }
    return values[0] * 3600 + values[1] * 60 + (values.count == 3 ? values[2] : 0)
  }

  /// The first occurrence strictly after `after` (Unix seconds). `offset` gives the local time
  /// zone's offset from UTC in seconds at an instant (`LocalClock.offset`), so that
  /// the local times follow daylight-saving changes:
  ///
  /// - A time that does not exist that day (skipped when clocks go forward) takes effect as far
  ///   after the change as it was meant to be after its start: 02:30 on a day that jumps from
  ///   02:00 to 03:00 is 03:30.
  /// - A time that happens twice (the hour repeated when clocks go back) takes effect once, at
  ///   the first.
  ///
  /// An interval counts real seconds from `start` (the first occurrence), whatever the clocks.
  public func next(after: Double, start: Double, offset: (Double) -> Int) -> Double {
    switch self {
    case .every(let seconds):
      guard after >= start else { return start }
      let steps = ((after - start) / seconds).rounded(.down) + 1
      return start + steps * seconds
    case .daily(let seconds, let days):
      let localNow = after + Double(offset(after))
      var day = Int((localNow / 86_400).rounded(.down))
      // A week and a day always hold a wanted day whose time has not yet passed.
      for _ in 0..<9 {
        defer { day += 1 }
        guard days.contains(((day + 4) % 7 + 7) % 7) else { continue }
        let instant = Self.instant(localSeconds: Double(day * 86_400 + seconds), offset: offset)
        if instant > after { return instant }
      }
      return .infinity
    }
  }

  /// The instant showing a local wall-clock time (seconds since the epoch as if local were UTC).
  private static func instant(localSeconds local: Double, offset: (Double) -> Int) -> Double {
    LocalClock.instant(wallClock: local, offset: offset)
  }
}
