import RampAudio
import RampProtocol

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// `status`'s account of the render thread's real time and the memory lock: granted or not, and
/// when not, why (the limit, or the kernel's error number) and how to get it.
enum RealtimeStatus {
  static func scheduling(_ scheduling: RealtimeScheduling) -> JSONObject {
    var object: JSONObject = ["granted": .bool(scheduling.granted), "priority": .integer(scheduling.priority)]
    if let limit = scheduling.limit, limit != Int.max { object["limit"] = .integer(limit) }
    guard !scheduling.granted else { return object }
    let session =
      "the system unit sets LimitRTPRIO=95; run as a user (a user unit, a terminal), the limit comes from the session, "
      + "/etc/security/limits.d (\"@audio - rtprio 95\"), which a user unit cannot raise; rampd does not ask RTKit"
    if let error = scheduling.error {
      object["reason"] = "refused"
      object["errno"] = .integer(Int(error))
      object["error"] = .string(errorName(error))
      object["message"] = .string(
        error == EPERM
          ? "no permission (EPERM): the limit allows SCHED_FIFO but the kernel refused it: a sandbox "
            + "(RestrictRealtime=, a seccomp filter without sched_setscheduler) or a control group without a "
            + "real-time budget (CONFIG_RT_GROUP_SCHED)"
          : "the kernel refused SCHED_FIFO (\(errorName(error)))")
    } else if scheduling.limit == nil {
      object["reason"] = "starting"
      object["message"] = .string("the render thread has not asked yet")
    } else if scheduling.limit == 0 {
      object["reason"] = "limit"
      object["message"] = .string("RLIMIT_RTPRIO is 0, so rampd does not ask for real time: " + session)
    } else {
      object["reason"] = "reset"
      object["message"] = .string("granted at start, since set back to normal priority from outside (chrt)")
    }
    return object
  }

  static func memory(_ lock: MemoryLock) -> JSONObject {
    var object: JSONObject = ["granted": .bool(lock.granted)]
    if lock.limit != Int.max { object["limit"] = .integer(lock.limit) }
    guard !lock.granted else { return object }
    if let error = lock.error {
      object["reason"] = "refused"
      object["errno"] = .integer(Int(error))
      object["error"] = .string(errorName(error))
      let message =
        switch error {
        case EPERM: "no permission (EPERM): a seccomp filter without mlockall (SystemCallFilter= without @memlock)"
        case ENOMEM: "the memory mapped exceeds RLIMIT_MEMLOCK (ENOMEM): LimitMEMLOCK=infinity"
        default: "mlockall failed (\(errorName(error)))"
        }
      object["message"] = .string(message)
    } else {
      object["reason"] = "limit"
      object["message"] = .string(
        "RLIMIT_MEMLOCK is \(lock.limit / 1024) KiB: rampd locks its memory only where that limit is unlimited "
          + "(the system unit sets LimitMEMLOCK=infinity) or it may lock past it (CAP_IPC_LOCK), since a finite limit "
          + "would also refuse memory it maps later; run as a user, the limit comes from the session, "
          + "/etc/security/limits.d (\"@audio - memlock unlimited\"), which a user unit cannot raise")
    }
    return object
  }

  /// The symbolic name of the error numbers these calls return.
  static func errorName(_ error: Int32) -> String {
    switch error {
    case EPERM: "EPERM"
    case EINVAL: "EINVAL"
    case ENOMEM: "ENOMEM"
    case EAGAIN: "EAGAIN"
    case ESRCH: "ESRCH"
    default: "errno \(error)"
    }
  }
}
