import ArgumentParser
import FoundationEssentials
import RampCLI
import RampEngine
import RampProtocol
import RampSystem

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// `--daily`, `--weekdays` and `--days`: the days a schedule at a time of day comes back on. The
/// time is the command's own (`--at`'s, `alarm`'s <time>), so the help names none.
struct DayOptions: ParsableArguments {
  @Flag(help: "Repeat every day at that time of day (local time).")
  var daily = false

  @Flag(help: "Repeat Monday to Friday at that time of day (local time).")
  var weekdays = false

  @Option(
    help: ArgumentHelp("Repeat on these days at that time of day: mon,tue,wed,thu,fri,sat,sun.", valueName: "days"))
  var days: String?

  /// How many of them are given.
  var count: Int { [daily, weekdays, days != nil].filter { $0 }.count }

  /// The repeat at the time of day `time` on the days asked for; nil when none is asked for.
  func recurrence(time: () throws -> Int) throws -> Recurrence? {
    guard count > 0 else { return nil }
    guard count == 1 else { throw ValidationError("give one of --daily, --weekdays and --days") }
    var chosen = daily ? Recurrence.everyDay : Recurrence.weekdays
    if let days {
      chosen = []
      for name in days.split(separator: ",", omittingEmptySubsequences: false) {
        let word = name.trimmingWhitespace().lowercased()
        guard let day = Recurrence.dayNames.firstIndex(where: { word.hasPrefix($0) && $0.count <= word.count }) else {
          throw ValidationError("--days: '\(name)' is not a day; expected mon,tue,wed,thu,fri,sat,sun")
        }
        chosen.insert(day)
      }
    }
    return .daily(seconds: try time(), days: chosen)
  }
}

/// `--daily`, `--weekdays`, `--days` and `--every`: how a schedule given `--at` repeats (`"repeat"`).
struct RepeatOptions: ParsableArguments {
  @OptionGroup var onDays: DayOptions

  @Option(
    parsing: .unconditional,
    help: ArgumentHelp(
      "Repeat every interval (real time: 90s, 30m, 1h), the first at --at or one interval from now.",
      valueName: "interval"))
  var every: String?

  var isGiven: Bool { onDays.count > 0 || every != nil }

  /// The repeat, with `time` the time of day the daily forms take; nil when none is asked for.
  func recurrence(time: () throws -> Int) throws -> Recurrence? {
    guard onDays.count + (every == nil ? 0 : 1) <= 1 else {
      throw ValidationError("give one of --daily, --weekdays, --days and --every")
    }
    if let every {
      let seconds = try Parse.duration(every, "--every")
      guard seconds >= Recurrence.minimumInterval else {
        throw ValidationError("--every: at least \(JSONValue.format(Recurrence.minimumInterval))s, got '\(every)'")
      }
      return .every(seconds: seconds)
    }
    return try onDays.recurrence(time: time)
  }
}

/// `--at` and the repeat options, on every command that changes sound.
struct ScheduleOptions: ParsableArguments {
  @Option(
    help: ArgumentHelp(
      "Take effect later: a time of day (23:00, 07:30:15: the next to come, local time), a date (RFC 3339, or "
        + "2026-11-21 07:30 in local time) or a delay (+20m, 90s). rampd saves the schedule, so it survives a "
        + "restart; rampctl returns at once (with --wait: once it has taken effect and its ramp has ended). A "
        + "date already past is not scheduled: the command runs at once, and rampctl says so.",
      valueName: "when"))
  var at: String?

  @OptionGroup var repeating: RepeatOptions

  /// `request` scheduled by `--at` and the repeat options (and saved by rampd), if given and not
  /// already past. With `waiting`, rampd replies when it takes effect (so rampctl can wait for
  /// the ramp); else at once.
  func scheduled(_ request: Request, waiting: Bool, now: Date = Date()) throws -> Request {
    let repeats = try repeating.recurrence {
      guard let at, let seconds = Recurrence.clockSeconds(Arguments.restoringMinus(at)) else {
        throw ValidationError("--daily, --weekdays and --days need --at with a time of day (07:00, 22:30:15)")
      }
      return seconds
    }
    var scheduled = request
    if let repeats {
      if waiting { throw ValidationError("--wait: a repeating schedule is answered at once; leave out --wait") }
      scheduled.repeats = repeats
      scheduled.ack = .scheduled
      if case .every = repeats, let at { scheduled.at = try Parse.when(at, "--at", now: now) }
      return scheduled
    }
    guard let at else { return request }
    let when = try Parse.when(at, "--at", now: now)
    if case .date(let date) = when, date <= now.timeIntervalSince1970 { return request }
    scheduled.at = when
    scheduled.ack = waiting ? .applied : .scheduled
    return scheduled
  }
}
