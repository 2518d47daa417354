import Foundation

#if canImport(Glibc)
  import Glibc
#endif

/// User and system CPU time of a process, in seconds (/proc/PID/stat's utime and stime).
func cpuSeconds(_ pid: pid_t) throws -> Double {
  let stat = try String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8)
  // Fields after the command name (which may hold spaces), from the third on: utime and stime are 14 and 15.
  let fields = stat[stat.index(after: stat.lastIndex(of: ")")!)...].split(separator: " ")
  guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else {
    throw HarnessError("cannot read /proc/\(pid)/stat")
  }
  return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
}
