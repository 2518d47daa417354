import Foundation

@testable import RampTestSupport

/// The kernel id of rampd's render thread in process `pid` (nil until it runs).
func renderThreadID(of pid: pid_t) -> pid_t? {
  threadID(named: "rampd-render", of: pid)
}

/// The kernel id of the thread of process `pid` named `name` (nil while there is none).
func threadID(named name: String, of pid: pid_t) -> pid_t? {
  let tasks = "/proc/\(pid)/task"
  for task in (try? FileManager.default.contentsOfDirectory(atPath: tasks)) ?? [] {
    guard let comm = try? String(contentsOfFile: "\(tasks)/\(task)/comm", encoding: .utf8),
      comm.trimmingCharacters(in: .whitespacesAndNewlines) == name, let tid = pid_t(task)
    else { continue }
    return tid
  }
  return nil
}

/// The render thread's scheduling policy (SCHED_OTHER, SCHED_FIFO...) and real-time priority,
/// as the kernel has them (fields 41 and 40 of its `stat`).
func renderThreadScheduling(_ pid: pid_t) -> (policy: Int32, priority: Int32)? {
  guard let thread = renderThreadID(of: pid),
    let stat = try? String(contentsOfFile: "/proc/\(pid)/task/\(thread)/stat", encoding: .utf8)
  else { return nil }
  // After the command name (which may hold spaces), fields from the third on.
  let fields = stat[stat.index(after: stat.lastIndex(of: ")")!)...].split(separator: " ")
  guard fields.count > 38, let priority = Int32(fields[37]), let policy = Int32(fields[38]) else { return nil }
  return (policy, priority)
}

/// How many times a thread has gone to sleep of its own accord so far (its
/// `voluntary_ctxt_switches`): each wake-up of a thread that sleeps between them counts one.
func voluntarySwitches(pid: pid_t, thread: pid_t) throws -> Int {
  try switchCount(in: "/proc/\(pid)/task/\(thread)/status")
}

/// `voluntarySwitches(pid:thread:)` once the thread is asleep: counted again every 100 ms until a
/// count holds (at most 2 s). A thread just woken to answer a request (a `status`) goes back to
/// sleep after the answer has left, and on a loaded machine that can come after a count taken
/// at once, as a wake-up.
func voluntarySwitchesOnceAsleep(pid: pid_t, thread: pid_t) throws -> Int {
  var count = try voluntarySwitches(pid: pid, thread: thread)
  for _ in 0..<20 {
    usleep(100_000)
    let now = try voluntarySwitches(pid: pid, thread: thread)
    if now == count { break }
    count = now
  }
  return count
}

/// The same, summed over every thread of process `pid` (an audio server's data and main loops).
func voluntarySwitches(pid: pid_t) throws -> Int {
  let tasks = "/proc/\(pid)/task"
  return try FileManager.default.contentsOfDirectory(atPath: tasks).reduce(0) {
    $0 + ((try? switchCount(in: "\(tasks)/\($1)/status")) ?? 0)
  }
}

/// The same for each thread of process `pid`, by name and id (`rampd-recovery/1234`).
func voluntarySwitchesByThread(pid: pid_t) -> [String: Int] {
  let tasks = "/proc/\(pid)/task"
  var counts: [String: Int] = [:]
  for task in (try? FileManager.default.contentsOfDirectory(atPath: tasks)) ?? [] {
    guard let comm = try? String(contentsOfFile: "\(tasks)/\(task)/comm", encoding: .utf8),
      let count = try? switchCount(in: "\(tasks)/\(task)/status")
    else { continue }
    counts["\(comm.trimmingCharacters(in: .whitespacesAndNewlines))/\(task)"] = count
  }
  return counts
}

private func switchCount(in statusFile: String) throws -> Int {
  let status = try String(contentsOfFile: statusFile, encoding: .utf8)
  guard let line = status.split(separator: "\n").first(where: { $0.hasPrefix("voluntary_ctxt_switches:") }),
    let count = Int(line.split(separator: "\t").last?.trimmingCharacters(in: .whitespaces) ?? "")
  else { throw HarnessError("no voluntary_ctxt_switches in \(statusFile)") }
  return count
}

/// Seconds of CPU each thread of process `pid` has run so far, by name (`schedstat`: to the
/// nanosecond, where `/proc/<pid>/stat` counts whole clock ticks).
func threadCPUSeconds(_ pid: pid_t) -> [String: Double] {
  let tasks = "/proc/\(pid)/task"
  var seconds: [String: Double] = [:]
  for task in (try? FileManager.default.contentsOfDirectory(atPath: tasks)) ?? [] {
    guard let comm = try? String(contentsOfFile: "\(tasks)/\(task)/comm", encoding: .utf8),
      let schedstat = try? String(contentsOfFile: "\(tasks)/\(task)/schedstat", encoding: .utf8),
      let nanoseconds = schedstat.split(separator: " ").first.flatMap({ Double($0) })
    else { continue }
    seconds["\(comm.trimmingCharacters(in: .whitespacesAndNewlines))/\(task)"] = nanoseconds / 1e9
  }
  return seconds
}
